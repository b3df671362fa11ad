// Text to token ids. Implementations: WordPiece (BERT) and SentencePiece
// (XLM-R / RoBERTa-style with the fairseq id offset).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace encoderd {

struct Encoding {
  // Including the special tokens (<s> ... </s> or [CLS] ... [SEP]).
  std::vector<int32_t> ids;
  // The piece for each id, in the same order. The <unk> of a run of unknown
  // characters read over several windows holds the run's start.
  std::vector<std::string> pieces;
  // Length of `ids` before truncation (equals ids.size() when not truncated).
  // A lower bound (at least max_tokens + 1) when the tokenizer stopped reading
  // a text longer than max_tokens can use.
  int64_t untruncated_length = 0;
  // Bytes of the text the tokenizer read: a prefix when the rest cannot
  // change the result (engine/text/bounded_encoding.h); all of it exactly
  // when the result is complete. (The search for special tokens written in
  // the text may look further, through whitespace a token after it would
  // take: added_tokens.h.)
  int64_t bytes_read = 0;
  // The most bytes the tokenizer encoded at once (one window: bounded
  // encoding), which bounds what a call costs: sentencepiece's cost for a
  // run of characters its vocabulary does not know grows faster than the
  // run. The whole text where a tokenizer reads it whole.
  int64_t largest_window = 0;
  // Segment (token type) of each id: empty for a single text (all 0); one per
  // id for a text pair (engine/text/text_pair.h).
  std::vector<int32_t> token_types;
  bool truncated() const { return untruncated_length > static_cast<int64_t>(ids.size()); }
};

struct SpecialTokens {
  int32_t bos = 0;  // [CLS] / <s>
  int32_t eos = 2;  // [SEP] / </s>
  int32_t pad = 1;
  int32_t unk = 3;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Tokenizes `text` (must be valid UTF-8; otherwise INVALID_ARGUMENT) and adds
  // the special tokens. When the result is longer than `max_tokens`:
  // truncate=true keeps the first max_tokens-1 ids and the closing special
  // token; truncate=false returns INVALID_ARGUMENT naming the limit and the
  // count (or a lower bound of it). Reads only as much of `text` as settles
  // the answer, so the cost is bounded by max_tokens, not by the text's size.
  // Thread-safe: may be called concurrently.
  virtual StatusOr<Encoding> Encode(std::string_view text, int64_t max_tokens,
                                    bool truncate) const = 0;

  virtual int64_t vocab_size() const = 0;
  virtual const SpecialTokens& special_tokens() const = 0;
  // Short human-readable description, e.g. "wordpiece (uncased, 30522 tokens)".
  virtual std::string Describe() const = 0;
};

}  // namespace encoderd
