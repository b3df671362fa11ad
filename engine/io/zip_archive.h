// A minimal read-only zip reader for torch.save / torch.jit.save archives:
// end of central directory (with zip64), central directory and local
// headers. Entries are returned as windows into the archive's Storage.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace encoderd {

class ZipArchive {
 public:
  struct Entry {
    std::string name;
    uint16_t method = 0;  // 0: stored
    uint64_t compressed_size = 0;
    uint64_t size = 0;
    uint64_t local_header_offset = 0;
    uint32_t crc32 = 0;  // of the uncompressed data, from the central directory
  };

  // Parses the central directory of `bytes`. Fails on anything that does not
  // lie inside `bytes`.
  static StatusOr<ZipArchive> Open(std::shared_ptr<const Storage> bytes);

  const std::vector<Entry>& entries() const { return entries_; }
  // The entry named `name`, or nullptr.
  const Entry* Find(const std::string& name) const;
  // The data of a stored (uncompressed) entry, without copying, after checking
  // it against the entry's CRC-32 (a flipped bit in a tensor is DATA_LOSS, as
  // in PyTorch's reader). The check reads the data once in chunks and gives
  // each chunk's pages back, so it does not hold the whole entry resident. A
  // compressed entry is an error: torch writes every entry stored.
  StatusOr<std::shared_ptr<const Storage>> Read(const Entry& entry) const;

  // True when `bytes` starts with a local file header signature.
  static bool LooksLikeZip(const Storage& bytes);

 private:
  std::shared_ptr<const Storage> bytes_;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;  // name -> first entry of that name
  uint64_t cd_offset_ = 0;  // entry data must end before the central directory
};

}  // namespace encoderd
