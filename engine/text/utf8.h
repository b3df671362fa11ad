// UTF-8 validation and decoding shared by the tokenizers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
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

}  // namespace encoderd
