// A sentencepiece model's normalization map (precompiled_charsmap) is checked
// before the library, which reads it unchecked while encoding, sees it
// (engine/text/sentencepiece_charsmap.h). The maps here are double-array
// tries written by hand; the library's own reading of a good one (x becomes
// y) shows they are laid out as it reads them.
#include "engine/text/sentencepiece_charsmap.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/text/sentencepiece_tokenizer.h"
#include "tests/unit/tokenizer_tiny_models.h"

namespace encoderd {
namespace {

namespace fs = std::filesystem;

// A unit no byte leads to (the label of a leaf's value unit).
constexpr uint32_t kNoEdge = 1u << 31;

// A map in the layout the library reads, from rules key -> replacement: the
// root at unit 0, each node's children in a block of 256 units of its own
// (the child for byte c at base ^ c), its leaf's value unit at base ^ 0.
// (darts-clone's builder packs several nodes' children into one block and
// shares subtrees; the reads are the same.)
struct HandMap {
  std::vector<uint32_t> units;
  std::string strings;

  static HandMap From(const std::map<std::string, std::string>& rules) {
    struct Node {
      std::map<uint8_t, int> children;
      int value = -1;  // offset of the replacement in `strings`
    };
    HandMap out;
    std::vector<Node> nodes(1);
    for (const auto& [key, replacement] : rules) {
      int n = 0;
      for (const char c : key) {
        auto it = nodes[n].children.find(static_cast<uint8_t>(c));
        if (it == nodes[n].children.end()) {
          nodes.emplace_back();
          it = nodes[n].children.emplace(static_cast<uint8_t>(c), nodes.size() - 1).first;
        }
        n = it->second;
      }
      nodes[n].value = static_cast<int>(out.strings.size());
      out.strings += replacement;
      out.strings += '\0';
    }
    // Node i's children in block i + 1.
    out.units.assign(256 * (nodes.size() + 1), kNoEdge);
    std::vector<uint32_t> position(nodes.size(), 0);
    for (size_t i = 0; i < nodes.size(); ++i) {
      const uint32_t base = 256 * static_cast<uint32_t>(i + 1);
      const uint32_t label = i == 0 ? 0 : out.units[position[i]] & 0xFF;
      out.units[position[i]] = Unit(label, nodes[i].value >= 0, position[i] ^ base);
      if (nodes[i].value >= 0) out.units[base] = kNoEdge | static_cast<uint32_t>(nodes[i].value);
      for (const auto& [c, child] : nodes[i].children) {
        position[child] = base ^ c;
        out.units[base ^ c] = c;  // the label, until the child's turn
      }
    }
    return out;
  }

  // A node's unit; offsets from 2^21 on take darts-clone's other encoding.
  static uint32_t Unit(uint32_t label, bool has_leaf, uint32_t offset) {
    EXPECT_LT(offset, 1u << 21);
    return label | (has_leaf ? 1u << 8 : 0) | offset << 10;
  }

  // Where the node that `key` leads to lies, and its children's base.
  uint32_t PositionOf(const std::string& key) const {
    uint32_t p = 0;
    for (const char c : key) p = BaseOf(p) ^ static_cast<uint8_t>(c);
    return p;
  }
  uint32_t BaseOf(uint32_t position) const { return position ^ (units[position] >> 10); }
  uint32_t& NodeOf(const std::string& key) { return units[PositionOf(key)]; }

