// A bound on JSON nesting, checked before a file is parsed: nlohmann's dump()
// and copies recurse once per level, so a model file of a million nested
// brackets would otherwise overflow the stack where it is printed.
#pragma once

#include <cstdint>
#include <string_view>

namespace encoderd {

// Files nested deeper than this are refused (tokenizer files nest 5 deep;
// config.json files and safetensors headers a few levels).
inline constexpr int kMaxJsonDepth = 64;

// Whether `text`'s brackets (outside strings) nest at most `limit` deep.
inline bool JsonDepthAtMost(std::string_view text, int limit = kMaxJsonDepth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

}  // namespace encoderd
