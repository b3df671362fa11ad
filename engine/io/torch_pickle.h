// What the two torch.save formats (zip and legacy) share: storages named by
// persistent ids inside the pickle, whose bytes live elsewhere in the file.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "engine/io/pickle_reader.h"

namespace encoderd {

// Storage key -> what the pickle says about it.
struct StorageInfo {
  DType dtype = DType::kFloat32;
  int64_t numel = 0;
};
using StorageTable = std::map<std::string, StorageInfo>;
// Storage key -> its bytes (a window into the file).
using StorageBytes = std::map<std::string, std::shared_ptr<const Storage>>;

// A torch.save checkpoint after unpickling: the object tree and the storages
// its tensors point into.
struct PickledCheckpoint {
  std::unique_ptr<PickleArena> arena = std::make_unique<PickleArena>();
  const PickleValue* root = nullptr;
  StorageBytes storages;
  std::vector<std::string> placeholder_globals;
};

// persistent_load for torch.save pickles. A persistent id is
// ('storage', <torch.*Storage global>, key, location, numel[, view_metadata])
// with view_metadata None or (view_key, offset, view_numel) (legacy only).
// Records each root storage in `table`; the same key must always have the same
// dtype and size.
PersistentLoadFn TorchPersistentLoad(StorageTable* table);

// Checks that `bytes` holds exactly `info.numel` elements of `info.dtype`.
Status CheckStorageSize(const std::string& key, const StorageInfo& info, size_t bytes);

// The Tensor a kTensor value describes, as a view into its storage's bytes.
StatusOr<Tensor> ResolveTensor(const PickleValue& tensor, const StorageBytes& storages);

}  // namespace encoderd
