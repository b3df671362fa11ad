#include "server/core/request_validation.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "engine/text/truncation.h"
#include "kernels/pooling.h"

namespace encoderd::server {
namespace {

std::string At(const char* field, size_t index) {
  return std::string(field) + "[" + std::to_string(index) + "]";
}

// CheckText's rules; `name()` names the text in messages (built only for one).
template <typename Name>
Status CheckNamedText(const std::string& text, const Name& name) {
  if (text.empty()) return InvalidArgument(name() + " is empty");
  const void* nul = std::memchr(text.data(), '\0', text.size());
  if (nul != nullptr)
    return InvalidArgument(name() + " contains a NUL byte (at byte " +
                           std::to_string(static_cast<const char*>(nul) - text.data()) + ")");
  Status utf8 = CheckUtf8(text);
  if (!utf8.ok()) return utf8.WithContext(name());
  return Status::Ok();
}

}  // namespace

std::string QuotedForStatus(const std::string& text, char quote) {
  constexpr size_t kShown = 64;
  if (text.size() <= kShown) return quote + text + quote;
  size_t cut = kShown;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return quote + text.substr(0, cut) + "..." + quote + " (" + std::to_string(text.size()) +
         " bytes)";
}

Status CheckCount(size_t count, const RequestLimits& limits, const char* field) {
  if (count == 0) return InvalidArgument(std::string("the request has no ") + field);
  if (static_cast<int64_t>(count) > limits.max_client_batch_size)
    return InvalidArgument("the request has " + std::to_string(count) + " " + field +
                           "; the limit is " + std::to_string(limits.max_client_batch_size) +
                           " (max_client_batch_size)");
  return Status::Ok();
}

Status CheckEncodeReplySize(int64_t tokens, int64_t sequences, int64_t hidden_size,
                            int64_t max_send_message_bytes) {
  // Room for the reply's other fields (timing, model name) and each
  // sequence's framing (a TokenStates message: tags, lengths, two ints).
  constexpr int64_t kFraming = 64 * 1024, kSequenceFraming = 16;
  const int64_t framing = kFraming + kSequenceFraming * sequences;
  const int64_t room = std::max<int64_t>(max_send_message_bytes - framing, 0);
  if (hidden_size <= 0 || tokens <= room / (4 * hidden_size)) return Status::Ok();
  return InvalidArgument("the reply would hold the hidden states of " + std::to_string(tokens) +
                         " tokens in " + std::to_string(sequences) + " sequences (" +
                         std::to_string(tokens) + " x " + std::to_string(hidden_size) +
                         " x 4 bytes and " + std::to_string(framing) +
                         " of framing), more than listen.max_send_message_bytes (" +
                         std::to_string(max_send_message_bytes) +
                         ") allows; send fewer or shorter sequences per call");
}

Status CheckText(const std::string& text, size_t index, const char* field) {
  return CheckNamedText(text, [&] { return At(field, index); });
}

Status CheckQuery(const std::string& query) {
  return CheckNamedText(query, [] { return std::string("query"); });
}

Status CheckTexts(const std::vector<std::string>& texts, const RequestLimits& limits) {
  RETURN_IF_ERROR(CheckCount(texts.size(), limits));
  for (size_t i = 0; i < texts.size(); ++i) RETURN_IF_ERROR(CheckText(texts[i], i));
  return Status::Ok();
}

StatusOr<std::string_view> PromptNamed(const std::map<std::string, std::string>& prompts,
                                       std::string_view default_prompt,
                                       const std::string& prompt_name, const std::string& model) {
  if (prompt_name.empty()) return default_prompt;
  if (const auto it = prompts.find(prompt_name); it != prompts.end()) {
    return std::string_view(it->second);
  }
  const std::string named = "prompt_name " + QuotedForStatus(prompt_name, '"');
  if (prompts.empty()) return InvalidArgument(named + ": " + model + " has no prompts");
  // The model's names, each cut as the client's is, the first 16 of them.
  constexpr size_t kListed = 16;
  std::string names;
  size_t listed = 0;
  for (const auto& entry : prompts) {
    if (listed == kListed) {
      names += " and " + std::to_string(prompts.size() - kListed) + " more";
      break;
    }
    names += (listed++ == 0 ? "" : ", ") + QuotedForStatus(entry.first, '"');
  }
  return InvalidArgument(named + " is not a prompt of " + model + " (its prompts: " + names + ")");
}

StatusOr<int32_t> PromptPoolStart(const Tokenizer& tokenizer, std::string_view prompt,
                                  int64_t max_tokens) {
  if (prompt.empty()) return 0;
  ASSIGN_OR_RETURN(const Encoding encoding, tokenizer.Encode(prompt, max_tokens, true));
  const std::vector<int32_t>& ids = encoding.ids;
  const SpecialTokens& special = tokenizer.special_tokens();
  const bool closed = !ids.empty() && (ids.back() == special.eos || ids.back() == special.bos ||
                                       ids.back() == special.pad || ids.back() == special.unk);
  return static_cast<int32_t>(ids.size()) - (closed ? 1 : 0);
}

namespace {

// `text` with `prompt` in front: the text itself where there is no prompt,
// else `scratch` holding both.
std::string_view Prompted(std::string_view prompt, const std::string& text, std::string* scratch) {
  if (prompt.empty()) return text;
  scratch->assign(prompt);
  scratch->append(text);
  return *scratch;
}

}  // namespace

StatusOr<std::vector<Encoding>> TokenizeTexts(const Tokenizer& tokenizer,
                                              const std::vector<std::string>& texts,
                                              const RequestLimits& limits, bool truncate,
                                              std::string_view prompt) {
  RETURN_IF_ERROR(CheckTexts(texts, limits));
  std::vector<Encoding> encodings;
  encodings.reserve(texts.size());
  std::string scratch;
  for (size_t i = 0; i < texts.size(); ++i) {
    auto encoding =
        tokenizer.Encode(Prompted(prompt, texts[i], &scratch), limits.max_tokens, truncate);
    if (!encoding.ok()) return encoding.status().WithContext(At("texts", i));
    encodings.push_back(std::move(encoding).value());
  }
  return encodings;
}

StatusOr<std::vector<Encoding>> TokenizeQueryPairs(const Tokenizer& tokenizer,
                                                   PairTemplate pair_template,
                                                   const std::string& query,
                                                   const std::vector<std::string>& texts,
                                                   const RequestLimits& limits, bool truncate,
                                                   std::string_view prompt) {
  RETURN_IF_ERROR(CheckQuery(query));
  RETURN_IF_ERROR(CheckTexts(texts, limits));
  std::string scratch;
  auto query_side = EncodePairSide(tokenizer, pair_template, Prompted(prompt, query, &scratch),
                                   limits.max_tokens);
  if (!query_side.ok()) return query_side.status().WithContext("query");
  std::vector<Encoding> encodings;
  encodings.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    auto text_side = EncodePairSide(tokenizer, pair_template, texts[i], limits.max_tokens);
    if (!text_side.ok()) return text_side.status().WithContext(At("texts", i));
    auto pair = JoinPair(*query_side, *text_side, pair_template, limits.max_tokens, truncate);
    if (!pair.ok()) return pair.status().WithContext(At("texts", i));
    encodings.push_back(std::move(pair).value());
  }
  return encodings;
}

