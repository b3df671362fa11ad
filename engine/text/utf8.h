// UTF-8 validation and decoding shared by the tokenizers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace encoderd {

// True when `text` is well-formed UTF-8 (no overlongs, surrogates or code
// points above U+10FFFF).
bool IsValidUtf8(std::string_view text);
// Byte offset of the first malformed sequence, or npos when `text` is valid.
size_t FirstInvalidUtf8Offset(std::string_view text);
// Decodes well-formed UTF-8 (check IsValidUtf8 first) into code points.
std::vector<char32_t> DecodeUtf8(std::string_view text);
void AppendUtf8(char32_t cp, std::string* out);
// The start of the UTF-8 character that holds byte `pos` of `text`
// (pos < text.size()): `pos` itself unless it is a continuation byte.
size_t CharStartAtOrBefore(std::string_view text, size_t pos);

// The code point at byte `i` of well-formed UTF-8 (a character's first
// byte) and its length in bytes. Unchecked: for text already validated.
inline std::pair<char32_t, size_t> DecodeAt(std::string_view text, size_t i) {
  const auto b = static_cast<unsigned char>(text[i]);
  if (b < 0x80) return {b, 1};
  const size_t n = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2;
  char32_t c = b & (0x7f >> n);
  for (size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3f);
  return {c, n};
}

}  // namespace encoderd
