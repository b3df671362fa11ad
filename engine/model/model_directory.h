// A model directory -> ModelBundle: family detection, checkpoint reading,
// weight-name mapping with shape checks, hyperparameters, tokenizer.
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "engine/model/model_card.h"
#include "engine/model/model_spec.h"

namespace encoderd {

// Checkpoint names tried, in order, when the card names none.
inline constexpr const char* kDefaultCheckpointNames[] = {"model.safetensors", "pytorch_model.bin",
                                                          "model.pt", "model.pth", "model.bin"};
// Then the indexes of a sharded checkpoint, as transformers' save_pretrained
// writes one beside its shards when the model is larger than max_shard_size:
// {"weight_map": {tensor name: shard file name}}. A card's checkpoint may
// name an index too (a name ending in ".index.json").
inline constexpr const char* kShardIndexNames[] = {"model.safetensors.index.json",
                                                   "pytorch_model.bin.index.json"};

// Loads `dir`. The family comes from `card` (encoderd.yaml, parsed by the
// caller) or else from config.json's model_type. Hugging Face families need
// config.json; torchtext-roberta, fairseq-roberta and transformer-encoder
// need a card with at least num_heads (fairseq-roberta: unless the checkpoint
// records it) and, for transformer-encoder, the weight prefixes.
// Hyperparameters are inferred from tensor shapes and cross-checked with
// config.json and the card; every error names the file and the key.
StatusOr<ModelBundle> LoadModelBundle(const std::string& dir, const std::optional<ModelCard>& card);

}  // namespace encoderd
