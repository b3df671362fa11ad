// From an unpickled torch.save object to a flat name -> Tensor map.
#pragma once

#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "engine/io/torch_pickle.h"

namespace encoderd {

// The dict holding the state dict. `key` is a dotted path through nested
// dicts ("model", "state.model"; a path component may itself contain dots).
// Empty `key`: the root dict, or its "state_dict"/"model" entry when the root
// holds no tensors directly.
StatusOr<const PickleValue*> SelectStateDict(const PickleValue* root, const std::string& key);

// Every tensor reachable through nested dicts of `dict`, named by joining the
// keys with '.'; tensors are views into `storages`. Errors name the tensor.
StatusOr<TensorMap> FlattenStateDict(const PickleValue* dict, const StorageBytes& storages);

// For formats that are flat already (safetensors, TorchScript): keeps the
// tensors under "key." with that prefix removed; all of them when `key` is empty.
StatusOr<TensorMap> SelectPrefix(TensorMap tensors, const std::string& key);

}  // namespace encoderd
