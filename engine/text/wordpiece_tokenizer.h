// BERT's WordPiece: BasicTokenizer cleanup (control chars dropped, whitespace
// normalised), optional lower-casing and accent stripping, punctuation and
// CJK splitting, then greedy longest-match-first "##" sub-words.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/text/tokenizer.h"

namespace encoderd {

struct WordPieceOptions {
  // Lower-case and strip accents (uncased checkpoints).
  bool lower_case = true;
  // Words longer than this many characters become [UNK], as in BERT.
  int64_t max_chars_per_word = 100;
};

// Reads a vocab.txt (one token per line, id = line number). [CLS], [SEP],
// [PAD], [UNK] must be present.
// Lines are split as Python's universal newlines do (\n, \r\n or \r); a token
// listed twice gets its last line number, as in Hugging Face's load_vocab.
StatusOr<std::unique_ptr<Tokenizer>> CreateWordPieceTokenizer(const std::string& vocab_path,
                                                              const WordPieceOptions& options);

// The same from tokens already in memory (token i has id i); `source` names
// them in error messages.
StatusOr<std::unique_ptr<Tokenizer>> CreateWordPieceTokenizerFromTokens(
    std::vector<std::string> tokens, const WordPieceOptions& options,
    const std::string& source = "in-memory vocabulary");

}  // namespace encoderd
