// Two texts as one sequence, the way cross-encoders and pair classifiers
// were trained: BERT's "[CLS] a [SEP] b [SEP]" with token types 0 then 1,
// RoBERTa / XLM-R's "<s> a </s></s> b </s>" with every type 0.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>

#include "core/status.h"
#include "engine/text/tokenizer.h"

namespace encoderd {

enum class PairTemplate {
  kBert,     // [CLS] a [SEP] b [SEP]; types 0 up to the first [SEP], 1 after
  kRoberta,  // <s> a </s></s> b </s>; all types 0
};

// Special tokens the template adds: 3 (BERT) or 4 (RoBERTa).
int64_t PairSpecialTokens(PairTemplate pair_template);

// Hugging Face tokenizers' "longest_first" truncation (its closed form in
// the Rust tokenizers library, which the fast tokenizers sentence-transformers
// and cross-encoders load use): the lengths to keep of two texts of n1 and n2
// content tokens when at most `budget` fit. The shorter text is kept whole
// when the longer still gets at least as many tokens; otherwise each gets
// budget/2 and the longer text (the second on a tie) the odd token.
std::pair<int64_t, int64_t> LongestFirstLengths(int64_t n1, int64_t n2, int64_t budget);

// One text of a pair, tokenized as far as any pair within max_tokens can
// use: its special tokens around at most max_tokens - specials content
// tokens, and a content length that is exact when the text was read to its
// end (`whole`) and a lower bound over that budget otherwise.
struct PairSide {
  Encoding encoding;
  bool whole = false;
  // Content tokens (special tokens not counted).
  int64_t length() const { return encoding.untruncated_length - 2; }
};

// `text` (valid UTF-8) as one side of a pair within max_tokens. Reads only as
// much of it as the limit can use, so the cost is bounded by max_tokens, not
// by the text's size. INVALID_ARGUMENT when max_tokens leaves no room for
// one token of each text.
StatusOr<PairSide> EncodePairSide(const Tokenizer& tokenizer, PairTemplate pair_template,
                                  std::string_view text, int64_t max_tokens);

// Joins two sides with `pair_template`'s special tokens and token types
// (each side may be joined to many others: Rerank encodes its query once).
// Within max_tokens nothing is cut. Over it: truncate=true cuts with
// LongestFirstLengths, truncate=false returns INVALID_ARGUMENT naming the
// limit and the pair's length ("at least N" when a side was not read whole).
// Lengths of sides not read whole are lower bounds, all over the budget: when
// both sides exceed it and the budget is odd, the odd token goes to the side
// with more tokens *read*, where Hugging Face gives it to the longer text.
StatusOr<Encoding> JoinPair(const PairSide& first, const PairSide& second,
                            PairTemplate pair_template, int64_t max_tokens, bool truncate);

// EncodePairSide on both texts, then JoinPair.
StatusOr<Encoding> EncodePair(const Tokenizer& tokenizer, PairTemplate pair_template,
                              std::string_view first, std::string_view second, int64_t max_tokens,
                              bool truncate);

}  // namespace encoderd
