// Tokenizers over the fixtures written by tests/fixtures/fx_tokenizers.py.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "engine/text/sentencepiece_tokenizer.h"

namespace encoderd::testing {

// The fixtures' sentencepiece.bpe.model (under `dir`, the tokenizer
// fixtures) read as an XLM-R folder's is (model_tokenizer.cc):
// XLMRobertaTokenizer's specials matched in a text, <mask> the piece after
// the model's.
inline StatusOr<std::unique_ptr<Tokenizer>> XlmrClassSentencePiece(const std::string& dir) {
  const std::string model = dir + "/spm/sentencepiece.bpe.model";
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> plain, CreateSentencePieceTokenizer(model, {}));
  SentencePieceOptions options;
  options.added_tokens = XlmrClassSpecials();
  options.vocab_size = plain->vocab_size() + 1;  // the pieces, the offset and <mask>
  return CreateSentencePieceTokenizer(model, options);
}

}  // namespace encoderd::testing
