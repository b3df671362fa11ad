// HPACK decoding and encoding (server/net/hpack.h) against the examples of
// RFC 7541, Appendix C, blocks made by another implementation (Python's
// hpack 4.0, with a 256-byte table that evicts), and malformed blocks.
#include "server/net/hpack.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace encoderd::server {
namespace {

std::string Hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

using Fields = std::vector<std::pair<std::string, std::string>>;

Fields Decode(HpackDecoder* decoder, const std::string& block, bool* ok = nullptr) {
  std::vector<HeaderField> fields;
  const bool decoded = decoder->Decode(Bytes(block), block.size(), &fields);
  if (ok) *ok = decoded;
  EXPECT_TRUE(decoded || ok);
  Fields out;
  for (auto& f : fields) out.emplace_back(f.name, f.value);
  return out;
}

const Fields kRequest1 = {
    {":method", "GET"}, {":scheme", "http"}, {":path", "/"}, {":authority", "www.example.com"}};
Fields Request2() {
  Fields f = kRequest1;
  f.emplace_back("cache-control", "no-cache");
  return f;
}
const Fields kRequest3 = {{":method", "GET"},
                          {":scheme", "https"},
                          {":path", "/index.html"},
                          {":authority", "www.example.com"},
                          {"custom-key", "custom-value"}};

TEST(HpackTest, DecodesTheRfcRequestsWithoutHuffman) {  // RFC 7541, C.3
  HpackDecoder d;
  EXPECT_EQ(Decode(&d, Hex("828684410f7777772e6578616d706c652e636f6d")), kRequest1);
  EXPECT_TRUE(d.changed_table());
  EXPECT_EQ(d.table_bytes(), 57u);
  EXPECT_EQ(Decode(&d, Hex("828684be58086e6f2d6361636865")), Request2());
  EXPECT_EQ(d.table_bytes(), 110u);
  EXPECT_EQ(Decode(&d, Hex("828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565")),
            kRequest3);
  EXPECT_EQ(d.table_bytes(), 164u);
  EXPECT_EQ(d.table_entries(), 3u);
}

TEST(HpackTest, DecodesTheRfcRequestsWithHuffman) {  // RFC 7541, C.4
  HpackDecoder d;
  EXPECT_EQ(Decode(&d, Hex("828684418cf1e3c2e5f23a6ba0ab90f4ff")), kRequest1);
  EXPECT_EQ(Decode(&d, Hex("828684be5886a8eb10649cbf")), Request2());
  EXPECT_EQ(Decode(&d, Hex("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf")), kRequest3);
  EXPECT_EQ(d.table_bytes(), 164u);
}

TEST(HpackTest, FollowsAnotherEncodersTableThroughSizeUpdateAndEviction) {
  // Python hpack 4.0's Encoder with header_table_size = 256, Huffman on the
  // first and third blocks; its decoder's table size after each block.
  const std::string date1 = "Mon, 21 Oct 2013 20:13:21 GMT", site = "https://www.example.com";
  struct Block {
    std::string hex;
    Fields fields;
    size_t table_bytes, entries;
    bool changed;
  };
  const std::vector<Block> blocks = {
      {"3fe101488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad1718"
       "63c78f0b97c8e9ae82ae43d3",
       {{":status", "302"}, {"cache-control", "private"}, {"date", date1}, {"location", site}},
       222,
       4,
       true},
      {"4803333037c1c0bf",
       {{":status", "307"}, {"cache-control", "private"}, {"date", date1}, {"location", site}},
       222,
       4,
       true},
      {"88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335df"
       "dfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
       {{":status", "200"},
        {"cache-control", "private"},
        {"date", "Mon, 21 Oct 2013 20:13:22 GMT"},
        {"location", site},
        {"content-encoding", "gzip"},
        {"set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"}},
       215,
       3,
       true},
      {"441a2f656e636f646572642e76312e456e636f6465722f456d626564400c677270632d74696d656f75740439"
       "39396d1f080d426561726572207333637265744002746508747261696c657273",
       {{":path", "/encoderd.v1.Encoder/Embed"},
        {"grpc-timeout", "999m"},
        {"authorization", "Bearer s3cret"},  // never indexed
        {"te", "trailers"}},
       251,
       4,
       true},
  };
  HpackDecoder d;
  for (const Block& b : blocks) {
    EXPECT_EQ(Decode(&d, Hex(b.hex)), b.fields);
    EXPECT_EQ(d.table_bytes(), b.table_bytes);
    EXPECT_EQ(d.table_entries(), b.entries);
    EXPECT_EQ(d.changed_table(), b.changed);
  }
  // Only indexed fields: nothing changes.
  EXPECT_EQ(Decode(&d, Hex("bebf")).size(), 2u);
  EXPECT_FALSE(d.changed_table());
}

TEST(HpackTest, EncodesIntegersAsTheRfcDoes) {  // RFC 7541, C.1
  std::string out;
  HpackAppendInteger(10, 5, 0, &out);
  EXPECT_EQ(out, Hex("0a"));
  out.clear();
  HpackAppendInteger(1337, 5, 0xe0, &out);
  EXPECT_EQ(out, Hex("ff9a0a"));
  out.clear();
  HpackAppendInteger(42, 8, 0, &out);
  EXPECT_EQ(out, Hex("2a"));
}

TEST(HpackTest, LiteralsDecodeBackAndChangeNoTable) {
  std::string block;
  HpackAppendLiteral(":status", "200", &block);
  HpackAppendLiteral("grpc-message", std::string(300, 'x'), &block);  // a multi-byte length
  HpackDecoder d;
  EXPECT_EQ(Decode(&d, block),
            (Fields{{":status", "200"}, {"grpc-message", std::string(300, 'x')}}));
  EXPECT_FALSE(d.changed_table());
  EXPECT_EQ(d.table_entries(), 0u);
}

TEST(HpackTest, HuffmanPaddingMustBeShortAndAllOnes) {
  std::string out;
  EXPECT_TRUE(HuffmanDecode(Bytes(Hex("1f")), 1, &out));  // 'a' = 00011, then 111
  EXPECT_EQ(out, "a");
  EXPECT_FALSE(HuffmanDecode(Bytes(Hex("18")), 1, &out));    // padded with zeros
  EXPECT_FALSE(HuffmanDecode(Bytes(Hex("1fff")), 2, &out));  // 11 bits of padding
  // EOS (30 ones) inside the string.
  EXPECT_FALSE(HuffmanDecode(Bytes(Hex("fffffffc")), 4, &out));
}

// Every code of RFC 7541, Appendix B (copied from Python's hpack 4.0, which
// keeps the codes themselves; the decoder derives them from the lengths):
// each symbol, padded with ones, decodes to itself; EOS decodes to an error.
TEST(HpackTest, DecodesEveryHuffmanCodeOfTheRfc) {
  struct Code {
    uint32_t bits;
    int length;
  };
  static const Code kCodes[257] = {
      {0x1ff8, 13},     {0x7fffd8, 23},   {0xfffffe2, 28},  {0xfffffe3, 28},  {0xfffffe4, 28},
      {0xfffffe5, 28},  {0xfffffe6, 28},  {0xfffffe7, 28},  {0xfffffe8, 28},  {0xffffea, 24},
      {0x3ffffffc, 30}, {0xfffffe9, 28},  {0xfffffea, 28},  {0x3ffffffd, 30}, {0xfffffeb, 28},
      {0xfffffec, 28},  {0xfffffed, 28},  {0xfffffee, 28},  {0xfffffef, 28},  {0xffffff0, 28},
      {0xffffff1, 28},  {0xffffff2, 28},  {0x3ffffffe, 30}, {0xffffff3, 28},  {0xffffff4, 28},
      {0xffffff5, 28},  {0xffffff6, 28},  {0xffffff7, 28},  {0xffffff8, 28},  {0xffffff9, 28},
      {0xffffffa, 28},  {0xffffffb, 28},  {0x14, 6},        {0x3f8, 10},      {0x3f9, 10},
      {0xffa, 12},      {0x1ff9, 13},     {0x15, 6},        {0xf8, 8},        {0x7fa, 11},
      {0x3fa, 10},      {0x3fb, 10},      {0xf9, 8},        {0x7fb, 11},      {0xfa, 8},
      {0x16, 6},        {0x17, 6},        {0x18, 6},        {0x0, 5},         {0x1, 5},
      {0x2, 5},         {0x19, 6},        {0x1a, 6},        {0x1b, 6},        {0x1c, 6},
      {0x1d, 6},        {0x1e, 6},        {0x1f, 6},        {0x5c, 7},        {0xfb, 8},
      {0x7ffc, 15},     {0x20, 6},        {0xffb, 12},      {0x3fc, 10},      {0x1ffa, 13},
      {0x21, 6},        {0x5d, 7},        {0x5e, 7},        {0x5f, 7},        {0x60, 7},
      {0x61, 7},        {0x62, 7},        {0x63, 7},        {0x64, 7},        {0x65, 7},
      {0x66, 7},        {0x67, 7},        {0x68, 7},        {0x69, 7},        {0x6a, 7},
      {0x6b, 7},        {0x6c, 7},        {0x6d, 7},        {0x6e, 7},        {0x6f, 7},
      {0x70, 7},        {0x71, 7},        {0x72, 7},        {0xfc, 8},        {0x73, 7},
      {0xfd, 8},        {0x1ffb, 13},     {0x7fff0, 19},    {0x1ffc, 13},     {0x3ffc, 14},
      {0x22, 6},        {0x7ffd, 15},     {0x3, 5},         {0x23, 6},        {0x4, 5},
      {0x24, 6},        {0x5, 5},         {0x25, 6},        {0x26, 6},        {0x27, 6},
      {0x6, 5},         {0x74, 7},        {0x75, 7},        {0x28, 6},        {0x29, 6},
      {0x2a, 6},        {0x7, 5},         {0x2b, 6},        {0x76, 7},        {0x2c, 6},
      {0x8, 5},         {0x9, 5},         {0x2d, 6},        {0x77, 7},        {0x78, 7},
      {0x79, 7},        {0x7a, 7},        {0x7b, 7},        {0x7ffe, 15},     {0x7fc, 11},
      {0x3ffd, 14},     {0x1ffd, 13},     {0xffffffc, 28},  {0xfffe6, 20},    {0x3fffd2, 22},
      {0xfffe7, 20},    {0xfffe8, 20},    {0x3fffd3, 22},   {0x3fffd4, 22},   {0x3fffd5, 22},
      {0x7fffd9, 23},   {0x3fffd6, 22},   {0x7fffda, 23},   {0x7fffdb, 23},   {0x7fffdc, 23},
      {0x7fffdd, 23},   {0x7fffde, 23},   {0xffffeb, 24},   {0x7fffdf, 23},   {0xffffec, 24},
      {0xffffed, 24},   {0x3fffd7, 22},   {0x7fffe0, 23},   {0xffffee, 24},   {0x7fffe1, 23},
      {0x7fffe2, 23},   {0x7fffe3, 23},   {0x7fffe4, 23},   {0x1fffdc, 21},   {0x3fffd8, 22},
      {0x7fffe5, 23},   {0x3fffd9, 22},   {0x7fffe6, 23},   {0x7fffe7, 23},   {0xffffef, 24},
      {0x3fffda, 22},   {0x1fffdd, 21},   {0xfffe9, 20},    {0x3fffdb, 22},   {0x3fffdc, 22},
      {0x7fffe8, 23},   {0x7fffe9, 23},   {0x1fffde, 21},   {0x7fffea, 23},   {0x3fffdd, 22},
      {0x3fffde, 22},   {0xfffff0, 24},   {0x1fffdf, 21},   {0x3fffdf, 22},   {0x7fffeb, 23},
      {0x7fffec, 23},   {0x1fffe0, 21},   {0x1fffe1, 21},   {0x3fffe0, 22},   {0x1fffe2, 21},
      {0x7fffed, 23},   {0x3fffe1, 22},   {0x7fffee, 23},   {0x7fffef, 23},   {0xfffea, 20},
      {0x3fffe2, 22},   {0x3fffe3, 22},   {0x3fffe4, 22},   {0x7ffff0, 23},   {0x3fffe5, 22},
      {0x3fffe6, 22},   {0x7ffff1, 23},   {0x3ffffe0, 26},  {0x3ffffe1, 26},  {0xfffeb, 20},
      {0x7fff1, 19},    {0x3fffe7, 22},   {0x7ffff2, 23},   {0x3fffe8, 22},   {0x1ffffec, 25},
      {0x3ffffe2, 26},  {0x3ffffe3, 26},  {0x3ffffe4, 26},  {0x7ffffde, 27},  {0x7ffffdf, 27},
      {0x3ffffe5, 26},  {0xfffff1, 24},   {0x1ffffed, 25},  {0x7fff2, 19},    {0x1fffe3, 21},
      {0x3ffffe6, 26},  {0x7ffffe0, 27},  {0x7ffffe1, 27},  {0x3ffffe7, 26},  {0x7ffffe2, 27},
      {0xfffff2, 24},   {0x1fffe4, 21},   {0x1fffe5, 21},   {0x3ffffe8, 26},  {0x3ffffe9, 26},
      {0xffffffd, 28},  {0x7ffffe3, 27},  {0x7ffffe4, 27},  {0x7ffffe5, 27},  {0xfffec, 20},
      {0xfffff3, 24},   {0xfffed, 20},    {0x1fffe6, 21},   {0x3fffe9, 22},   {0x1fffe7, 21},
      {0x1fffe8, 21},   {0x7ffff3, 23},   {0x3fffea, 22},   {0x3fffeb, 22},   {0x1ffffee, 25},
      {0x1ffffef, 25},  {0xfffff4, 24},   {0xfffff5, 24},   {0x3ffffea, 26},  {0x7ffff4, 23},
      {0x3ffffeb, 26},  {0x7ffffe6, 27},  {0x3ffffec, 26},  {0x3ffffed, 26},  {0x7ffffe7, 27},
      {0x7ffffe8, 27},  {0x7ffffe9, 27},  {0x7ffffea, 27},  {0x7ffffeb, 27},  {0xffffffe, 28},
      {0x7ffffec, 27},  {0x7ffffed, 27},  {0x7ffffee, 27},  {0x7ffffef, 27},  {0x7fffff0, 27},
      {0x3ffffee, 26},  {0x3fffffff, 30},
  };
  for (int symbol = 0; symbol <= 256; ++symbol) {
    const Code c = kCodes[symbol];
    const int padded = (c.length + 7) / 8 * 8;
    const uint64_t bits =
        (uint64_t{c.bits} << (padded - c.length)) | ((uint64_t{1} << (padded - c.length)) - 1);
    std::string bytes;
    for (int at = padded - 8; at >= 0; at -= 8) bytes.push_back(static_cast<char>(bits >> at));
    std::string out;
    const bool ok = HuffmanDecode(Bytes(bytes), bytes.size(), &out);
    if (symbol == 256) {
      EXPECT_FALSE(ok);
    } else {
      ASSERT_TRUE(ok) << symbol;
      EXPECT_EQ(out, std::string(1, static_cast<char>(symbol))) << symbol;
    }
  }
}

TEST(HpackTest, RefusesMalformedAndOversizedBlocks) {
  bool ok = true;
  {
    HpackDecoder d;
    Decode(&d, Hex("80"), &ok);  // index 0
    EXPECT_FALSE(ok);
  }
  {
    HpackDecoder d;
    Decode(&d, Hex("be"), &ok);  // index 62: the dynamic table is empty
    EXPECT_FALSE(ok);
  }
  {
    HpackDecoder d;
    Decode(&d, Hex("410f7777772e6578616d"), &ok);  // value cut short
    EXPECT_FALSE(ok);
  }
  {
    HpackDecoder d(4096);
    Decode(&d, Hex("3fe21f"), &ok);  // a size update to 4097
    EXPECT_FALSE(ok);
  }
  {
    HpackDecoder d;
    Decode(&d, Hex("823f01"), &ok);  // a size update after a field
    EXPECT_FALSE(ok);
  }
  {
    HpackDecoder d;
    Decode(&d, Hex("ff808080808001"), &ok);  // more than 5 continuation bytes
    EXPECT_FALSE(ok);
  }
  {
    HpackDecoder d;
    Decode(&d, Hex("ffffffffff0f"), &ok);  // an index past 2^32
    EXPECT_FALSE(ok);
  }
  {
    // One 1,000-byte entry referenced 100 times decodes to 100 KB: over the
    // list limit (64 KiB), whatever the block's own size.
    HpackDecoder d;
    std::string block = Hex("40");
    HpackAppendInteger(1, 7, 0, &block);
    block += "x";
    HpackAppendInteger(1000, 7, 0, &block);
    block += std::string(1000, 'y');
    Decode(&d, block, &ok);
    ASSERT_TRUE(ok);
    Decode(&d, std::string(100, '\xbe'), &ok);
    EXPECT_FALSE(ok);
  }
}

}  // namespace
}  // namespace encoderd::server
