// A sentence-transformers model folder: modules.json lists the modules in
// order (Transformer, Pooling, Normalize); the Transformer's files sit in the
// folder itself or in a subfolder (0_Transformer/), the Pooling module's
// config.json says how token vectors become one embedding, and a Normalize
// module makes every embedding unit length. A CrossEncoder saved by
// sentence-transformers 5.4 or later is one Transformer module over a
// sequence classifier (sentence_bert_config.json's transformer_task
// "sequence-classification", config_sentence_transformers.json's model_type
// "CrossEncoder"), the activation of its score in
// config_sentence_transformers.json. Only the modules encoderd can run are
// accepted: a folder with any other is refused with the module named.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/op_types.h"
#include "core/status.h"
#include "engine/model/model_spec.h"

namespace encoderd {

struct SentenceTransformersLayout {
  std::string transformer_dir;  // where config.json, the weights and the tokenizer are
  // The Pooling module's mode; nullopt for a cross-encoder, whose classifier
  // scores the text itself.
  std::optional<Pooling> pooling;
  // The Pooling module's include_prompt: false leaves a prompt's tokens
  // (with the [CLS] before them) out of the pooling (ModelBundle::
  // include_prompt).
  bool include_prompt = true;
  // A CrossEncoder's folder: the checkpoint must be a sequence classifier.
  bool cross_encoder = false;
  // config_sentence_transformers.json's activation_fn, where it names one
  // (a CrossEncoder's; sentence-transformers reads it before config.json's).
  std::string activation_fn;
  // config_sentence_transformers.json's prompts by name (null ones as
  // ""), which a request may name; a SentenceTransformer's always has
  // "query" and "document" (empty unless the file sets them), as
  // sentence-transformers 5.0+ starts from those.
  std::map<std::string, std::string> prompts;
  // The prompt its default_prompt_name names, and that name (empty: none):
  // sentence-transformers prepends it to every text whose call names no
  // other prompt (a pair's first text, Rerank's query).
  std::string default_prompt;
  std::string default_prompt_name;
  bool normalize = false;
  // config_sentence_transformers.json's truncate_dim (sentence-transformers
  // 5.4+ saves it): a SentenceTransformer's embeddings are cut to their
  // first truncate_dim values (after Dense and Normalize) unless a call asks
  // for another size.
  std::optional<int64_t> truncate_dim;
  // Dense modules after the pooling, in order.
  struct Dense {
    std::string dir;  // its config.json and weights
    EncoderConfig::PoolDense shape;
  };
  std::vector<Dense> dense;
  // sentence_bert_config.json's max_seq_length, else the Transformer's
  // tokenizer_config.json model_max_length (as sentence-transformers takes
  // the limit), when given.
  std::optional<int64_t> max_seq_length;
  // One line per module, in order, for `encoderd inspect`.
  std::vector<std::string> modules;
};

// nullopt when `dir` has no modules.json; an error naming the file and the
// key when the folder is damaged or asks for what encoderd cannot do
// (a module other than Transformer, Pooling, Dense, Normalize in that order,
// or than one Transformer for a CrossEncoder; a Dense activation other than
// Tanh or Identity; several pooling modes at once; do_lower_case; a
// model_type or transformer_task other than these).
StatusOr<std::optional<SentenceTransformersLayout>> ReadSentenceTransformers(
    const std::string& dir);

}  // namespace encoderd
