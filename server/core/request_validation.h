// Checks of client-supplied request fields against a served model's limits,
// and the tokenization of validated texts. Pure: no gRPC or protobuf types,
// so the unit tests and the fuzz target (tests/fuzz/request_fuzz.cc) call the
// very functions the gRPC handlers call. Every rejection is INVALID_ARGUMENT
// naming the field ("texts[2] ...", "token_ids[0] ...", "pooling ...").
// Nothing allocates in proportion to a number the client claims: the work is
// bounded by the bytes actually received (max_receive_message_bytes).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/op_types.h"
#include "core/status.h"
#include "engine/text/text_pair.h"
#include "engine/text/tokenizer.h"

namespace encoderd::server {

// What a request may ask of one model.
struct RequestLimits {
  // Most texts (or token_ids sequences) in one request.
  int64_t max_client_batch_size = 0;
  // Longest sequence in tokens, special tokens included.
  int64_t max_tokens = 0;
  // Token ids must lie in [0, vocab_size).
  int64_t vocab_size = 0;
  // The pad token's id where the model masks pad keys
  // (EncoderConfig::mask_pad_keys), else -1: a sequence of it alone is
  // refused (CheckPadKeys).
  int64_t masked_pad_id = -1;
  // The device cannot mask them (CUDA): a sequence holding it is refused.
  bool pad_keys_unmasked = false;
};

// A string a client sent (a model's name, a prompt's), in `quote`s for a
// status message: at most 64 bytes of it (cut at a character's start),
// then its length, so that a long one cannot make the answer's trailers
// larger than a client takes (it would read RESOURCE_EXHAUSTED where the
// error was meant).
std::string QuotedForStatus(const std::string& text, char quote = '\'');

// 1 <= count <= max_client_batch_size. `field` is "texts" or "token_ids".
Status CheckCount(size_t count, const RequestLimits& limits, const char* field = "texts");

// One text: non-empty, well-formed UTF-8 and free of NUL bytes. `index` is its
// position in the request's `field` (named in the message).
Status CheckText(const std::string& text, size_t index, const char* field = "texts");

// Rerank's query: CheckText's rules, named "query".
Status CheckQuery(const std::string& query);

// CheckCount, then CheckText on every text (the first bad one is reported).
Status CheckTexts(const std::vector<std::string>& texts, const RequestLimits& limits);

// The prompt a request's prompt_name names among a model's `prompts`
// (ModelBundle::prompts); an empty name, `default_prompt`. INVALID_ARGUMENT
// naming `model` and listing its prompts for a name that is not one.
StatusOr<std::string_view> PromptNamed(const std::map<std::string, std::string>& prompts,
                                       std::string_view default_prompt,
                                       const std::string& prompt_name, const std::string& model);

// How many leading tokens of a text behind `prompt` a Pooling module with
// include_prompt = false leaves out (OutputSpec::pool_start), as
// sentence-transformers 5.4+ counts them: 0 for an empty prompt; else the
// length of the prompt's own encoding as written (not stripped; truncated
// to max_tokens), less its last token where that is a special token (the
// closing [SEP] or </s>).
StatusOr<int32_t> PromptPoolStart(const Tokenizer& tokenizer, std::string_view prompt,
                                  int64_t max_tokens);

// CheckTexts, then tokenizes each text with max_tokens. truncate=false and a
// text over max_tokens: INVALID_ARGUMENT "texts[i]: input is N tokens long,
// more than the limit of M tokens". On success there is one encoding per
// text, each of at most max_tokens ids. A non-empty `prompt` goes in front
// of each text once the texts as sent passed the checks (the three
// functions here: a pair's first text, Rerank's query); the limit counts
// its tokens.
StatusOr<std::vector<Encoding>> TokenizeTexts(const Tokenizer& tokenizer,
                                              const std::vector<std::string>& texts,
                                              const RequestLimits& limits, bool truncate,
                                              std::string_view prompt = {});

// Text pairs: `pairs` holds one second text per text (same count, each
// checked as CheckText does, named "text_pairs[i]"); each pair is encoded
// with EncodePair (engine/text/text_pair.h) within max_tokens. truncate=false
// and a pair over max_tokens: INVALID_ARGUMENT "texts[i]: text pair is N
// tokens long, ...".
StatusOr<std::vector<Encoding>> TokenizeTextPairs(const Tokenizer& tokenizer,
                                                  PairTemplate pair_template,
                                                  const std::vector<std::string>& texts,
                                                  const std::vector<std::string>& pairs,
                                                  const RequestLimits& limits, bool truncate,
                                                  std::string_view prompt = {});

// Rerank's pairs (query, texts[i]): CheckQuery and CheckTexts, then the
// query is tokenized once and joined to each text (JoinPair). Errors name
// "query" or "texts[i]".
StatusOr<std::vector<Encoding>> TokenizeQueryPairs(const Tokenizer& tokenizer,
                                                   PairTemplate pair_template,
                                                   const std::string& query,
                                                   const std::vector<std::string>& texts,
                                                   const RequestLimits& limits, bool truncate,
                                                   std::string_view prompt = {});

// Pre-tokenised sequences: CheckCount, then each non-empty, at most max_tokens
// ids, every id in [0, vocab_size), and CheckPadKeys.
Status CheckTokenIds(const std::vector<std::vector<int32_t>>& sequences,
                     const RequestLimits& limits);

// Where the model masks pad keys (limits.masked_pad_id): INVALID_ARGUMENT
// for a sequence of pad tokens alone (no key to attend to; fairseq's and
// torchtext's softmax gives NaN there) and, where the device cannot mask
// them, for any pad token. `field`[index] names the sequence.
Status CheckPadKeys(const std::vector<int32_t>& ids, const RequestLimits& limits, const char* field,
                    size_t index);

// EncodeRequest carries texts or token_ids: exactly one of the two non-empty.
Status CheckEncodeInputs(size_t num_texts, size_t num_token_ids);

// An Encode reply holds 4 bytes per token and hidden value: `tokens` tokens
// in `sequences` sequences of `hidden_size` values must fit in
// max_send_message_bytes, less 64 KiB and 16 bytes a sequence for the
// message's framing, or INVALID_ARGUMENT naming the sizes and the key.
Status CheckEncodeReplySize(int64_t tokens, int64_t sequences, int64_t hidden_size,
                            int64_t max_send_message_bytes);

// The wire value of encoderd.v1.Pooling: nullopt for 0 (POOLING_DEFAULT),
// else the Pooling it names (1 CLS ... 6 LAST_TOKEN, kAllPoolings' order).
// Proto3 enums are open, so any int32 can arrive: INVALID_ARGUMENT naming
// the valid values.
StatusOr<std::optional<Pooling>> CheckPooling(int32_t pooling);

// EmbedRequest's `dimensions` (Matryoshka truncation): how many of an
// embedding's `width` values a reply keeps. 0 keeps `default_size` (the
// model's: all, or its folder's truncate_dim), 1 to width that many;
// anything else is INVALID_ARGUMENT naming `model` and both sizes.
StatusOr<int64_t> KeptDimensions(int32_t dimensions, int64_t default_size, int64_t width,
                                 const std::string& model);

// The first `kept` of an embedding's `size` values (kept <= size), made unit
// length again (L2, the norm clamped at 1e-12 as a whole embedding's is) when
// `normalize` and kept < size: sentence-transformers'
// encode(truncate_dim=kept, normalize_embeddings=normalize).
std::vector<float> KeptValues(const float* embedding, int64_t size, int64_t kept, bool normalize);

}  // namespace encoderd::server
