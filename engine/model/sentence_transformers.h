// A sentence-transformers model folder: modules.json lists the modules in
// order (Transformer, Pooling, Normalize); the Transformer's files sit in the
// folder itself or in a subfolder (0_Transformer/), the Pooling module's
// config.json says how token vectors become one embedding, and a Normalize
// module makes every embedding unit length. Only the modules encoderd can run
// are accepted: a folder with any other is refused with the module named.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/op_types.h"
#include "core/status.h"

namespace encoderd {

struct SentenceTransformersLayout {
  std::string transformer_dir;  // where config.json, the weights and the tokenizer are
  Pooling pooling = Pooling::kMean;
  bool normalize = false;
  // sentence_bert_config.json's max_seq_length, when given.
  std::optional<int64_t> max_seq_length;
  // One line per module, in order, for `encoderd inspect`.
  std::vector<std::string> modules;
};

// nullopt when `dir` has no modules.json; an error naming the file and the
// key when the folder is damaged or asks for what encoderd cannot do
// (a Dense module, max or mean-sqrt-len pooling, several pooling modes at
// once, do_lower_case).
StatusOr<std::optional<SentenceTransformersLayout>> ReadSentenceTransformers(
    const std::string& dir);

}  // namespace encoderd