  std::string Bytes() const {
    const uint32_t trie_bytes = static_cast<uint32_t>(units.size() * 4);
    std::string out(4 + trie_bytes, '\0');
    std::memcpy(out.data(), &trie_bytes, 4);
    std::memcpy(out.data() + 4, units.data(), trie_bytes);
    return out + strings;
  }
};

// The tiny model with `map` as its normalizer's precompiled_charsmap (a
// second normalizer_spec, which protobuf merges into the first), and with a
// self-test sample of input `self_test` when it is not empty: the library
// encodes that while it loads the model, through the map.
std::string TinyModelWithMap(const std::string& map, const std::string& self_test = "") {
  std::string spec, model = testing::TinySentencePieceModel();
  testing::internal::Bytes(2, map, &spec);
  testing::internal::Bytes(3, spec, &model);
  if (!self_test.empty()) {
    std::string sample, samples;
    testing::internal::Bytes(1, self_test, &sample);  // input
    testing::internal::Bytes(2, "-", &sample);        // expected: never what it gives
    testing::internal::Bytes(1, sample, &samples);
    testing::internal::Bytes(4, samples, &model);  // self_test_data
  }
  return model;
}

std::vector<int32_t> Ids(const Tokenizer& t, const std::string& text) {
  auto enc = t.Encode(text, 64, false);
  EXPECT_TRUE(enc.ok()) << enc.status().ToString();
  return enc.ok() ? enc->ids : std::vector<int32_t>{};
}

void ExpectRefused(const Status& status, const std::string& what) {
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find(what), std::string::npos) << status.ToString();
}

// Refused by the check before the library loads the model, not by the one
// after (which would come too late for the self-test's reads).
void ExpectRefusedBeforeLoading(const Status& status, const std::string& what) {
  ExpectRefused(status, what);
  EXPECT_EQ(status.message().find("its check did not see"), std::string::npos) << status.ToString();
}

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream data;
  data << in.rdbuf();
  return data.str();
}

TEST(SentencePieceCharsMap, AHandMadeMapIsReadAsTheLibraryReadsIt) {
  const HandMap map = HandMap::From({{"x", "y"}, {"\xef\xbc\xa1", "A"}});  // fullwidth A
  ASSERT_TRUE(CheckPrecompiledCharsMap(map.Bytes()).ok());
  auto plain = CreateSentencePieceTokenizerFromProto(testing::TinySentencePieceModel(), {}, "tiny");
  auto mapped = CreateSentencePieceTokenizerFromProto(TinyModelWithMap(map.Bytes()), {}, "tiny");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  EXPECT_EQ(Ids(**mapped, "x"), Ids(**plain, "y"));
  EXPECT_NE(Ids(**plain, "x"), Ids(**plain, "y"));
  EXPECT_EQ(Ids(**mapped, "a\xef\xbc\xa1"), Ids(**plain, "aA"));
}

TEST(SentencePieceCharsMap, TheFixtureModelsMapsPass) {
  // Trained with sentencepiece's default nmt_nfkc map, as XLM-R's model is.
  // (That the check finds a normalizer_spec's map at all, the tests above
  // show: each refusal comes through the tiny model's bytes.)
  for (const char* name : {"sentencepiece.unigram.model", "sentencepiece.bpe.model"}) {
    const std::string model =
        ReadAll(fs::path(ENCODERD_FIXTURES_DIR) / "tokenizers" / "spm" / name);
    ASSERT_GT(model.size(), 100000u) << name << " has no map (or is missing)";
    const Status status = CheckSentencePieceCharsMaps(model);
    EXPECT_TRUE(status.ok()) << name << ": " << status.ToString();
  }
}

// A model read as the fast class reads it (a folder's sentencepiece.bpe.model):
// its map taken out as the model had it, the rest of the model unchanged
// (the fixture's whitespace flags are sentencepiece's defaults).
TEST(SentencePieceCharsMap, FastClassModelLeavesTheRestOfTheModel) {
  const std::string model = ReadAll(fs::path(ENCODERD_FIXTURES_DIR) / "tokenizers" / "spm" /
                                    "sentencepiece.unigram.model");
  std::string map;
  auto taken = FastClassModel(model, &map);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_GT(map.size(), 100000u);
  EXPECT_TRUE(CheckPrecompiledCharsMap(map).ok());
  EXPECT_NE(model.find(map), std::string::npos);
  EXPECT_LT(taken->size() + map.size(), model.size());
  std::string none = "x";
  auto again = FastClassModel(*taken, &none);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(*again, *taken);
  const auto before = ReadSentencePieceWhitespace(model);
  const auto after = ReadSentencePieceWhitespace(*taken);
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_EQ(after->add_dummy_prefix, before->add_dummy_prefix);
  EXPECT_EQ(after->remove_extra_whitespaces, before->remove_extra_whitespaces);
  EXPECT_EQ(after->escape_whitespaces, before->escape_whitespaces);
  // Without its map, a fullwidth letter is not made ASCII.
  auto plain = CreateSentencePieceTokenizerFromProto(model, {}, "model");
  auto bare = CreateSentencePieceTokenizerFromProto(*taken, {}, "model");
  ASSERT_TRUE(plain.ok() && bare.ok());
  EXPECT_NE(Ids(**bare,
                "\xef\xbd\x88"
                "ello"),
            Ids(**plain,
                "\xef\xbd\x88"
                "ello"));
  EXPECT_EQ(Ids(**bare, "hello"), Ids(**plain,
                                      "\xef\xbd\x88"
                                      "ello"));
  ExpectRefused(FastClassModel(model.substr(0, model.size() - 3), &map).status(),
                "a field's length");
}

