// BERT's WordPiece: BasicTokenizer cleanup (control chars dropped, whitespace
// normalised), optional lower-casing and accent stripping, punctuation and
// CJK splitting, then greedy longest-match-first "##" sub-words.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/text/added_tokens.h"
#include "engine/text/bert_pre_tokenizer.h"
#include "engine/text/tokenizer.h"

namespace encoderd {

// The names of the special tokens: BERT's, or MPNet's (<s> and </s> around
// a text, <pad>, and BERT's [UNK] for what the vocabulary lacks).
struct WordPieceSpecials {
  std::string cls = "[CLS]", sep = "[SEP]", pad = "[PAD]", unk = "[UNK]";
  static WordPieceSpecials Mpnet() { return {"<s>", "</s>", "<pad>", "[UNK]"}; }
};

struct WordPieceOptions {
  // Lower-case (and strip accents, unless strip_accents says otherwise:
  // uncased checkpoints). Unset: as the
  // vocabulary says (VocabularyIsCased), for a folder or card that does not.
  std::optional<bool> lower_case = true;
  // Strip accents (NFD, then drop non-spacing marks). Unset: as lower_case
  // (BERT's BasicTokenizer with strip_accents None).
  std::optional<bool> strip_accents;
  // Words longer than this many characters become [UNK], as in BERT.
  int64_t max_chars_per_word = 100;
  // How the text is split into words: as Hugging Face's slow tokenizer
  // does (vocab.txt), or as the tokenizers library does (tokenizer.json).
  BertRules rules = BertRules::kPython;
  // Must all be in the vocabulary.
  WordPieceSpecials specials;
  // Matched in a text before it is split into words, as
  // ResolveAddedTokens takes them under BERT's normalizer (added_tokens.h);
  // those past the vocabulary count in vocab_size.
  std::vector<AddedToken> added_tokens;
  // The model's token embedding rows, which an added token past the
  // vocabulary must fit (0: any id).
  int64_t added_id_limit = 0;
};

// Reads a vocab.txt (one token per line, id = line number). The special
// tokens (options.specials: [CLS], [SEP], [PAD], [UNK]) must be present.
// Lines are split as Python's universal newlines do (\n, \r\n or \r); a token
// listed twice gets its last line number, as in Hugging Face's load_vocab.
StatusOr<std::unique_ptr<Tokenizer>> CreateWordPieceTokenizer(const std::string& vocab_path,
                                                              const WordPieceOptions& options);

// Whether a vocabulary is a cased checkpoint's: at least 1% of its tokens
// have a capital letter, in any script ("##" and the bracketed specials
// such as [CLS] and [unused7] aside), which lower-cased input would never
// reach. bert-base-cased's and bert-base-multilingual-cased's are; an
// uncased checkpoint's, built from lower-cased text, has none. Accents do
// not count: lower_case strips them too, but a vocabulary lower-cased
// without stripping them is better served lower-cased than not.
bool VocabularyIsCased(const std::vector<std::string>& tokens);

// The same from tokens already in memory (token i has id i); `source` names
// them in error messages.
StatusOr<std::unique_ptr<Tokenizer>> CreateWordPieceTokenizerFromTokens(
    std::vector<std::string> tokens, const WordPieceOptions& options,
    const std::string& source = "in-memory vocabulary");

}  // namespace encoderd
