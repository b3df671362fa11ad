#include "engine/io/zip_archive.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

namespace encoderd {
namespace {

constexpr uint32_t kLocalHeaderSig = 0x04034b50;
constexpr uint32_t kCentralHeaderSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr size_t kEndSize = 22;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kZip64EndSize = 56;
constexpr size_t kZip64LocatorSize = 20;

uint64_t Load(const std::byte* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

Status Corrupt(const std::string& what) { return DataLoss("zip: " + what); }

// CRC-32 of `data` in 16 MiB chunks, releasing each chunk's pages after it
// is read (a mapped checkpoint stays mostly non-resident until it is used).
uint32_t Crc32(const Storage& data) {
  constexpr size_t kChunk = size_t{16} << 20;
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t offset = 0; offset < data.size(); offset += kChunk) {
    const size_t n = std::min(kChunk, data.size() - offset);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + offset), static_cast<uInt>(n));
    data.ReleasePages(offset, n);
  }
  return static_cast<uint32_t>(crc);
}

// Fills the 0xffffffff fields of `e` from a zip64 extended-information extra field.
Status ApplyZip64Extra(const std::byte* extra, size_t len, bool need_size, bool need_csize,
                       bool need_offset, ZipArchive::Entry* e) {
  size_t pos = 0;
  while (pos + 4 <= len) {
    const uint64_t id = Load(extra + pos, 2);
    const uint64_t n = Load(extra + pos + 2, 2);
    pos += 4;
    if (n > len - pos) return Corrupt("extra field past its end in '" + e->name + "'");
    if (id == 1) {
      size_t at = pos;
      auto take = [&](bool need, uint64_t* out) {
        if (!need) return true;
        if (at + 8 > pos + n) return false;
        *out = Load(extra + at, 8);
        at += 8;
        return true;
      };
      if (!take(need_size, &e->size) || !take(need_csize, &e->compressed_size) ||
          !take(need_offset, &e->local_header_offset)) {
        return Corrupt("short zip64 extra field in '" + e->name + "'");
      }
      return Status::Ok();
    }
    pos += n;
  }
  return Corrupt("zip64 sizes missing for '" + e->name + "'");
}

// Entries may not share bytes: each one's 30 fixed local-header bytes and
// its data (the central directory's size) fit before the next header (by
// offset) or the central directory. The local name and extra fields are not
// counted, so this is looser than exact non-overlap, but the entries' sizes
// add up to less than the file: N entries over one region of D bytes would
// otherwise make the CRC checks N x D bytes of work from a file of about D.
Status CheckNoOverlap(const std::vector<ZipArchive::Entry>& entries, uint64_t cd_offset) {
  std::vector<const ZipArchive::Entry*> by_offset;
  by_offset.reserve(entries.size());
  for (const ZipArchive::Entry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return a->local_header_offset < b->local_header_offset;
  });
  for (size_t i = 0; i < by_offset.size(); ++i) {
    const ZipArchive::Entry& e = *by_offset[i];
    const uint64_t end =
        i + 1 < by_offset.size() ? by_offset[i + 1]->local_header_offset : cd_offset;
    // local_header_offset < cd_offset (checked as read), so no wrap-around.
    const uint64_t room = end - e.local_header_offset;
    if (room < kLocalHeaderSize || e.compressed_size > room - kLocalHeaderSize) {
      return Corrupt("entry '" + e.name + "' (" + std::to_string(e.compressed_size) + " bytes at " +
                     std::to_string(e.local_header_offset) + ") would overlap " +
                     (i + 1 < by_offset.size() ? "entry '" + by_offset[i + 1]->name + "'"
                                               : std::string("the central directory")));
    }
  }
  return Status::Ok();
}

}  // namespace

bool ZipArchive::LooksLikeZip(const Storage& bytes) {
  return bytes.size() >= 4 && Load(bytes.data(), 4) == kLocalHeaderSig;
}

