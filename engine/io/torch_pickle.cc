#include "engine/io/torch_pickle.h"

#include "engine/io/pickle_globals.h"

namespace encoderd {
namespace {

Status BadPid(const std::string& what) { return DataLoss("bad storage persistent id: " + what); }

}  // namespace

PersistentLoadFn TorchPersistentLoad(StorageTable* table) {
  return [table](const PickleValue* pid, PickleArena* arena) -> StatusOr<const PickleValue*> {
    if (pid->kind != PickleKind::kTuple || pid->items.size() < 5 || pid->items.size() > 6) {
      return BadPid("not a 5- or 6-tuple");
    }
    const auto& it = pid->items;
    if (it[0]->kind != PickleKind::kString || it[0]->str != "storage") {
      return BadPid("first element is not 'storage'");
    }
    if (it[1]->kind != PickleKind::kGlobal && it[1]->kind != PickleKind::kPlaceholder) {
      return BadPid("storage type is not a global");
    }
    const std::optional<DType> dtype = StorageTypeDType(it[1]->str);
    if (!dtype) return BadPid("unsupported storage type '" + it[1]->str + "'");
    if (it[2]->kind != PickleKind::kString) return BadPid("key is not a string");
    if (it[4]->kind != PickleKind::kInt || it[4]->int_value < 0) {
      return BadPid("element count is not a non-negative int");
    }
    const std::string& key = it[2]->str;
    const int64_t numel = it[4]->int_value;
    auto [entry, inserted] = table->emplace(key, StorageInfo{*dtype, numel});
    if (!inserted && (entry->second.dtype != *dtype || entry->second.numel != numel)) {
      return BadPid("storage '" + key + "' declared twice with different types or sizes");
    }
    PickleValue* storage = arena->New(PickleKind::kStorage);
    storage->str = key;
    storage->dtype = *dtype;
    storage->storage_numel = numel;
    if (it.size() == 6 && it[5]->kind != PickleKind::kNone) {
      const PickleValue* view = it[5];
      if (view->kind != PickleKind::kTuple || view->items.size() != 3 ||
          view->items[1]->kind != PickleKind::kInt || view->items[2]->kind != PickleKind::kInt) {
        return BadPid("view metadata of '" + key + "' is not (key, offset, size)");
      }
      const int64_t offset = view->items[1]->int_value;
      const int64_t size = view->items[2]->int_value;
      if (offset < 0 || size < 0 || offset > numel || size > numel - offset) {
        return BadPid("view [" + std::to_string(offset) + ", +" + std::to_string(size) +
                      ") outside storage '" + key + "' of " + std::to_string(numel) + " elements");
      }
      storage->storage_is_view = true;
      storage->storage_view_offset = offset;
      storage->storage_numel = size;
    }
    return storage;
  };
}

Status CheckStorageSize(const std::string& key, const StorageInfo& info, size_t bytes) {
  const size_t esize = DTypeSize(info.dtype);
  if (static_cast<uint64_t>(info.numel) > bytes / esize ||
      static_cast<size_t>(info.numel) * esize != bytes) {
    return DataLoss("storage '" + key + "' should hold " + std::to_string(info.numel) + " " +
                    std::string(DTypeName(info.dtype)) + " elements but has " +
                    std::to_string(bytes) + " bytes");
  }
  return Status::Ok();
}

StatusOr<Tensor> ResolveTensor(const PickleValue& tensor, const StorageBytes& storages) {
  const PickleValue& s = *tensor.storage;
  auto it = storages.find(s.str);
  if (it == storages.end()) return DataLoss("storage '" + s.str + "' has no data");
  std::shared_ptr<const Storage> bytes = it->second;
  if (s.storage_is_view) {
    const size_t esize = DTypeSize(s.dtype);
    const size_t begin = static_cast<size_t>(s.storage_view_offset) * esize;
    const size_t len = static_cast<size_t>(s.storage_numel) * esize;
    if (begin > bytes->size() || len > bytes->size() - begin) {
      return DataLoss("storage view outside storage '" + s.str + "'");
    }
    bytes = std::make_shared<StorageSlice>(std::move(bytes), begin, len);
  }
  const size_t storage_bytes = bytes->size();
  auto t =
      Tensor::View(std::move(bytes), s.dtype, tensor.shape, tensor.strides, tensor.storage_offset);
  if (!t.ok()) return t.status().WithContext("storage '" + s.str + "'");
  // A view with more elements than its storage reads some of them twice
  // (expand(): a stride of 0), and a copy of it is larger than the file:
  // a few hundred bytes could describe a 2^56-element tensor.
  if (t->nbytes() > storage_bytes) {
    return DataLoss("tensor " + t->Describe() + " repeats elements of its storage '" + s.str +
                    "' (" + std::to_string(storage_bytes) + " bytes) to " +
                    std::to_string(t->nbytes()) +
                    " bytes, as expand() makes; checkpoint tensors must not hold more than their "
                    "storage");
  }
  return t;
}

}  // namespace encoderd
