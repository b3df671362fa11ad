// HPACK (RFC 7541), as much as the gRPC port's guard needs: it decodes the
// header blocks a client sends, keeping the client's dynamic table in step,
// and encodes small header blocks that leave every table as it was (literals
// without indexing), so that it can answer a call itself or hand gRPC a
// block of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace encoderd::server {

struct HeaderField {
  std::string name;
  std::string value;
};

class HpackDecoder {
 public:
  // `max_table_bytes`: the largest dynamic table the client may ask for (the
  // peer's SETTINGS_HEADER_TABLE_SIZE; 4096 unless it said otherwise).
  // `max_list_bytes`: the most a decoded block may hold (names, values and
  // 32 bytes a field, as RFC 9113's SETTINGS_MAX_HEADER_LIST_SIZE counts).
  explicit HpackDecoder(size_t max_table_bytes = 4096, size_t max_list_bytes = 64 * 1024)
      : max_table_bytes_(max_table_bytes),
        table_limit_(max_table_bytes),
        max_list_bytes_(max_list_bytes) {}

  // Decodes one whole header block (the payloads of a HEADERS frame and its
  // CONTINUATION frames, padding and priority removed) into `fields`,
  // updating the dynamic table. False when the block is malformed or decodes
  // to more than max_list_bytes: the table is then unreliable and the
  // decoder must not be used again.
  bool Decode(const uint8_t* data, size_t size, std::vector<HeaderField>* fields);

  // Whether the last Decode changed the dynamic table (an insertion or a
  // size update): dropping that block would leave the receiver's table
  // different from the sender's.
  bool changed_table() const { return changed_table_; }
  size_t table_bytes() const { return table_bytes_; }
  size_t table_entries() const { return table_.size(); }

 private:
  bool Field(size_t index, HeaderField* field) const;
  void Insert(HeaderField field);
  void Evict(size_t limit);

  const size_t max_table_bytes_;
  size_t table_limit_;  // the size the client set last (<= max_table_bytes_)
  const size_t max_list_bytes_;
  std::deque<HeaderField> table_;  // newest first
  size_t table_bytes_ = 0;
  bool changed_table_ = false;
};

// Decodes a Huffman-coded string (RFC 7541, 5.2 and Appendix B); false when
// it is malformed (EOS inside, padding longer than 7 bits or not all ones).
bool HuffmanDecode(const uint8_t* data, size_t size, std::string* out);

// Appends `value` as an HPACK integer with an N-bit prefix whose high bits
// are `first` (RFC 7541, 5.1).
void HpackAppendInteger(uint64_t value, int prefix_bits, uint8_t first, std::string* out);

// Appends a "literal header field without indexing, new name", both strings
// raw (RFC 7541, 6.2.2): it changes no table.
void HpackAppendLiteral(std::string_view name, std::string_view value, std::string* out);

}  // namespace encoderd::server