StatusOr<std::vector<Encoding>> TokenizeTextPairs(const Tokenizer& tokenizer,
                                                  PairTemplate pair_template,
                                                  const std::vector<std::string>& texts,
                                                  const std::vector<std::string>& pairs,
                                                  const RequestLimits& limits, bool truncate,
                                                  std::string_view prompt) {
  RETURN_IF_ERROR(CheckTexts(texts, limits));
  if (pairs.size() != texts.size()) {
    return InvalidArgument("the request has " + std::to_string(pairs.size()) + " text_pairs for " +
                           std::to_string(texts.size()) + " texts (one second text per text)");
  }
  for (size_t i = 0; i < pairs.size(); ++i) RETURN_IF_ERROR(CheckText(pairs[i], i, "text_pairs"));
  std::vector<Encoding> encodings;
  encodings.reserve(texts.size());
  std::string scratch;
  for (size_t i = 0; i < texts.size(); ++i) {
    auto encoding = EncodePair(tokenizer, pair_template, Prompted(prompt, texts[i], &scratch),
                               pairs[i], limits.max_tokens, truncate);
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
    RETURN_IF_ERROR(CheckPadKeys(ids, limits, "token_ids", i));
  }
  return Status::Ok();
}

Status CheckPadKeys(const std::vector<int32_t>& ids, const RequestLimits& limits, const char* field,
                    size_t index) {
  if (limits.masked_pad_id < 0) return Status::Ok();
  const auto first = std::find(ids.begin(), ids.end(), limits.masked_pad_id);
  if (first == ids.end()) return Status::Ok();
  const std::string pad = "the pad token (id " + std::to_string(limits.masked_pad_id) + ")";
  if (limits.pad_keys_unmasked) {
    return InvalidArgument(At(field, index) + ": position " + std::to_string(first - ids.begin()) +
                           " is " + pad +
                           ", which this model masks as a key, and its device does not; send "
                           "sequences unpadded");
  }
  if (first == ids.begin() &&
      std::all_of(first, ids.end(), [&](int32_t id) { return id == limits.masked_pad_id; })) {
    return InvalidArgument(At(field, index) + " holds " + pad +
                           " alone, which this model masks as a key: no token is left to "
                           "attend to");
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

StatusOr<std::optional<Pooling>> CheckPooling(int32_t pooling) {
  // The wire values in encoderd.proto's order after POOLING_DEFAULT.
  constexpr int32_t kCount = static_cast<int32_t>(std::size(kAllPoolings));
  if (pooling == 0) return std::optional<Pooling>();
  if (pooling > 0 && pooling <= kCount) return std::optional<Pooling>(kAllPoolings[pooling - 1]);
  return InvalidArgument("pooling " + std::to_string(pooling) +
                         " is not one of POOLING_DEFAULT (0), POOLING_CLS (1), POOLING_MEAN (2), "
                         "POOLING_MAX (3), POOLING_MEAN_SQRT_LEN (4), POOLING_WEIGHTED_MEAN (5), "
                         "POOLING_LAST_TOKEN (6)");
}

StatusOr<int64_t> KeptDimensions(int32_t dimensions, int64_t default_size, int64_t width,
                                 const std::string& model) {
  if (dimensions == 0) return default_size;
  if (dimensions > 0 && dimensions <= width) return int64_t{dimensions};
  return InvalidArgument("dimensions " + std::to_string(dimensions) + " is not 0 (the default: " +
                         std::to_string(default_size) + ") or 1 to " + std::to_string(width) +
                         " (the max_dimensions of model " + QuotedForStatus(model) + ")");
}

std::vector<float> KeptValues(const float* embedding, int64_t size, int64_t kept, bool normalize) {
  kept = std::clamp<int64_t>(kept, 0, size);
  std::vector<float> values(embedding, embedding + kept);
  if (normalize && kept > 0 && kept < size) kernels::L2NormalizeRows(values.data(), 1, kept);
  return values;
}

}  // namespace encoderd::server