// The fast class takes no whitespace flags from the model (transformers'
// converter writes Strip, runs of spaces made one and Metaspace's prefix),
// and the model's self-test samples, made with its map, would fail it.
TEST(SentencePieceCharsMap, FastClassModelDropsTheFlagsAndTheSelfTest) {
  const std::string unigram = ReadAll(fs::path(ENCODERD_FIXTURES_DIR) / "tokenizers" / "spm" /
                                      "sentencepiece.unigram.model");
  // The same model with its spaces kept: a second normalizer_spec, which
  // protobuf merges into the first.
  std::string flags;
  testing::internal::Int(4, 0, &flags);  // remove_extra_whitespaces
  std::string keeps = unigram;
  testing::internal::Bytes(3, flags, &keeps);
  SentencePieceOptions fast;
  fast.fast_class = true;
  auto plain = CreateSentencePieceTokenizerFromProto(unigram, fast, "unigram");
  auto kept = CreateSentencePieceTokenizerFromProto(keeps, fast, "keeps");
  auto slow = CreateSentencePieceTokenizerFromProto(keeps, {}, "keeps");
  ASSERT_TRUE(plain.ok() && kept.ok() && slow.ok());
  const std::string spaced = "  hello   world ";
  EXPECT_EQ(Ids(**kept, spaced), Ids(**plain, spaced));
  EXPECT_NE(Ids(**slow, spaced), Ids(**plain, spaced));
  // A self-test sample of the tiny model (made Unigram here) that only its
  // map passes: "x" written fullwidth.
  const HandMap map = HandMap::From({{"\xef\xbd\x98", "x"}});
  std::string model = TinyModelWithMap(map.Bytes());
  std::string trainer;
  testing::internal::Int(3, 1, &trainer);  // model_type UNIGRAM
  testing::internal::Bytes(2, trainer, &model);
  auto mapped = CreateSentencePieceTokenizerFromProto(model, {}, "tiny");
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  const auto x = (*mapped)->Encode("\xef\xbd\x98", 64, false);
  ASSERT_TRUE(x.ok());
  std::string sample, samples, expected;
  for (size_t i = 1; i + 1 < x->pieces.size(); ++i) {
    expected += (expected.empty() ? "" : " ") + x->pieces[i];
  }
  testing::internal::Bytes(1, "\xef\xbd\x98", &sample);
  testing::internal::Bytes(2, expected, &sample);
  testing::internal::Bytes(1, sample, &samples);
  testing::internal::Bytes(4, samples, &model);
  auto checked = CreateSentencePieceTokenizerFromProto(model, {}, "tiny");
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  auto as_fast = CreateSentencePieceTokenizerFromProto(model, fast, "tiny");
  ASSERT_TRUE(as_fast.ok()) << as_fast.status().ToString();
  EXPECT_EQ(Ids(**as_fast, "\xef\xbd\x98"), Ids(**checked, "\xef\xbd\x98"));
}

