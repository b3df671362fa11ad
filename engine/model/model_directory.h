// A model directory -> ModelBundle: family detection, checkpoint reading,
// weight-name mapping with shape checks, hyperparameters, tokenizer.
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "engine/model/model_card.h"
#include "engine/model/model_spec.h"

namespace encoderd {

// Checkpoint names tried, in order, when the card names none: transformers'
// order (safetensors, then its sharded index, then pytorch_model.bin and
// its index), then fairseq's and torchtext's names. An index is what
// save_pretrained writes beside its shards for a model over
// max_shard_size: {"weight_map": {tensor name: shard file name}}. A card's
// checkpoint may name an index too (a name ending in ".index.json").
inline constexpr const char* kDefaultCheckpointNames[] = {
    "model.safetensors", "model.safetensors.index.json",
    "pytorch_model.bin", "pytorch_model.bin.index.json",
    "model.pt",          "model.pth",
    "model.bin"};

// Loads `dir`. The family comes from `card` (encoderd.yaml, parsed by the
// caller) or else from config.json's model_type. Hugging Face families need
// config.json; torchtext-roberta, fairseq-roberta and transformer-encoder
// need a card with at least num_heads (fairseq-roberta: unless the checkpoint
// records it) and, for transformer-encoder, the weight prefixes.
// Hyperparameters are inferred from tensor shapes and cross-checked with
// config.json and the card; every error names the file and the key.
StatusOr<ModelBundle> LoadModelBundle(const std::string& dir, const std::optional<ModelCard>& card);

}  // namespace encoderd
