// BERT's WordPiece: BasicTokenizer cleanup (control chars dropped, whitespace
// normalised), optional lower-casing and accent stripping, punctuation and
// CJK splitting, then greedy longest-match-first "##" sub-words.
#pragma once

#include <memory>
#include <string>

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
StatusOr<std::unique_ptr<Tokenizer>> CreateWordPieceTokenizer(const std::string& vocab_path,
                                                              const WordPieceOptions& options);

}  // namespace encoderd
