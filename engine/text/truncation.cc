#include "engine/text/truncation.h"

#include <string>
#include <utility>

#include "engine/text/utf8.h"

namespace encoderd {

StatusOr<Encoding> ApplyLengthLimit(Encoding full, int64_t max_tokens, bool truncate) {
  if (max_tokens < 2) {
    return InvalidArgument("max_tokens must be at least 2 (room for the special tokens), got " +
                           std::to_string(max_tokens));
  }
  const int64_t count = static_cast<int64_t>(full.ids.size());
  full.untruncated_length = count;
  if (count <= max_tokens) return full;
  if (!truncate) {
    return InvalidArgument("input is " + std::to_string(count) +
                           " tokens long, more than the limit of " + std::to_string(max_tokens) +
                           " tokens (truncation is off)");
  }
  const int32_t closing_id = full.ids.back();
  std::string closing_piece = std::move(full.pieces.back());
  full.ids.resize(max_tokens - 1);
  full.pieces.resize(max_tokens - 1);
  full.ids.push_back(closing_id);
  full.pieces.push_back(std::move(closing_piece));
  return full;
}

Status CheckUtf8(std::string_view text) {
  const size_t bad = FirstInvalidUtf8Offset(text);
  if (bad == std::string_view::npos) return Status::Ok();
  return InvalidArgument("text is not valid UTF-8 (malformed sequence at byte " +
                         std::to_string(bad) + ")");
}

}  // namespace encoderd
