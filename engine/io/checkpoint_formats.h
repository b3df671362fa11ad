// The per-format readers behind ReadCheckpointBytes (checkpoint_reader.cc).
// Their errors do not name the file; the dispatcher adds it.
#pragma once

#include <memory>

#include "core/status.h"
#include "core/tensor.h"
#include "engine/io/torch_pickle.h"
#include "engine/io/zip_archive.h"

namespace encoderd {

// torch.save zip archives: <prefix>/data.pkl and <prefix>/data/<key>.
StatusOr<PickledCheckpoint> ReadTorchZip(const ZipArchive& zip);
// True when the archive holds TorchScript (constants.pkl or code/ entries).
bool IsTorchScriptArchive(const ZipArchive& zip);

// Legacy torch.save streams (see torch_legacy_format.cc).
bool LooksLikeTorchLegacy(const Storage& bytes);
// The tar format of PyTorch < 0.4 (detected only to be rejected clearly).
bool LooksLikeTar(const Storage& bytes);
StatusOr<PickledCheckpoint> ReadTorchLegacy(std::shared_ptr<const Storage> bytes);

bool LooksLikeSafetensors(const Storage& bytes);
StatusOr<TensorMap> ReadSafetensors(std::shared_ptr<const Storage> bytes);

// torch.jit.save archives: parameters and buffers, read through LibTorch
// (engine/torch/torchscript_reader.cc), or Unimplemented without it.
StatusOr<TensorMap> ReadTorchScript(std::shared_ptr<const Storage> bytes);

}  // namespace encoderd
