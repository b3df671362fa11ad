// torch.save's default format since PyTorch 1.6: a zip archive whose
// <prefix>/data.pkl pickles the object, with each storage's raw bytes in
// <prefix>/data/<key> (stored, 64-byte aligned).
#include "engine/io/checkpoint_formats.h"

namespace encoderd {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The "<prefix>/" of the archive's top-level data.pkl, if it has one.
std::optional<std::string> DataPklPrefix(const ZipArchive& zip) {
  for (const auto& e : zip.entries()) {
    if (!EndsWith(e.name, "data.pkl")) continue;
    const std::string prefix = e.name.substr(0, e.name.size() - 8);
    if (prefix.empty() || (prefix.back() == '/' && prefix.find('/') == prefix.size() - 1)) {
      return prefix;
    }
  }
  return std::nullopt;
}

}  // namespace

bool IsTorchScriptArchive(const ZipArchive& zip) {
  for (const auto& e : zip.entries()) {
    if (EndsWith(e.name, "constants.pkl") || e.name.find("code/") != std::string::npos) {
      return true;
    }
  }
  return false;
}

StatusOr<PickledCheckpoint> ReadTorchZip(const ZipArchive& zip) {
  const std::optional<std::string> prefix = DataPklPrefix(zip);
  if (!prefix) return DataLoss("zip archive has no data.pkl (not a torch.save file)");
  const ZipArchive::Entry* pkl_entry = zip.Find(*prefix + "data.pkl");
  ASSIGN_OR_RETURN(std::shared_ptr<const Storage> pkl, zip.Read(*pkl_entry));
  // PyTorch 2.1 and later record the byte order the storages were written
  // in; torch.load swaps a big-endian file's bytes. Read as they are, those
  // would be other numbers: refused, as the legacy reader refuses them.
  if (const ZipArchive::Entry* order = zip.Find(*prefix + "byteorder")) {
    ASSIGN_OR_RETURN(std::shared_ptr<const Storage> bytes, zip.Read(*order));
    const std::string value(reinterpret_cast<const char*>(bytes->data()), bytes->size());
    if (value == "big") {
      return Unimplemented("zip checkpoint was saved on a big-endian machine (" + order->name +
                           " is \"big\")");
    }
    if (value != "little") {
      return DataLoss(order->name + " is neither \"little\" nor \"big\"");
    }
  }

  PickledCheckpoint ckpt;
  StorageTable table;
  auto result = Unpickle(pkl->data(), pkl->size(), ckpt.arena.get(), TorchPersistentLoad(&table),
                         &ckpt.placeholder_globals);
  if (!result.ok()) return result.status().WithContext(pkl_entry->name);
  ckpt.root = result->root;

  for (const auto& [key, info] : table) {
    const std::string name = *prefix + "data/" + key;
    const ZipArchive::Entry* entry = zip.Find(name);
    if (entry == nullptr) return DataLoss("storage '" + key + "': entry '" + name + "' missing");
    ASSIGN_OR_RETURN(std::shared_ptr<const Storage> bytes, zip.Read(*entry));
    RETURN_IF_ERROR(CheckStorageSize(key, info, bytes->size()));
    ckpt.storages.emplace(key, std::move(bytes));
  }
  return ckpt;
}

}  // namespace encoderd