StatusOr<ZipArchive> ZipArchive::Open(std::shared_ptr<const Storage> bytes) {
  const std::byte* data = bytes->data();
  const size_t size = bytes->size();
  if (size < kEndSize) return Corrupt("file too small for an end of central directory");
  // The end record sits in the last 22 + 65535 (comment) bytes.
  size_t end = size - kEndSize;
  const size_t lowest = size > kEndSize + 0xffff ? size - kEndSize - 0xffff : 0;
  while (Load(data + end, 4) != kEndSig) {
    if (end == lowest) return Corrupt("no end of central directory record (truncated?)");
    --end;
  }
  uint64_t count = Load(data + end + 10, 2);
  uint64_t cd_size = Load(data + end + 12, 4);
  uint64_t cd_offset = Load(data + end + 16, 4);
  if (count == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    if (end < kZip64LocatorSize || Load(data + end - kZip64LocatorSize, 4) != kZip64LocatorSig) {
      return Corrupt("zip64 locator missing");
    }
    const uint64_t z64 = Load(data + end - kZip64LocatorSize + 8, 8);
    // (A file shorter than the record itself has no room for it.)
    if (size < kZip64EndSize || z64 > size - kZip64EndSize || Load(data + z64, 4) != kZip64EndSig) {
      return Corrupt("zip64 end of central directory out of range");
    }
    count = Load(data + z64 + 32, 8);
    cd_size = Load(data + z64 + 40, 8);
    cd_offset = Load(data + z64 + 48, 8);
  }
  if (cd_offset > size || cd_size > size - cd_offset) {
    return Corrupt("central directory [" + std::to_string(cd_offset) + ", +" +
                   std::to_string(cd_size) + ") past the end of the file (" + std::to_string(size) +
                   " bytes)");
  }
  if (count > cd_size / kCentralHeaderSize) {
    return Corrupt("central directory claims " + std::to_string(count) + " entries in " +
                   std::to_string(cd_size) + " bytes");
  }
  ZipArchive archive;
  archive.bytes_ = std::move(bytes);
  archive.cd_offset_ = cd_offset;
  archive.entries_.reserve(static_cast<size_t>(count));
  size_t pos = static_cast<size_t>(cd_offset);
  const size_t cd_end = static_cast<size_t>(cd_offset + cd_size);
  for (uint64_t i = 0; i < count; ++i) {
    if (cd_end - pos < kCentralHeaderSize || Load(data + pos, 4) != kCentralHeaderSig) {
      return Corrupt("bad central directory header #" + std::to_string(i));
    }
    const std::byte* h = data + pos;
    Entry e;
    e.method = static_cast<uint16_t>(Load(h + 10, 2));
    e.crc32 = static_cast<uint32_t>(Load(h + 16, 4));
    e.compressed_size = Load(h + 20, 4);
    e.size = Load(h + 24, 4);
    const size_t name_len = Load(h + 28, 2);
    const size_t extra_len = Load(h + 30, 2);
    const size_t comment_len = Load(h + 32, 2);
    e.local_header_offset = Load(h + 42, 4);
    if (cd_end - pos - kCentralHeaderSize < name_len + extra_len + comment_len) {
      return Corrupt("central directory header #" + std::to_string(i) + " past its end");
    }
    e.name.assign(reinterpret_cast<const char*>(h + kCentralHeaderSize), name_len);
    const bool need_size = e.size == 0xffffffff;
    const bool need_csize = e.compressed_size == 0xffffffff;
    const bool need_offset = e.local_header_offset == 0xffffffff;
    if (need_size || need_csize || need_offset) {
      RETURN_IF_ERROR(ApplyZip64Extra(h + kCentralHeaderSize + name_len, extra_len, need_size,
                                      need_csize, need_offset, &e));
    }
    if (e.local_header_offset >= cd_offset) {
      return Corrupt("entry '" + e.name + "' starts inside or after the central directory");
    }
    pos += kCentralHeaderSize + name_len + extra_len + comment_len;
    archive.index_.emplace(e.name, archive.entries_.size());
    archive.entries_.push_back(std::move(e));
  }
  RETURN_IF_ERROR(CheckNoOverlap(archive.entries_, cd_offset));
  return archive;
}

const ZipArchive::Entry* ZipArchive::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

StatusOr<std::shared_ptr<const Storage>> ZipArchive::Read(const Entry& e) const {
  const size_t size = bytes_->size();
  const std::byte* data = bytes_->data();
  if (e.method != 0) {
    return Corrupt("entry '" + e.name + "' is compressed (method " + std::to_string(e.method) +
                   "); only stored entries are supported");
  }
  if (e.compressed_size != e.size) return Corrupt("stored entry '" + e.name + "' changes size");
  if (e.local_header_offset > size || size - e.local_header_offset < kLocalHeaderSize ||
      Load(data + e.local_header_offset, 4) != kLocalHeaderSig) {
    return Corrupt("bad local header for '" + e.name + "'");
  }
  const std::byte* h = data + e.local_header_offset;
  const uint64_t start =
      e.local_header_offset + kLocalHeaderSize + Load(h + 26, 2) + Load(h + 28, 2);
  if (start > cd_offset_ || e.size > cd_offset_ - start) {
    return Corrupt("data of '" + e.name + "' [" + std::to_string(start) + ", +" +
                   std::to_string(e.size) + ") runs into the central directory at " +
                   std::to_string(cd_offset_));
  }
  auto slice = std::make_shared<StorageSlice>(bytes_, static_cast<size_t>(start),
                                              static_cast<size_t>(e.size));
  const uint32_t crc = Crc32(*slice);
  if (crc != e.crc32) {
    return Corrupt("data of '" + e.name + "' fails its CRC-32 check (stored " +
                   std::to_string(e.crc32) + ", computed " + std::to_string(crc) +
                   "): the file is damaged");
  }
  return std::shared_ptr<const Storage>(std::move(slice));
}

}  // namespace encoderd