TEST(SentencePieceCharsMap, WhitespaceFlagsAreReadFromTheNormalizerSpec) {
  // The fixture models trained with spm_train's flags.
  const struct {
    const char* name;
    bool add_dummy_prefix, remove_extra_whitespaces;
  } models[] = {{"sentencepiece.bpe.model", true, true},
                {"sentencepiece.keep_spaces.model", true, false},
                {"sentencepiece.no_prefix.model", false, true},
                {"sentencepiece.raw_spaces.model", false, false}};
  for (const auto& m : models) {
    SCOPED_TRACE(m.name);
    const std::string model =
        ReadAll(fs::path(ENCODERD_FIXTURES_DIR) / "tokenizers" / "spm" / m.name);
    const StatusOr<SentencePieceWhitespace> read = ReadSentencePieceWhitespace(model);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_EQ(read->add_dummy_prefix, m.add_dummy_prefix);
    EXPECT_EQ(read->remove_extra_whitespaces, m.remove_extra_whitespaces);
    EXPECT_TRUE(read->escape_whitespaces);
  }
  // Absent flags are true; the last of repeated ones counts, as in protobuf;
  // flags outside normalizer_spec (field 3) are not its.
  std::string spec, denormalizer, model;
  testing::internal::Int(3, 0, &spec);  // add_dummy_prefix
  testing::internal::Int(4, 0, &spec);  // remove_extra_whitespaces
  testing::internal::Int(3, 1, &spec);
  testing::internal::Int(5, 0, &denormalizer);  // escape_whitespaces
  testing::internal::Bytes(3, spec, &model);
  testing::internal::Bytes(5, denormalizer, &model);
  StatusOr<SentencePieceWhitespace> read = ReadSentencePieceWhitespace(model);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_TRUE(read->add_dummy_prefix);
  EXPECT_FALSE(read->remove_extra_whitespaces);
  EXPECT_TRUE(read->escape_whitespaces);
  read = ReadSentencePieceWhitespace("");
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(read->add_dummy_prefix && read->remove_extra_whitespaces);
  ExpectRefused(ReadSentencePieceWhitespace(model.substr(0, model.size() - 1)).status(),
                "not protobuf wire format");
}

TEST(SentencePieceCharsMap, AReplacementOutsideItsStringsIsRefusedAtLoad) {
  // Before, the library read 2 GiB past the map while it loaded the model
  // (its self-test sample "x") and the test binary died.
  HandMap map = HandMap::From({{"x", "y"}});
  const uint32_t leaf_base = 256 * 2;
  map.units[leaf_base] = kNoEdge | 0x7ffffff0u;
  auto t = CreateSentencePieceTokenizerFromProto(TinyModelWithMap(map.Bytes(), "x"), {},
                                                 "damaged.model");
  ASSERT_FALSE(t.ok());
  ExpectRefused(t.status(), "damaged.model");
  ExpectRefused(t.status(), "normalizer_spec.precompiled_charsmap");
  ExpectRefusedBeforeLoading(t.status(), "no NUL ends it");
  // Strings with no NUL at all, and a replacement after the last one.
  map = HandMap::From({{"x", "y"}});
  map.strings.pop_back();
  ExpectRefused(CheckPrecompiledCharsMap(map.Bytes()), "no NUL ends it");
  map.strings = std::string("y\0z", 3);
  map.units[leaf_base] = kNoEdge | 2;
  ExpectRefused(CheckPrecompiledCharsMap(map.Bytes()), "no NUL ends it");
  map.units[leaf_base] = kNoEdge | 0;
  EXPECT_TRUE(CheckPrecompiledCharsMap(map.Bytes()).ok());
}

TEST(SentencePieceCharsMap, ChildrenOutsideTheTrieAreRefusedAtLoad) {
  // Before: loading the model (its self-test sample "x") read a unit 1 GiB
  // past the map, and the test binary died.
  HandMap map = HandMap::From({{"x", "y"}});
  map.units[0] = HandMap::Unit(0, false, 0) | (1u << 28) << 2 | 1u << 9;  // a large offset
  auto t =
      CreateSentencePieceTokenizerFromProto(TinyModelWithMap(map.Bytes(), "x"), {}, "far.model");
  ASSERT_FALSE(t.ok());
  ExpectRefusedBeforeLoading(t.status(), "outside its trie");
  // The last block cut short: a child of byte 0xff would be read past it.
  map = HandMap::From({{"x", "y"}});
  map.units.resize(map.units.size() - 1);
  ExpectRefused(CheckPrecompiledCharsMap(map.Bytes()), "outside its trie of 767 units");
  // A node below the root: "xz"'s node sends its children past the end.
  map = HandMap::From({{"xz", "y"}});
  map.NodeOf("x") ^= 2048u << 10;  // base 512 ^ 2048, past the 4 blocks
  ExpectRefused(CheckPrecompiledCharsMap(map.Bytes()), "outside its trie");
  // A NUL byte in a text is a label too: an edge of label 0 from the root
  // to a node whose children lie outside.
  map = HandMap::From({{"x", "y"}});
  map.units[256] = HandMap::Unit(0, false, 256 ^ (1u << 20));
  ExpectRefused(CheckPrecompiledCharsMap(map.Bytes()), "unit 256 has its children");
  // The root's own leaf is never read: a bad value there passes.
  map = HandMap::From({{"x", "y"}});
  map.units[0] |= 1u << 8;
  map.units[256] = kNoEdge | 0x7ffffff0u;
  EXPECT_TRUE(CheckPrecompiledCharsMap(map.Bytes()).ok());
}

