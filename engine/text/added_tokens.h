// Hugging Face's added tokens as the tokenizers library matches them in a
// text (its AddedVocabulary): special tokens such as <mask> or [SEP] written
// in the text become their own ids, and the text between them is tokenized
// piece by piece, each piece as a text of its own. sentence-transformers,
// transformers' pipelines and text-embeddings-inference all tokenize so.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace encoderd {

struct AddedToken {
  std::string content;
  // -1: the vocabulary's id of `content` (see ResolveIds).
  int32_t id = -1;
  // The whitespace (Unicode White_Space) right before / after a match is
  // taken into it (XLM-R's and RoBERTa's <mask> take what comes before).
  bool lstrip = false;
  bool rstrip = false;
  // As a tokenizer's files declare the token (tokenizer.json's
  // added_tokens, tokenizer_config.json's added_tokens_decoder,
  // added_tokens.json); a class's own specials are special and matched as
  // written. The library matches a normalized token in the normalized text
  // (AddedTokens does, given the normalizer), and a single_word one only
  // between word boundaries (encoderd does not: ResolveAddedTokens).
  bool special = true;
  bool normalized = false;
  bool single_word = false;
};

// `tokens` with each id of -1 replaced by id_of(content); a token left
// with a negative id (the vocabulary lacks it) is dropped.
std::vector<AddedToken> ResolveIds(std::vector<AddedToken> tokens,
                                   const std::function<int32_t(const std::string&)>& id_of);

// How a tokenizer's pipeline takes added tokens (ResolveAddedTokens).
struct AddedTokenRules {
  // The tokens of the model's vocabulary: the library numbers an added
  // token the vocabulary lacks from here on.
  int64_t vocab_size = 0;
  // The pipeline has a normalizer (a normalized token is matched in its
  // output), and whether the tokenizer matches normalized tokens so
  // (AddedTokens with a CharNormalizer).
  bool normalizes = false;
  bool matches_normalized = false;
  // The pre-tokenizer puts its prefix where encoderd does not around an
  // added token (ByteLevel's add_prefix_space, before each piece;
  // Metaspace's prepend_scheme "first", before the first only): encoderd
  // matches no added token there.
  bool prefixes_pieces = false;
  // The model's token embedding rows: an added token past the vocabulary
  // must have an id below it (0: no limit).
  int64_t id_limit = 0;
};

// The added tokens a tokenizer matches in a text, from those its files
// declare, in their order, as the tokenizers library adds them: a token the
// vocabulary has takes its id (id_of; the class's own, with id -1, are
// dropped where it lacks them); one it lacks takes the next id after the
// vocabulary and every token added before it, which must be the id the
// file gives it and below rules.id_limit; one of empty content is left out.
// A token encoderd does not match as the library does (normalized where the
// tokenizer does not match normalized tokens; normalized with lstrip or
// rstrip where it does, or beginning or ending with whitespace where it
// does after a normalizer (rules.normalizes); single_word;
// any under prefixes_pieces) is refused, UNIMPLEMENTED naming the token
// (prefixed by `source`), unless it is one of the vocabulary's special
// tokens: that one is tokenized as text, as before (one normalized with
// lstrip or rstrip is matched as written, one with whitespace at an end in
// the normalized text). An id the library would not give is refused too.
StatusOr<std::vector<AddedToken>> ResolveAddedTokens(
    std::vector<AddedToken> tokens, const std::function<int32_t(const std::string&)>& id_of,
    const AddedTokenRules& rules, const std::string& source);

// A pipeline's normalizer, one character at a time: what the character
// becomes in the normalized text (empty: dropped).
using CharNormalizer = std::function<std::u32string(char32_t)>;

