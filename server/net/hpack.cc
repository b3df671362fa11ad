#include "server/net/hpack.h"

#include <algorithm>
#include <array>
#include <utility>

namespace encoderd::server {
namespace {

// The static table (RFC 7541, Appendix A), index 1 first.
struct StaticEntry {
  const char* name;
  const char* value;
};
constexpr StaticEntry kStaticTable[] = {
    {":authority", ""},
    {":method", "GET"},
    {":method", "POST"},
    {":path", "/"},
    {":path", "/index.html"},
    {":scheme", "http"},
    {":scheme", "https"},
    {":status", "200"},
    {":status", "204"},
    {":status", "206"},
    {":status", "304"},
    {":status", "400"},
    {":status", "404"},
    {":status", "500"},
    {"accept-charset", ""},
    {"accept-encoding", "gzip, deflate"},
    {"accept-language", ""},
    {"accept-ranges", ""},
    {"accept", ""},
    {"access-control-allow-origin", ""},
    {"age", ""},
    {"allow", ""},
    {"authorization", ""},
    {"cache-control", ""},
    {"content-disposition", ""},
    {"content-encoding", ""},
    {"content-language", ""},
    {"content-length", ""},
    {"content-location", ""},
    {"content-range", ""},
    {"content-type", ""},
    {"cookie", ""},
    {"date", ""},
    {"etag", ""},
    {"expect", ""},
    {"expires", ""},
    {"from", ""},
    {"host", ""},
    {"if-match", ""},
    {"if-modified-since", ""},
    {"if-none-match", ""},
    {"if-range", ""},
    {"if-unmodified-since", ""},
    {"last-modified", ""},
    {"link", ""},
    {"location", ""},
    {"max-forwards", ""},
    {"proxy-authenticate", ""},
    {"proxy-authorization", ""},
    {"range", ""},
    {"referer", ""},
    {"refresh", ""},
    {"retry-after", ""},
    {"server", ""},
    {"set-cookie", ""},
    {"strict-transport-security", ""},
    {"transfer-encoding", ""},
    {"user-agent", ""},
    {"vary", ""},
    {"via", ""},
    {"www-authenticate", ""},
};
constexpr size_t kStaticEntries = sizeof(kStaticTable) / sizeof(kStaticTable[0]);
static_assert(kStaticEntries == 61);

// Bits of each symbol's Huffman code (RFC 7541, Appendix B; symbol 256 is
// EOS). The code is canonical: codes of one length are consecutive in symbol
// order, each length's first code follows the previous length's last, so the
// lengths define the codes.
constexpr uint8_t kHuffmanLengths[257] = {
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6,  10, 10, 12, 13, 6,  8,  11, 10, 10, 8,  11, 8,  6,  6,  6,
    5,  5,  5,  6,  6,  6,  6,  6,  6,  6,  7,  8,  15, 6,  12, 10, 13, 6,  7,  7,  7,  7,  7,  7,
    7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  8,  7,  8,  13, 19, 13, 14, 6,
    15, 5,  6,  5,  6,  5,  6,  6,  6,  5,  7,  7,  6,  6,  6,  5,  6,  7,  6,  5,  5,  6,  7,  7,
    7,  7,  7,  15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20, 22, 22, 23, 23, 21,
    23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24,
    21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
};
constexpr int kMaxCodeBits = 30;
constexpr int kEos = 256;

// Canonical decoding tables: for each length, its first code, how many
// symbols have it and where they start in `symbols`.
struct HuffmanTables {
  std::array<uint32_t, kMaxCodeBits + 1> first{};
  std::array<uint32_t, kMaxCodeBits + 1> count{};
  std::array<uint32_t, kMaxCodeBits + 1> offset{};
  std::array<uint16_t, 257> symbols{};
  HuffmanTables() {
    for (int s = 0; s <= kEos; ++s) ++count[kHuffmanLengths[s]];
    uint32_t code = 0, at = 0;
    for (int bits = 1; bits <= kMaxCodeBits; ++bits) {
      code = (code + (bits > 1 ? count[bits - 1] : 0)) << (bits > 1 ? 1 : 0);
      first[bits] = code;
      offset[bits] = at;
      at += count[bits];
    }
    std::array<uint32_t, kMaxCodeBits + 1> next = offset;
    for (int s = 0; s <= kEos; ++s) symbols[next[kHuffmanLengths[s]]++] = static_cast<uint16_t>(s);
  }
};

const HuffmanTables& Tables() {
  static const HuffmanTables tables;
  return tables;
}

// Reads an integer with an N-bit prefix at `*p`; false when it runs past
// `end` or past 2^32.
bool ReadInteger(const uint8_t** p, const uint8_t* end, int prefix_bits, uint64_t* value) {
  if (*p >= end) return false;
  const uint8_t mask = static_cast<uint8_t>((1u << prefix_bits) - 1);
  uint64_t v = **p & mask;
  ++*p;
  if (v < mask) {
    *value = v;
    return true;
  }
  for (int shift = 0; shift <= 28; shift += 7) {
    if (*p >= end) return false;
    const uint8_t b = **p;
    ++*p;
    v += uint64_t{b & 0x7fu} << shift;
    if (!(b & 0x80)) {
      if (v > 0xffffffffu) return false;
      *value = v;
      return true;
    }
  }
  return false;
}

bool ReadString(const uint8_t** p, const uint8_t* end, std::string* out) {
  if (*p >= end) return false;
  const bool huffman = **p & 0x80;
  uint64_t length = 0;
  if (!ReadInteger(p, end, 7, &length) || length > static_cast<uint64_t>(end - *p)) return false;
  const uint8_t* s = *p;
  *p += length;
  if (huffman) return HuffmanDecode(s, static_cast<size_t>(length), out);
  out->assign(reinterpret_cast<const char*>(s), static_cast<size_t>(length));
  return true;
}

size_t EntryBytes(const HeaderField& f) { return f.name.size() + f.value.size() + 32; }

}  // namespace

bool HuffmanDecode(const uint8_t* data, size_t size, std::string* out) {
  const HuffmanTables& t = Tables();
  out->clear();
  out->reserve(size * 8 / 5);
  uint32_t code = 0;
  int bits = 0;
  for (size_t i = 0; i < size; ++i) {
    for (int b = 7; b >= 0; --b) {
      code = (code << 1) | ((data[i] >> b) & 1u);
      ++bits;
      if (code - t.first[bits] < t.count[bits]) {
        const uint16_t symbol = t.symbols[t.offset[bits] + (code - t.first[bits])];
        if (symbol == kEos) return false;
        out->push_back(static_cast<char>(symbol));
        code = 0;
        bits = 0;
      } else if (bits == kMaxCodeBits) {
        return false;
      }
    }
  }
  // What is left must be the start of EOS (all ones), shorter than a byte.
  return bits <= 7 && code == (1u << bits) - 1;
}

void HpackAppendInteger(uint64_t value, int prefix_bits, uint8_t first, std::string* out) {
  const uint64_t mask = (uint64_t{1} << prefix_bits) - 1;
  if (value < mask) {
    out->push_back(static_cast<char>(first | value));
    return;
  }
  out->push_back(static_cast<char>(first | mask));
  value -= mask;
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void HpackAppendLiteral(std::string_view name, std::string_view value, std::string* out) {
  out->push_back('\0');
  HpackAppendInteger(name.size(), 7, 0, out);
  out->append(name);
  HpackAppendInteger(value.size(), 7, 0, out);
  out->append(value);
}

bool HpackDecoder::Field(size_t index, HeaderField* field) const {
  if (index == 0) return false;
  if (index <= kStaticEntries) {
    field->name = kStaticTable[index - 1].name;
    field->value = kStaticTable[index - 1].value;
    return true;
  }
  index -= kStaticEntries + 1;
  if (index >= table_.size()) return false;
  *field = table_[index];
  return true;
}

void HpackDecoder::Evict(size_t limit) {
  while (table_bytes_ > limit && !table_.empty()) {
    table_bytes_ -= EntryBytes(table_.back());
    table_.pop_back();
  }
}

void HpackDecoder::Insert(HeaderField field) {
  changed_table_ = true;
  const size_t bytes = EntryBytes(field);
  // An entry larger than the table empties it and is not added (4.4).
  Evict(bytes > table_limit_ ? 0 : table_limit_ - bytes);
  if (bytes > table_limit_) return;
  table_bytes_ += bytes;
  table_.push_front(std::move(field));
}

bool HpackDecoder::Decode(const uint8_t* data, size_t size, std::vector<HeaderField>* fields) {
  fields->clear();
  changed_table_ = false;
  const uint8_t* p = data;
  const uint8_t* const end = data + size;
  size_t list_bytes = 0;
  bool fields_seen = false;
  while (p < end) {
    const uint8_t b = *p;
    if ((b & 0xe0) == 0x20) {  // dynamic table size update (6.3), only before any field
      uint64_t limit = 0;
      if (fields_seen || !ReadInteger(&p, end, 5, &limit) || limit > max_table_bytes_) return false;
      table_limit_ = static_cast<size_t>(limit);
      Evict(table_limit_);
      changed_table_ = true;
      continue;
    }
    fields_seen = true;
    HeaderField field;
    if (b & 0x80) {  // indexed (6.1)
      uint64_t index = 0;
      if (!ReadInteger(&p, end, 7, &index) || !Field(static_cast<size_t>(index), &field))
        return false;
    } else {
      // Literal with incremental indexing (6.2.1, 6-bit prefix), without
      // indexing (6.2.2) or never indexed (6.2.3) (4-bit prefixes).
      const bool indexing = (b & 0xc0) == 0x40;
      uint64_t index = 0;
      if (!ReadInteger(&p, end, indexing ? 6 : 4, &index)) return false;
      if (index == 0) {
        if (!ReadString(&p, end, &field.name)) return false;
      } else {
        HeaderField named;
        if (!Field(static_cast<size_t>(index), &named)) return false;
        field.name = std::move(named.name);
      }
      if (!ReadString(&p, end, &field.value)) return false;
      if (indexing) Insert(field);
    }
    list_bytes += EntryBytes(field);
    if (list_bytes > max_list_bytes_) return false;
    fields->push_back(std::move(field));
  }
  return true;
}

}  // namespace encoderd::server