TEST(SentencePieceCharsMap, ACycleIsRefused) {
  // "ab"'s node takes the root's children as its own: "abab..." matches on
  // and on, one more replacement every two bytes.
  HandMap map = HandMap::From({{"ab", "y"}});
  const uint32_t b_position = (256 * 2) ^ 'b';
  map.NodeOf("ab") = HandMap::Unit('b', true, b_position ^ 256);
  ExpectRefused(CheckPrecompiledCharsMap(map.Bytes()), "cycle");
}

TEST(SentencePieceCharsMap, AtMost32MatchesAlongAText) {
  // The library keeps 32 matches of one prefix search; darts-clone counts
  // them all, and the normalizer reads as many as it counted.
  std::map<std::string, std::string> rules;
  for (int n = 1; n <= 32; ++n) rules[std::string(n, 'a')] = "b";
  EXPECT_TRUE(CheckPrecompiledCharsMap(HandMap::From(rules).Bytes()).ok());
  auto t = CreateSentencePieceTokenizerFromProto(TinyModelWithMap(HandMap::From(rules).Bytes()), {},
                                                 "tiny");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto plain = CreateSentencePieceTokenizerFromProto(testing::TinySentencePieceModel(), {}, "tiny");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(Ids(**t, std::string(40, 'a')), Ids(**plain, "bb"));  // 32 a's, then 8
  rules[std::string(33, 'a')] = "b";
  ExpectRefused(CheckPrecompiledCharsMap(HandMap::From(rules).Bytes()), "match more than 32 of");
}

TEST(SentencePieceCharsMap, MatchesCountedThroughASharedSubtree) {
  // "0" leads to a chain of c's, 16 or 17 leaves deep; "a" to a chain of 16
  // a's whose last node takes "0"'s children as its own (darts-clone shares
  // subtrees so). The check meets the c's through "0" first; through the a's
  // it reuses what it found there: 16 + 16 matches pass, 16 + 17 do not.
  for (const int cs : {16, 17}) {
    std::map<std::string, std::string> rules;
    for (int n = 1; n <= 16; ++n) rules[std::string(n, 'a')] = "b";
    for (int n = 1; n <= cs; ++n) rules["0" + std::string(n, 'c')] = "d";
    HandMap map = HandMap::From(rules);
    const std::string a16(16, 'a');
    map.NodeOf(a16) =
        HandMap::Unit('a', true, map.PositionOf(a16) ^ map.BaseOf(map.PositionOf("0")));
    const Status status = CheckPrecompiledCharsMap(map.Bytes());
    if (cs == 16) {
      EXPECT_TRUE(status.ok()) << status.ToString();
    } else {
      ExpectRefused(status, "match more than 32 of");
    }
  }
}