class AddedTokens {
 public:
  AddedTokens() = default;
  // Tokens with an empty content are left out, and each after the first of
  // the same content. With `normalize`, a normalized token (without lstrip
  // or rstrip) is matched as the library matches it: its content
  // normalized, in the normalized text between the matches of the tokens
  // matched as written (Scan).
  explicit AddedTokens(std::vector<AddedToken> tokens, CharNormalizer normalize = nullptr);

  bool empty() const { return tokens_.empty(); }
  // One past the largest id (0 when there are none): a tokenizer's
  // vocabulary holds at least this many ids.
  int64_t end_id() const { return end_id_; }
  // For a tokenizer's Describe: ", N special tokens matched in a text"
  // (", N special and M other added tokens ..." where some are not
  // special), or nothing when there are none.
  std::string Describe() const;

  struct Match {
    // The bytes of the text the token stands for, its stripped whitespace
    // included.
    size_t begin = 0, end = 0;
    const AddedToken* token = nullptr;
  };

  // The matches of one text, found left to right as the library finds them:
  // at the leftmost position where a token starts, the longest one; the
  // next search starts where the match (with its stripped whitespace) ends.
  // (The library resumes before the whitespace taken by rstrip, which
  // differs only for a token that starts with whitespace.) The normalized
  // tokens then match in the normalized text of what lies between those
  // matches, at the leftmost character whose normalized form starts one,
  // the longest, up to the end of a character's normalized form (the
  // library may also match from or to the middle of one, such as the spaces
  // BERT's normalizer puts around a CJK ideograph). Reads the text only as
  // far as its callers ask (or a normalized token that may match goes on),
  // normalizing each character once, and at each place a normalized token
  // may start walks a trie of them: the cost is the text's length times the
  // longest token's, whatever their number.
  class Scan {
   public:
    Scan(const AddedTokens& tokens, std::string_view text);
    // The next match if it begins at or before byte `limit`; otherwise
    // null, having read to `limit` (and on through whitespace that a match
    // after it would take).
    const Match* Next(size_t limit);
    // Consumes the match Next returned: the search goes on from its end.
    void Take();

   private:
    // The next match of a token matched as written, once the search has
    // read to `limit` (match_).
    void FindWritten(size_t limit);
    // The next match of a normalized token that begins by `limit`, before
    // match_ (normalized_match_).
    void FindNormalized(size_t limit);
    // The longest normalized token that matches from normalized_from_ and
    // ends before match_.
    std::optional<Match> NormalizedHere();
    // A character of the text from normalized_from_ on (the i-th) and its
    // normalized form, normalized once; null past the text's end.
    struct Form {
      size_t begin = 0, end = 0;
      std::u32string text;
    };
    const Form* FormAt(size_t i);
    // Moves normalized_from_ to `pos` (a character boundary after it).
    void NormalizedFrom(size_t pos);

    const AddedTokens& tokens_;
    std::string_view text_;
    // How far the search has read, and where the whitespace right before
    // `scanned_` begins (never before the end of the last match taken).
    size_t scanned_ = 0, space_from_ = 0;
    std::optional<Match> match_;
    // Where the search for normalized tokens goes on, and its match.
    size_t normalized_from_ = 0;
    std::optional<Match> normalized_match_;
    // The characters from normalized_from_ on normalized so far.
    std::deque<Form> forms_;
  };

 private:
  const AddedToken* LongestAt(std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  CharNormalizer normalize_;
  // The normalized tokens' normalized contents as a trie: node 0 the root,
  // an edge per (node, character) (key: node << 21 | character), and per
  // node the token whose content ends there (the first of equal ones), or
  // -1, and whether an edge leaves it. Empty: no normalized token.
  std::unordered_map<uint64_t, uint32_t> trie_edges_;
  std::vector<int32_t> trie_token_;
  std::vector<bool> trie_inner_;
  // Tokens by their first byte, longest first.
  std::array<std::vector<uint32_t>, 256> by_first_byte_;
  bool any_lstrip_ = false;
  int64_t end_id_ = 0;
};

}  // namespace encoderd
