// Reads the tensors of a checkpoint file, whatever format it was saved in.
// Checkpoints are data, never code: pickles are interpreted by an allow-list
// unpickler, and any other global becomes an inert placeholder.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace encoderd {

enum class CheckpointFormat {
  kTorchZip,     // torch.save, PyTorch >= 1.6 default (zip archive with data.pkl)
  kTorchLegacy,  // torch.save, PyTorch < 1.6 or _use_new_zipfile_serialization=False
  kTorchScript,  // torch.jit.save archive (read through LibTorch)
  kSafetensors,  // safetensors
};

const char* CheckpointFormatName(CheckpointFormat format);

struct ReadOptions {
  // Dotted path of a nested dict holding the state dict ("model", "state.model").
  // Empty: the top-level object, or its "state_dict"/"model" entry when the
  // top level holds no tensors itself.
  std::string state_dict_key;
};

struct Checkpoint {
  CheckpointFormat format = CheckpointFormat::kTorchZip;
  // Flattened names ("encoder.layers.0.weight") of every tensor found.
  TensorMap tensors;
  // Globals that were not on the allow-list and became placeholders
  // (e.g. "argparse.Namespace"), for diagnostics.
  std::vector<std::string> placeholder_globals;
  // The integers and booleans (as 0 or 1) a fairseq checkpoint records of
  // its model by name ("encoder_attention_heads"): its argparse args
  // (fairseq 0.8 and 0.9, "args", an argparse.Namespace) or its config's
  // model section (0.10 on, "cfg": an omegaconf DictConfig, or from 0.12 a
  // dict; its "model" a DictConfig, a dict or a Namespace). Empty for other
  // checkpoints.
  std::map<std::string, int64_t> fairseq_args;
  // The strings it records the same way ("activation_fn": "gelu").
  std::map<std::string, std::string> fairseq_text_args;
};

// Detects the format from the file's content (not its name) and reads it.
// Tensors are views into an mmap of the file where the format allows
// (zip, safetensors, legacy), so loading copies nothing but float64 tensors,
// which are converted to float32. Every error names `path`.
StatusOr<Checkpoint> ReadCheckpoint(const std::string& path, const ReadOptions& options = {});

// Same, over bytes already in memory (`name` is used in error messages).
// This is the entry point of the readers' fuzz target.
StatusOr<Checkpoint> ReadCheckpointBytes(std::shared_ptr<const Storage> bytes,
                                         const std::string& name, const ReadOptions& options = {});

}  // namespace encoderd
