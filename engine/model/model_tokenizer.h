// Finds and opens the tokenizer of a model directory.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "engine/model/model_card.h"
#include "engine/model/model_spec.h"
#include "engine/text/text_pair.h"
#include "engine/text/tokenizer.h"

namespace encoderd {

struct ModelTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;  // null: the directory has none
  std::string path;
  // Why a tokenizer file found by name is not used (a tokenizer.json whose
  // pipeline encoderd does not reproduce; the folder's slow-tokenizer files,
  // if it has any, are then read instead); empty otherwise.
  std::string note;
  // How the tokenizer's own files join a text pair, as transformers'
  // tokenizer of those files does: a tokenizer.json as its post_processor's
  // template says; found by name in a Hugging Face folder, vocab.txt BERT's
  // way (BertTokenizer), sentencepiece.bpe.model and vocab.json + merges.txt
  // RoBERTa's (XLMRobertaTokenizer, RobertaTokenizer). Unset (other files a
  // card names, or no tokenizer): the model family's way.
  std::optional<PairTemplate> pairs;
};

// The card's tokenizer when it names one; otherwise, for the Hugging Face
// families, as transformers' AutoTokenizer reads the folder: tokenizer.json
// (engine/text/hf_tokenizer_json.h) where it has one; where it has none, or
// one whose pipeline encoderd does not reproduce (`note` then says why),
// the files of the slow tokenizers, in this order: vocab.txt (WordPiece
// with the tokenizers library's rules, as the fast class AutoTokenizer
// converts from it; lower_case from tokenizer_config.json's do_lower_case,
// else from the vocabulary: VocabularyIsCased, wordpiece_tokenizer.h), sentencepiece.bpe.model
// (fairseq id offset 1), or vocab.json + merges.txt (byte-level BPE;
// add_prefix_space from tokenizer_config.json, default false), each with the
// added tokens the folder declares (ReadDeclaredAddedTokens, hf_config.h).
// Those files, where encoderd does not reproduce them (`note` says why),
// and a directory with none of them load without a tokenizer. A damaged file is an error,
// as is an unreproduced tokenizer.json a card names.
// Other families
// have none unless the card names one. `config` supplies vocab_size (the
// tokenizer's ids must fit the embedding) and the special ids' defaults.
StatusOr<ModelTokenizer> LoadModelTokenizer(const std::string& dir,
                                            const std::optional<TokenizerCard>& card,
                                            const EncoderConfig& config);

}  // namespace encoderd
