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
      {"44212f656e636f646572642e76312e456e636f646572536572766963652f456d626564400c677270632d74696d"
       "656f7574043939396d1f080d426561726572207333637265744002746508747261696c657273",
       {{":path", "/encoderd.v1.EncoderService/Embed"},
        {"grpc-timeout", "999m"},
        {"authorization", "Bearer s3cret"},  // never indexed
        {"te", "trailers"}},
       160,
       3,
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
    Decode(&d, Hex("ff808080808001"), &ok);  // an index past 2^32
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