TEST(SentencePieceCharsMap, DamagedHeadersAndProtobufAreRefused) {
  const std::string good = HandMap::From({{"x", "y"}}).Bytes();
  EXPECT_TRUE(CheckPrecompiledCharsMap("").ok());  // no map
  ExpectRefused(CheckPrecompiledCharsMap(good.substr(0, 4)), "too few");
  std::string map = good;
  map[0] = static_cast<char>(map[0] + 1);  // trie bytes not a multiple of 4
  ExpectRefused(CheckPrecompiledCharsMap(map), "4-byte units");
  map = good;
  std::memset(map.data(), 0, 4);  // an empty trie
  ExpectRefused(CheckPrecompiledCharsMap(map), "4-byte units");
  map = good;
  const uint32_t too_long = static_cast<uint32_t>(good.size() - 4 + 4);  // 4 more than follow
  std::memcpy(map.data(), &too_long, 4);
  ExpectRefused(CheckPrecompiledCharsMap(map), "only " + std::to_string(good.size() - 4));

  // The model's wire format: a field cut short, a damaged group; a group
  // skipped whole (as protobuf skips an unknown one) and the map after it
  // still checked.
  std::string model = TinyModelWithMap(good);
  ExpectRefused(CheckSentencePieceCharsMaps(model.substr(0, model.size() - 3)),
                "not protobuf wire format");
  ExpectRefused(CheckSentencePieceCharsMaps(std::string("\x0b\x14", 2)), "a group's end");
  std::string damaged = good;
  damaged[4] = 0x01;
  damaged[5] = damaged[6] = 0x7f;  // the root's children far away
  std::string spec;
  testing::internal::Bytes(2, damaged, &spec);
  std::string with_group = "\x7b\x08\x01\x7c";     // group 15 { field 1: 1 }
  testing::internal::Bytes(5, spec, &with_group);  // denormalizer_spec
  ExpectRefused(CheckSentencePieceCharsMaps(with_group), "denormalizer_spec.precompiled_charsmap");

  // Tags as protobuf reads them: at most 5 bytes into 32 bits. A 5-byte tag
  // whose value fits is field 3 (normalizer_spec) to both; one with bits
  // past 32, which protobuf drops (reading field 3 and the map in it), is
  // refused, as is one of 6 bytes. Likewise the map's own field 2.
  std::string padded = std::string("\x9a\x80\x80\x80\x00", 5);  // field 3, length-delimited
  testing::internal::Varint(spec.size(), &padded);
  ExpectRefused(CheckSentencePieceCharsMaps(padded + spec), "normalizer_spec.precompiled_charsmap");
  for (const std::string& tag :
       {std::string("\x9a\x80\x80\x80\x10", 5), std::string("\x9a\x80\x80\x80\x80\x00", 6)}) {
    std::string padded_model = tag;
    testing::internal::Varint(spec.size(), &padded_model);
    ExpectRefused(CheckSentencePieceCharsMaps(padded_model + spec), "a field's tag");
  }
  std::string inner = std::string("\x92\x80\x80\x80\x10", 5);  // field 2, past 32 bits
  testing::internal::Varint(damaged.size(), &inner);
  std::string outer;
  testing::internal::Bytes(3, inner + damaged, &outer);
  ExpectRefused(CheckSentencePieceCharsMaps(outer), "normalizer_spec: not protobuf wire format");
  // A length of 5 bytes is read (and the map in it checked); one of more is
  // refused.
  std::string five_byte_length = "\x1a";  // field 3, length-delimited
  for (int shift = 0; shift < 35; shift += 7) {
    const uint64_t bits = (spec.size() >> shift) & 0x7f;
    five_byte_length.push_back(static_cast<char>(shift < 28 ? bits | 0x80 : bits));
  }
  ExpectRefused(CheckSentencePieceCharsMaps(five_byte_length + spec),
                "normalizer_spec.precompiled_charsmap");
  ExpectRefused(CheckSentencePieceCharsMaps(std::string("\x1a\x81\x80\x80\x80\x80\x00x", 8)),
                "a field's length");
}

