// The length contract of Tokenizer::Encode, shared by the implementations.
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/text/tokenizer.h"

namespace encoderd {

// `full` holds the complete encoding, special tokens included. Rejects
// max_tokens < 2 (no room for the opening and closing specials). When `full`
// is longer than max_tokens: truncate=true keeps the first max_tokens-1 ids
// and pieces plus the last (closing special) one; truncate=false returns
// INVALID_ARGUMENT naming the limit and the count. Sets untruncated_length.
StatusOr<Encoding> ApplyLengthLimit(Encoding full, int64_t max_tokens, bool truncate);

// INVALID_ARGUMENT unless `text` is well-formed UTF-8; names the byte offset.
Status CheckUtf8(std::string_view text);

}  // namespace encoderd
