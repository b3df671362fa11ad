// What a model directory's encoderd.yaml can say, as plain data. The YAML
// parser lives in server/ (the engine does not link yaml-cpp); docs/model_card.md
// describes the file. Every field is optional: an unset field means "infer it
// from config.json / the tensor shapes, or use the family's default".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/model_spec.h"

namespace encoderd {

// kTokenizerJson: Hugging Face's tokenizer.json (engine/text/hf_tokenizer_json.h),
// which says everything itself.
enum class TokenizerKind { kWordPiece, kSentencePiece, kByteLevelBpe, kTokenizerJson };

// The card's spelling of each kind (tokenizer.type).
inline const char* TokenizerKindName(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::kWordPiece:
      return "wordpiece";
    case TokenizerKind::kSentencePiece:
      return "sentencepiece";
    case TokenizerKind::kByteLevelBpe:
      return "byte-level-bpe";
    case TokenizerKind::kTokenizerJson:
      return "tokenizer-json";
  }
  return "?";
}

struct TokenizerCard {
  TokenizerKind kind = TokenizerKind::kWordPiece;
  // File name relative to the model directory (byte-level BPE: vocab.json).
  std::string file;
  // Byte-level BPE: merges.txt's name in the directory (default merges.txt),
  // and Hugging Face's add_prefix_space (default false, as RoBERTa's).
  std::string merges_file;
  std::optional<bool> add_prefix_space;
  // Byte-level BPE: fairseq's dict.txt, which numbers the tokens (fairseq
  // and torchtext RoBERTa); empty: vocab.json's ids.
  std::string fairseq_dict;
  // WordPiece: lower-case and strip accents; unset: as the vocabulary says
  // (VocabularyIsCased, engine/text/wordpiece_tokenizer.h).
  std::optional<bool> lower_case;
  // WordPiece: strip accents; unset: as lower_case.
  std::optional<bool> strip_accents;
  // SentencePiece: added to every sentencepiece id (default 1, fairseq).
  std::optional<int32_t> id_offset;
  // Special token ids; WordPiece reads them from the vocabulary instead.
  std::optional<int32_t> bos, eos, pad, unk;
};

// Checkpoint key prefixes of a generic nn.Embedding + nn.TransformerEncoder
// stack (family transformer-encoder). Each names a module: "embedding" means
// the tensor "embedding.weight"; `layers` names the nn.ModuleList whose
// children are nn.TransformerEncoderLayer ("encoder.layers").
struct WeightPrefixes {
  std::string token_embedding;     // required: nn.Embedding [V, H]
  std::string position_embedding;  // optional: nn.Embedding [P, H], ids from 0
  std::string embedding_norm;      // optional: nn.LayerNorm after the embeddings
  std::string layers;              // required
  std::string final_norm;          // optional: TransformerEncoder(norm=...)
  std::string head_dense;          // optional with head_out: nn.Linear [H, H]
  std::string head_out;            // nn.Linear [L, H]
};

struct ModelCard {
  // Where the card came from ("encoderd.yaml"), for error messages.
  std::string source = "encoderd.yaml";
  std::optional<ModelFamily> family;
  // Checkpoint file relative to the directory; empty: the usual names.
  std::string checkpoint;
  // Dotted path of the state dict inside the checkpoint ("model").
  std::string state_dict_key;
  // fairseq-roberta: which of the checkpoint's classification_heads.<name>
  // to serve; empty: its only one.
  std::string classification_head;
  std::optional<TokenizerCard> tokenizer;
  std::optional<int64_t> num_heads;
  std::optional<float> layer_norm_eps;
  std::optional<Activation> activation;
  std::optional<bool> norm_first;
  std::optional<int64_t> max_tokens;
  std::optional<int64_t> pad_token_id;
  // EncoderConfig::mask_pad_keys over the family's default (true for
  // torchtext-roberta and fairseq-roberta): true on a Hugging Face model is
  // transformers given attention_mask = (input_ids != pad_token_id).
  std::optional<bool> mask_pad_keys;
  std::optional<PositionRule> position_rule;
  // Names of the head's outputs; empty: config.json id2label or LABEL_<i>.
  std::vector<std::string> labels;
  std::optional<Pooling> pooling;
  std::optional<Activation> head_activation;
  WeightPrefixes weights;
};

}  // namespace encoderd