// The tokenizers library's Precompiled (spm_precompiled): one grapheme
// cluster at a time, a cluster of under 6 bytes replaced whole by its
// shortest key's replacement, any other character by character; where each
// normalized byte came from, as sentencepiece's norm_to_orig gives it.
TEST(PrecompiledGraphemes, NormalizesAClusterAtATimeAsTheLibraryDoes) {
  // e + U+0323 -> U+1EB9, e + U+0323 + U+0302 -> U+1EC7, fullwidth e -> e,
  // fullwidth e + U+0301 -> U+00E9, "\r" -> " ", "x" dropped.
  const HandMap map = HandMap::From({{"e\xcc\xa3", "\xe1\xba\xb9"},
                                     {"e\xcc\xa3\xcc\x82", "\xe1\xbb\x87"},
                                     {"\xef\xbd\x85", "e"},
                                     {"\xef\xbd\x85\xcc\x81", "\xc3\xa9"},
                                     {"\r", " "},
                                     {"x", ""},
                                     {"\xe3\x88\x80", "(a)"}});
  auto made = PrecompiledGraphemes::Create(map.Bytes());
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const PrecompiledGraphemes& g = **made;
  const auto normalized = [&g](std::string_view text) {
    auto n = g.Normalize(text);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return n.ok() ? std::move(n).value() : PrecompiledGraphemes::Normalized{};
  };
  using At = std::vector<uint32_t>;
  // NFD U+1EC7, one cluster of 5 bytes: the shortest key's replacement
  // (sentencepiece's longest match gives U+1EC7).
  auto n = normalized("e\xcc\xa3\xcc\x82");
  EXPECT_EQ(n.text, "\xe1\xba\xb9");
  EXPECT_EQ(n.input_at, (At{0, 0, 0, 5}));
  // Fullwidth e + U+0301: "e" (sentencepiece's gives U+00E9); then "a".
  n = normalized(
      "\xef\xbd\x85\xcc\x81"
      "a");
  EXPECT_EQ(n.text, "ea");
  EXPECT_EQ(n.input_at, (At{0, 5, 6}));
  // A cluster of 6 bytes or more, character by character: no key of one
  // character matches here, so it stays as it is.
  n = normalized("e\xcc\xa3\xcc\x82\xcc\x80");
  EXPECT_EQ(n.text, "e\xcc\xa3\xcc\x82\xcc\x80");
  EXPECT_EQ(n.input_at, (At{0, 1, 1, 3, 3, 5, 5, 7}));
  // "\r\n" is one cluster whose first character is a key: one space.
  n = normalized("a\r\nb");
  EXPECT_EQ(n.text, "a b");
  EXPECT_EQ(n.input_at, (At{0, 1, 3, 4}));
  // A character replaced by nothing leaves no byte.
  n = normalized("axb");
  EXPECT_EQ(n.text, "ab");
  EXPECT_EQ(n.input_at, (At{0, 2, 3}));
  n = normalized("xx");
  EXPECT_EQ(n.text, "");
  EXPECT_EQ(n.input_at, (At{2}));
  n = normalized("");
  EXPECT_EQ(n.text, "");
  EXPECT_EQ(n.input_at, (At{0}));
  // A replacement of several characters comes from where its own began.
  n = normalized("b\xe3\x88\x80");
  EXPECT_EQ(n.text, "b(a)");
  EXPECT_EQ(n.input_at, (At{0, 1, 1, 1, 4}));
  // A NUL byte ends the library's search (no key holds one) and is kept.
  n = normalized(std::string("a\0x", 3));
  EXPECT_EQ(n.text, std::string("a\0", 2));
  EXPECT_EQ(n.input_at, (At{0, 1, 3}));
}

TEST(PrecompiledGraphemes, RefusesMapsTheLibraryRefuses) {
  ExpectRefused(PrecompiledGraphemes::Create("").status(), "empty");
  ExpectRefused(PrecompiledGraphemes::Create(HandMap::From({{"a", "\xff"}}).Bytes()).status(),
                "not UTF-8");
  HandMap map = HandMap::From({{"x", "y"}});
  map.units[map.BaseOf(map.PositionOf("x"))] = kNoEdge | 1000;
  ExpectRefused(PrecompiledGraphemes::Create(map.Bytes()).status(), "no NUL ends it");
  // A replacement that begins inside a character: the strings are UTF-8
  // ("\xc3\xa9" and a NUL), the one read from byte 1 is not. sentencepiece
  // takes the map (it copies bytes).
  HandMap inside = HandMap::From({{"a", "\xc3\xa9"}});
  ASSERT_TRUE(PrecompiledGraphemes::Create(inside.Bytes()).ok());
  inside.units[inside.BaseOf(inside.PositionOf("a"))] = kNoEdge | 1;
  ExpectRefused(PrecompiledGraphemes::Create(inside.Bytes()).status(), "inside a character");
  EXPECT_TRUE(CheckPrecompiledCharsMap(inside.Bytes()).ok());
}

}  // namespace
}  // namespace encoderd
