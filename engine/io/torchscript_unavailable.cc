// Built instead of engine/torch/torchscript_reader.cc when LibTorch is off.
#include "engine/io/checkpoint_formats.h"

namespace encoderd {

StatusOr<TensorMap> ReadTorchScript(std::shared_ptr<const Storage> /*bytes*/) {
  return Unimplemented(
      "TorchScript archives (torch.jit.save) require LibTorch: rebuild with "
      "-DENCODERD_WITH_TORCH=ON (Debian package libtorch-dev)");
}

}  // namespace encoderd
