// torch.save's format before PyTorch 1.6 (and with
// _use_new_zipfile_serialization=False): five pickles in a row (magic
// number, protocol version 1001, sys_info, the object, the list of storage
// keys), then for each key in that order an int64 LE element count and the
// storage's raw bytes.
#include <algorithm>
#include <cstring>

#include "engine/io/checkpoint_formats.h"

namespace encoderd {
namespace {

// LONG1 0x1950a86a20f9469cfc6c, little-endian, as the first pickle carries it.
constexpr unsigned char kMagic[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                    0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
constexpr int64_t kProtocolVersion = 1001;

}  // namespace

bool LooksLikeTorchLegacy(const Storage& bytes) {
  const size_t n = std::min<size_t>(bytes.size(), 32);
  if (n < sizeof(kMagic) + 2 || bytes.data()[0] != std::byte{0x80}) return false;
  for (size_t i = 2; i + sizeof(kMagic) <= n; ++i) {
    if (std::memcmp(bytes.data() + i, kMagic, sizeof(kMagic)) == 0) return true;
  }
  return false;
}

bool LooksLikeTar(const Storage& bytes) {
  return bytes.size() >= 512 && std::memcmp(bytes.data() + 257, "ustar", 5) == 0;
}

StatusOr<PickledCheckpoint> ReadTorchLegacy(std::shared_ptr<const Storage> bytes) {
  const std::byte* data = bytes->data();
  const size_t size = bytes->size();
  PickledCheckpoint ckpt;
  StorageTable table;
  const PersistentLoadFn no_pids = [](const PickleValue*,
                                      PickleArena*) -> StatusOr<const PickleValue*> {
    return DataLoss("unexpected persistent id in a legacy header pickle");
  };
  size_t pos = 0;
  // Reads the next pickle of the stream.
  auto next = [&](const char* what, const PersistentLoadFn& pl) -> StatusOr<const PickleValue*> {
    auto r = Unpickle(data + pos, size - pos, ckpt.arena.get(), pl, &ckpt.placeholder_globals);
    if (!r.ok()) return r.status().WithContext(std::string("legacy ") + what + " pickle");
    pos += r->end;
    return r->root;
  };

  ASSIGN_OR_RETURN(const PickleValue* magic, next("magic number", no_pids));
  if (magic->kind != PickleKind::kBigInt || magic->str.size() != 10 ||
      std::memcmp(magic->str.data(), kMagic + 2, 10) != 0) {
    return DataLoss("legacy torch file: wrong magic number");
  }
  ASSIGN_OR_RETURN(const PickleValue* version, next("protocol version", no_pids));
  if (version->kind != PickleKind::kInt || version->int_value != kProtocolVersion) {
    return DataLoss("legacy torch file: unsupported protocol version");
  }
  ASSIGN_OR_RETURN(const PickleValue* sys_info, next("sys_info", no_pids));
  const PickleValue* little = DictGet(sys_info, "little_endian");
  if (little != nullptr && little->kind == PickleKind::kBool && little->int_value == 0) {
    return Unimplemented("legacy torch file was saved on a big-endian machine");
  }
  ASSIGN_OR_RETURN(ckpt.root, next("object", TorchPersistentLoad(&table)));
  ASSIGN_OR_RETURN(const PickleValue* keys, next("storage keys", no_pids));
  if (keys->kind != PickleKind::kList) return DataLoss("legacy storage keys are not a list");

  for (const PickleValue* k : keys->items) {
    if (k->kind != PickleKind::kString) return DataLoss("legacy storage key is not a string");
    auto info = table.find(k->str);
    if (info == table.end()) {
      return DataLoss("legacy storage '" + k->str + "' is not used by any tensor");
    }
    if (ckpt.storages.count(k->str))
      return DataLoss("legacy storage '" + k->str + "' listed twice");
    if (size - pos < 8) return DataLoss("legacy storage '" + k->str + "': truncated size");
    int64_t numel = 0;
    std::memcpy(&numel, data + pos, 8);
    pos += 8;
    if (numel != info->second.numel) {
      return DataLoss("legacy storage '" + k->str + "' has " + std::to_string(numel) +
                      " elements, its persistent id says " + std::to_string(info->second.numel));
    }
    const size_t esize = DTypeSize(info->second.dtype);
    if (numel < 0 || static_cast<uint64_t>(numel) > (size - pos) / esize) {
      return DataLoss("legacy storage '" + k->str + "': data past the end of the file");
    }
    const size_t nbytes = static_cast<size_t>(numel) * esize;
    ckpt.storages.emplace(k->str, std::make_shared<StorageSlice>(bytes, pos, nbytes));
    pos += nbytes;
  }
  for (const auto& [key, info] : table) {
    if (!ckpt.storages.count(key)) return DataLoss("legacy storage '" + key + "' has no data");
  }
  return ckpt;
}

}  // namespace encoderd
