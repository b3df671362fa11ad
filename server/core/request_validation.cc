#include "server/core/request_validation.h"

#include <cstring>

#include "engine/text/truncation.h"

namespace encoderd::server {
namespace {

std::string At(const char* field, size_t index) {
  return std::string(field) + "[" + std::to_string(index) + "]";
}

}  // namespace

Status CheckCount(size_t count, const RequestLimits& limits, const char* field) {
  if (count == 0) return InvalidArgument(std::string("the request has no ") + field);
  if (static_cast<int64_t>(count) > limits.max_client_batch_size)
    return InvalidArgument("the request has " + std::to_string(count) + " " + field +
                           "; the limit is " + std::to_string(limits.max_client_batch_size) +
                           " (max_client_batch_size)");
  return Status::Ok();
}

Status CheckText(const std::string& text, size_t index) {
  if (text.empty()) return InvalidArgument(At("texts", index) + " is empty");
  const void* nul = std::memchr(text.data(), '\0', text.size());
  if (nul != nullptr)
    return InvalidArgument(At("texts", index) + " contains a NUL byte (at byte " +
                           std::to_string(static_cast<const char*>(nul) - text.data()) + ")");
  Status utf8 = CheckUtf8(text);
  if (!utf8.ok()) return utf8.WithContext(At("texts", index));
  return Status::Ok();
}

Status CheckTexts(const std::vector<std::string>& texts, const RequestLimits& limits) {
  RETURN_IF_ERROR(CheckCount(texts.size(), limits));
  for (size_t i = 0; i < texts.size(); ++i) RETURN_IF_ERROR(CheckText(texts[i], i));
  return Status::Ok();
}

StatusOr<std::vector<Encoding>> TokenizeTexts(const Tokenizer& tokenizer,
                                              const std::vector<std::string>& texts,
                                              const RequestLimits& limits, bool truncate) {
  RETURN_IF_ERROR(CheckTexts(texts, limits));
  std::vector<Encoding> encodings;
  encodings.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    auto encoding = tokenizer.Encode(texts[i], limits.max_tokens, truncate);
    if (!encoding.ok()) return encoding.status().WithContext(At("texts", i));
    encodings.push_back(std::move(encoding).value());
  }
  return encodings;
}

Status CheckTokenIds(const std::vector<std::vector<int32_t>>& sequences,
                     const RequestLimits& limits) {
  RETURN_IF_ERROR(CheckCount(sequences.size(), limits, "token_ids"));
  for (size_t i = 0; i < sequences.size(); ++i) {
    const auto& ids = sequences[i];
    if (ids.empty()) return InvalidArgument(At("token_ids", i) + " is empty");
    if (static_cast<int64_t>(ids.size()) > limits.max_tokens)
      return InvalidArgument(At("token_ids", i) + " has " + std::to_string(ids.size()) +
                             " tokens; the limit is " + std::to_string(limits.max_tokens));
    for (size_t j = 0; j < ids.size(); ++j) {
      if (ids[j] < 0 || ids[j] >= limits.vocab_size)
        return InvalidArgument(At("token_ids", i) + ": token id " + std::to_string(ids[j]) +
                               " (position " + std::to_string(j) +
                               ") is outside the vocabulary [0, " +
                               std::to_string(limits.vocab_size) + ")");
    }
  }
  return Status::Ok();
}

Status CheckEncodeInputs(size_t num_texts, size_t num_token_ids) {
  if (num_texts > 0 && num_token_ids > 0)
    return InvalidArgument("send either texts or token_ids, not both");
  if (num_texts == 0 && num_token_ids == 0)
    return InvalidArgument("the request has neither texts nor token_ids");
  return Status::Ok();
}

Status CheckPooling(int32_t pooling) {
  if (pooling >= 0 && pooling <= 2) return Status::Ok();
  return InvalidArgument("pooling " + std::to_string(pooling) +
                         " is not one of POOLING_DEFAULT (0), POOLING_CLS (1), POOLING_MEAN (2)");
}

}  // namespace encoderd::server
