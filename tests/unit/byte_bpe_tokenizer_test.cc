// Byte-level BPE on a tiny in-memory model: GPT-2's pattern, the merge
// order, add_prefix_space, and errors for damaged files. (Agreement with the
// reference on real text: tokenizer_test.cc's "bytebpe" fixture.)
#include "engine/text/byte_bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/text/bounded_encoding.h"
#include "tests/unit/tokenizer_tiny_models.h"

namespace encoderd {
namespace {

constexpr int64_t kNoLimit = 1 << 20;

std::unique_ptr<Tokenizer> Tiny(ByteBpeOptions options = {}) {
  const testing::TinyByteBpe tiny = testing::MakeTinyByteBpe(ByteLevelSpelling);
  auto t = CreateByteBpeTokenizerFromData(tiny.vocab_json, tiny.merges, options, "tiny");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

// The pieces of `text` without <s> and </s>, each as the bytes it stands for.
std::vector<std::string> Pieces(const Tokenizer& t, const std::string& text) {
  const StatusOr<Encoding> enc = t.Encode(text, kNoLimit, false);
  EXPECT_TRUE(enc.ok()) << enc.status().ToString();
  if (!enc.ok()) return {};
  EXPECT_EQ(enc->pieces.front(), "<s>");
  EXPECT_EQ(enc->pieces.back(), "</s>");
  std::vector<std::string> out(enc->pieces.begin() + 1, enc->pieces.end() - 1);
  // Back from the byte stand-ins: find each byte whose spelling comes next.
  for (std::string& piece : out) {
    std::string bytes;
    for (size_t pos = 0; pos < piece.size();) {
      bool found = false;
      for (int b = 0; b < 256 && !found; ++b) {
        const std::string s = ByteLevelSpelling(std::string(1, static_cast<char>(b)));
        if (piece.compare(pos, s.size(), s) == 0) {
          bytes += static_cast<char>(b);
          pos += s.size();
          found = true;
        }
      }
      if (!found) return {"unspellable piece " + piece};
    }
    piece = bytes;
  }
  return out;
}

using Strings = std::vector<std::string>;

TEST(ByteBpeTest, SpellsBytesAsGpt2Does) {
  EXPECT_EQ(ByteLevelSpelling(" "), "\xc4\xa0");     // U+0120 "Ġ"
  EXPECT_EQ(ByteLevelSpelling("\n"), "\xc4\x8a");    // U+010A "Ċ"
  EXPECT_EQ(ByteLevelSpelling("a!~"), "a!~");        // printable ASCII as it is
  EXPECT_EQ(ByteLevelSpelling("\xad"), "\xc5\x83");  // soft hyphen: U+0143, the last stand-in
  EXPECT_EQ(ByteLevelSpelling("\xe4\xb8\xad"), "\xc3\xa4\xc2\xb8\xc5\x83");  // 中: ä ¸ Ń
}

TEST(ByteBpeTest, MergesLowestRankFirstWithinEachPieceOfThePattern) {
  const auto t = Tiny();
  ASSERT_NE(t, nullptr);
  // "the": t h e -> t he (the " t" + "he" merge needs " t"). " thing":
  // " t", then "in", then "ing".
  EXPECT_EQ(Pieces(*t, "the thing"), (Strings{"t", "he", " t", "h", "ing"}));
  EXPECT_EQ(Pieces(*t, " the"), (Strings{" the"}));
  // One rank's pairs leftmost first: "aaa" pairs its first two.
  EXPECT_EQ(Pieces(*t, "aaa"), (Strings{"aa", "a"}));
  EXPECT_EQ(Pieces(*t, "aaaaa"), (Strings{"aaaa", "a"}));
  EXPECT_EQ(Pieces(*t, "bbb"), (Strings{"b", "b", "b"}));
  // Four spaces before a word: a run of three ("  " merged leftmost first),
  // then " b" (no " b" merge); four would have been "  ", "  ".
  EXPECT_EQ(Pieces(*t, "a    b"), (Strings{"a", "  ", " ", " ", "b"}));
  // Trailing spaces stay one run; a newline before " b" is its own piece.
  EXPECT_EQ(Pieces(*t, "a   "), (Strings{"a", "  ", " "}));
  EXPECT_EQ(Pieces(*t, "a\n b"), (Strings{"a", "\n", " ", "b"}));
  // The pattern's pieces are never merged across: "'s" is a contraction
  // (lower case only) whatever follows, "1" and "a" are apart.
  EXPECT_EQ(Pieces(*t, "it's"), (Strings{"i", "t", "'s"}));
  EXPECT_EQ(Pieces(*t, "we're"), (Strings{"w", "e", "'re"}));
  EXPECT_EQ(Pieces(*t, "x'rv"), (Strings{"x", "'", "r", "v"}));
  EXPECT_EQ(Pieces(*t, "'st"), (Strings{"'s", "t"}));
  EXPECT_EQ(Pieces(*t, "x'St"), (Strings{"x", "'", "S", "t"}));
  EXPECT_EQ(Pieces(*t, "1a"), (Strings{"1", "a"}));
  EXPECT_EQ(Pieces(*t, "\xe4\xb8\xad"), (Strings{"\xe4\xb8\xad"}));
  // A byte the merges do not know is still a token: never <unk>.
  const StatusOr<Encoding> enc = t->Encode("\x01\xf0\x9f\x98\x80", kNoLimit, false);
  ASSERT_TRUE(enc.ok());
  for (const int32_t id : enc->ids) EXPECT_NE(id, t->special_tokens().unk);
  EXPECT_EQ(enc->ids.size(), 2u + 5u);
}

TEST(ByteBpeTest, SpecialTokensComeFromTheVocabulary) {
  const auto t = Tiny();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->special_tokens().bos, 0);
  EXPECT_EQ(t->special_tokens().pad, 1);
  EXPECT_EQ(t->special_tokens().eos, 2);
  EXPECT_EQ(t->special_tokens().unk, 3);
  EXPECT_EQ(t->vocab_size(), 4 + 256 + 22 + 1);
  EXPECT_EQ(t->Describe().rfind("byte-level BPE", 0), 0u) << t->Describe();
}

// A window cut between the "'r" and the "e" of 're (and of 've, 'll): the
// window alone makes "'" and "r" pieces, the whole text one "'re". Runs of
// 64 a's, two tokens each, keep the first window short of max_tokens, so a
// second window starts where the first says.
TEST(ByteBpeTest, AWindowCutInsideAContractionResumesAtItsApostrophe) {
  const auto t = Tiny();
  ASSERT_NE(t, nullptr);
  constexpr int64_t kMaxTokens = 40;
  const size_t budget = InitialWindowBytes(kMaxTokens);
  for (const std::string contraction : {"'re", "'ve", "'ll"}) {
    SCOPED_TRACE(contraction);
    // The apostrophe at budget - 2: the window ends right after its next
    // character.
    std::string text;
    while (text.size() + 65 <= budget - 5) text += std::string(64, 'a') + "\n";
    text += std::string(budget - 5 - text.size(), 'a') + "\nwe" + contraction + " fine";
    ASSERT_EQ(text.substr(budget - 2, 2), contraction.substr(0, 2));
    const StatusOr<Encoding> whole = t->Encode(text, static_cast<int64_t>(text.size()) + 2, false);
    const StatusOr<Encoding> bounded = t->Encode(text, kMaxTokens, true);
    ASSERT_TRUE(whole.ok() && bounded.ok());
    ASSERT_LE(whole->ids.size(), static_cast<size_t>(kMaxTokens));
    EXPECT_EQ(bounded->ids, whole->ids);
    EXPECT_EQ(bounded->pieces, whole->pieces);
  }
}

TEST(ByteBpeTest, AddPrefixSpaceUnlessTheTextStartsWithOne) {
  ByteBpeOptions options;
  options.add_prefix_space = true;
  const auto t = Tiny(options);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Pieces(*t, "the"), (Strings{" the"}));
  EXPECT_EQ(Pieces(*t, " the"), (Strings{" the"}));
  const StatusOr<Encoding> enc = t->Encode("the", kNoLimit, false);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(enc->bytes_read, 3);
}

TEST(ByteBpeTest, DamagedFilesGiveErrorsThatSayWhat) {
  const testing::TinyByteBpe tiny = testing::MakeTinyByteBpe(ByteLevelSpelling);
  const auto error = [](std::string_view vocab, std::string_view merges) {
    const auto t = CreateByteBpeTokenizerFromData(vocab, merges, {}, "tiny");
    return t.ok() ? std::string("loaded") : t.status().message();
  };
  EXPECT_NE(error("{not json", tiny.merges).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error("[1, 2]", tiny.merges).find("object of token -> id"), std::string::npos);
  EXPECT_NE(error(R"({"<s>": -1})", "").find("not an integer"), std::string::npos);
  EXPECT_NE(error(R"({"<s>": "0"})", "").find("not an integer"), std::string::npos);
  EXPECT_NE(error(R"({"<s>": 0, "</s>": 2, "<pad>": 1})", "").find("no <unk>"), std::string::npos);
  const std::string next_line =
      "line " + std::to_string(std::count(tiny.merges.begin(), tiny.merges.end(), '\n') + 1);
  EXPECT_NE(error(tiny.vocab_json, tiny.merges + "a b c\n").find(next_line), std::string::npos);
  EXPECT_NE(error(tiny.vocab_json, "#version: 0.2\nab\n").find("line 2"), std::string::npos);
  EXPECT_NE(error(tiny.vocab_json, " a\n").find("line 1"), std::string::npos);
  EXPECT_NE(error(tiny.vocab_json, "a \n").find("line 1"), std::string::npos);
  EXPECT_NE(error(tiny.vocab_json, "\xff \xfe\n").find("not UTF-8"), std::string::npos);
  // Merges of tokens the vocabulary lacks ("b" + "c" makes "bc").
  EXPECT_NE(error(tiny.vocab_json, "b c\n").find("line 1 names \"bc\""), std::string::npos);
  // A byte without a token, and two tokens with one id.
  std::string no_byte = tiny.vocab_json;
  no_byte.replace(no_byte.find("\"a\":"), 3, "\"A0\"");
  EXPECT_NE(error(no_byte, "").find("no token for the byte 97"), std::string::npos);
  EXPECT_NE(error(tiny.vocab_json.substr(0, tiny.vocab_json.size() - 1) + ",\"zz\":5}", "")
                .find("the same id 5"),
            std::string::npos);
  // Windows line ends, blank lines, a BOM and no "#version" line are fine.
  EXPECT_EQ(error(tiny.vocab_json, "\xef\xbb\xbfh e\r\n\r\ni n\n"), "loaded");

  const auto missing = CreateByteBpeTokenizer("/nonexistent/vocab.json", "/nonexistent/m.txt", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/vocab.json"), std::string::npos);
}

TEST(ByteBpeTest, ReadsTheFilesOfAFolder) {
  const testing::TinyByteBpe tiny = testing::MakeTinyByteBpe(ByteLevelSpelling);
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "byte_bpe_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "vocab.json", std::ios::binary) << tiny.vocab_json;
  std::ofstream(dir / "merges.txt", std::ios::binary) << tiny.merges;
  const auto t =
      CreateByteBpeTokenizer((dir / "vocab.json").string(), (dir / "merges.txt").string(), {});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(Pieces(**t, "the thing"), (Strings{"t", "he", " t", "h", "ing"}));
}

// The GPT-2 id of `bytes`' token in the tiny model.
int32_t Gpt2Id(const testing::TinyByteBpe& tiny, const std::string& bytes) {
  const auto it = std::find(tiny.tokens.begin(), tiny.tokens.end(), ByteLevelSpelling(bytes));
  EXPECT_NE(it, tiny.tokens.end()) << bytes;
  return static_cast<int32_t>(it - tiny.tokens.begin());
}

// fairseq's dict.txt numbers the tokens: line i's GPT-2 id gets 4 + i.
TEST(ByteBpeTest, FairseqDictionaryNumbersTheTokens) {
  const testing::TinyByteBpe tiny = testing::MakeTinyByteBpe(ByteLevelSpelling);
  ByteBpeOptions options;
  const auto line = [&](const std::string& bytes, int count) {
    return std::to_string(Gpt2Id(tiny, bytes)) + " " + std::to_string(count) + "\n";
  };
  // " t" 4, "he" 5, a made-up word 6, "t" 7, "ing" 8; "h" is not there.
  options.fairseq_dict =
      line(" t", 100) + line("he", 90) + "madeupword0000 0\n" + line("t", 80) + line("ing", 70);
  auto t = CreateByteBpeTokenizerFromData(tiny.gpt2_vocab_json, tiny.merges, options, "tiny");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const StatusOr<Encoding> enc = (*t)->Encode("the thing", kNoLimit, false);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(enc->ids, (std::vector<int32_t>{0, 7, 5, 4, 3, 8, 2}));
  EXPECT_EQ((*t)->special_tokens().bos, 0);
  EXPECT_EQ((*t)->special_tokens().pad, 1);
  EXPECT_EQ((*t)->special_tokens().eos, 2);
  EXPECT_EQ((*t)->special_tokens().unk, 3);
  EXPECT_EQ((*t)->vocab_size(), 9);
  EXPECT_NE((*t)->Describe().find("fairseq dictionary of 5 symbols"), std::string::npos)
      << (*t)->Describe();
  // "0260" is not "260": it takes the id 4 but "t" still maps to 5.
  options.fairseq_dict = "0" + line("t", 1) + line("t", 1);
  t = CreateByteBpeTokenizerFromData(tiny.gpt2_vocab_json, tiny.merges, options, "tiny");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const StatusOr<Encoding> zero = (*t)->Encode("t", kNoLimit, false);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->ids, (std::vector<int32_t>{0, 5, 2}));

  const auto error = [&](const std::string& dict) {
    ByteBpeOptions o;
    o.fairseq_dict = dict;
    const auto bad = CreateByteBpeTokenizerFromData(tiny.gpt2_vocab_json, tiny.merges, o, "tiny");
    return bad.ok() ? std::string("loaded") : bad.status().message();
  };
  EXPECT_NE(error("260\n").find("line 1 is not"), std::string::npos);
  EXPECT_NE(error("260 1\n261 x\n").find("line 2 is not"), std::string::npos);
  EXPECT_NE(error("260 1\n260 1\n").find("line 2 repeats the symbol 260 of line 1"),
            std::string::npos);
  EXPECT_NE(error("260 1\nx 1\nx 2\n").find("line 3 repeats the symbol x"), std::string::npos);
  EXPECT_NE(error("260 1\n<s> 1\n").find("one of fairseq's specials"), std::string::npos);
  EXPECT_NE(error("260 1 #fairseq:overwrite\n").find("#fairseq:overwrite, not supported"),
            std::string::npos);
  EXPECT_NE(error("99999 1\n").find("past the vocabulary's"), std::string::npos);
  EXPECT_NE(error("madeupword0000 0\n").find("names no GPT-2 token"), std::string::npos);
  // As fairseq reads them: a BOM, CRLF, trailing blanks, signed counts; "0260"
  // is not str(260), so it takes an id but names no token.
  EXPECT_EQ(error("\xef\xbb\xbf"
                  "260 1 \r\n261 -2\t\r\n0260 +3\n"),
            "loaded");
  // The BOM dropped, line 1 names 260 (so repeating it is caught).
  EXPECT_NE(error("\xef\xbb\xbf"
                  "260 1\n260 1\n")
                .find("repeats the symbol 260 of line 1"),
            std::string::npos);
  // Without the dictionary, GPT-2's vocabulary has no <s>.
  EXPECT_NE(error("").find("no <s> token"), std::string::npos);
}

// A BOM before the first merge does not hide it, and a repeated pair takes
// its last rank (GPT-2's dict): here "in" after "ng" has lost, so "ing"
// is "i" + "ng".
TEST(ByteBpeTest, MergeFileDetails) {
  const testing::TinyByteBpe tiny = testing::MakeTinyByteBpe(ByteLevelSpelling);
  std::string vocab = tiny.vocab_json;
  vocab.insert(vocab.size() - 1, ",\"ng\":9000");
  auto t = CreateByteBpeTokenizerFromData(vocab, "\xef\xbb\xbfi n\nn g\ni n\n", {}, "tiny");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(Pieces(**t, "ing"), (Strings{"i", "ng"}));
  t = CreateByteBpeTokenizerFromData(vocab, "\xef\xbb\xbfi n\nn g\n", {}, "tiny");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(Pieces(**t, "ing"), (Strings{"in", "g"}));
}

}  // namespace
}  // namespace encoderd
