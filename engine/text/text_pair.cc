#include "engine/text/text_pair.h"

#include <algorithm>
#include <string>

namespace encoderd {

int64_t PairSpecialTokens(PairTemplate pair_template) {
  return pair_template == PairTemplate::kBert ? 3 : 4;
}

std::pair<int64_t, int64_t> LongestFirstLengths(int64_t n1, int64_t n2, int64_t budget) {
  if (n1 + n2 <= budget) return {n1, n2};
  const bool swap = n1 > n2;
  int64_t shorter = swap ? n2 : n1;
  int64_t longer = swap ? n1 : n2;
  longer = shorter > budget ? shorter : std::max(shorter, budget - shorter);
  if (shorter + longer > budget) {
    shorter = budget / 2;
    longer = shorter + budget % 2;
  }
  return swap ? std::pair{longer, shorter} : std::pair{shorter, longer};
}

namespace {

// The content tokens a pair within max_tokens may keep, or INVALID_ARGUMENT
// when that leaves no room for one token of each text.
StatusOr<int64_t> PairBudget(PairTemplate pair_template, int64_t max_tokens) {
  const int64_t specials = PairSpecialTokens(pair_template);
  if (max_tokens < specials + 2) {
    return InvalidArgument("max_tokens must be at least " + std::to_string(specials + 2) +
                           " for a text pair, got " + std::to_string(max_tokens));
  }
  return max_tokens - specials;
}

}  // namespace

StatusOr<PairSide> EncodePairSide(const Tokenizer& tokenizer, PairTemplate pair_template,
                                  std::string_view text, int64_t max_tokens) {
  ASSIGN_OR_RETURN(const int64_t budget, PairBudget(pair_template, max_tokens));
  // No side keeps more than `budget` content tokens. Encode's limit counts its
  // own two special tokens: with budget + 2 it reads until it knows the
  // exact length or that the text has more than `budget` tokens.
  PairSide side;
  ASSIGN_OR_RETURN(side.encoding, tokenizer.Encode(text, budget + 2, /*truncate=*/true));
  side.whole = side.encoding.bytes_read >= static_cast<int64_t>(text.size());
  return side;
}

StatusOr<Encoding> JoinPair(const PairSide& first, const PairSide& second,
                            PairTemplate pair_template, int64_t max_tokens, bool truncate) {
  ASSIGN_OR_RETURN(const int64_t budget, PairBudget(pair_template, max_tokens));
  const int64_t specials = PairSpecialTokens(pair_template);
  const int64_t na = first.length(), nb = second.length();
  if (na + nb > budget && !truncate) {
    return InvalidArgument(
        "text pair is " + std::string(first.whole && second.whole ? "" : "at least ") +
        std::to_string(na + nb + specials) + " tokens long, more than the limit of " +
        std::to_string(max_tokens) + " tokens (truncation is off)");
  }
  const auto [keep_a, keep_b] = LongestFirstLengths(na, nb, budget);
  const Encoding& a = first.encoding;
  const Encoding& b = second.encoding;
  if (keep_a + 2 > static_cast<int64_t>(a.ids.size()) ||
      keep_b + 2 > static_cast<int64_t>(b.ids.size())) {
    return Internal("a side of the text pair was encoded for a smaller max_tokens");
  }

  Encoding pair;
  pair.untruncated_length = na + nb + specials;
  pair.bytes_read = a.bytes_read + b.bytes_read;
  pair.largest_window = std::max(a.largest_window, b.largest_window);
  const auto append = [&pair](const Encoding& from, int64_t begin, int64_t end, int32_t type) {
    pair.ids.insert(pair.ids.end(), from.ids.begin() + begin, from.ids.begin() + end);
    pair.pieces.insert(pair.pieces.end(), from.pieces.begin() + begin, from.pieces.begin() + end);
    pair.token_types.insert(pair.token_types.end(), end - begin, type);
  };
  const int64_t eos = static_cast<int64_t>(a.ids.size()) - 1;  // a's closing special
  const int32_t second_type = pair_template == PairTemplate::kBert ? 1 : 0;
  append(a, 0, 1 + keep_a, 0);  // opening special and a's tokens
  append(a, eos, eos + 1, 0);
  if (pair_template == PairTemplate::kRoberta) append(a, eos, eos + 1, 0);
  append(b, 1, 1 + keep_b, second_type);
  append(a, eos, eos + 1, second_type);
  return pair;
}

StatusOr<Encoding> EncodePair(const Tokenizer& tokenizer, PairTemplate pair_template,
                              std::string_view first, std::string_view second, int64_t max_tokens,
                              bool truncate) {
  ASSIGN_OR_RETURN(PairSide a, EncodePairSide(tokenizer, pair_template, first, max_tokens));
  ASSIGN_OR_RETURN(PairSide b, EncodePairSide(tokenizer, pair_template, second, max_tokens));
  return JoinPair(a, b, pair_template, max_tokens, truncate);
}

}  // namespace encoderd
