// UnigramModel against the tokenizers library's Unigram rules, on small
// vocabularies whose answers can be worked out by hand. (The fixtures' XLM-R
// files check it against the Python reference of the library on drawn
// texts: hf_tokenizer_json_test.cc.)
#include "engine/text/unigram_model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace encoderd {
namespace {

std::shared_ptr<const UnigramModel> Model(std::vector<UnigramModel::Entry> vocab,
                                          int32_t unk_id = 0) {
  auto made = UnigramModel::Create(std::move(vocab), unk_id);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  return made.ok() ? *made : nullptr;
}

// The pieces of `word` as "text:id" strings.
std::vector<std::string> Split(const UnigramModel& model, const std::string& word) {
  std::vector<UnigramModel::Token> tokens;
  model.Encode(word, &tokens);
  std::vector<std::string> out;
  size_t at = 0;
  for (const UnigramModel::Token& t : tokens) {
    EXPECT_EQ(t.begin, at) << word;
    at = t.end;
    out.push_back(word.substr(t.begin, t.end - t.begin) + ":" + std::to_string(t.id));
  }
  EXPECT_EQ(at, word.size()) << word;
  return out;
}

using Pieces = std::vector<std::string>;

// The library's own example (its Unigram::encode documentation).
TEST(UnigramModel, BestPath) {
  auto m = Model({{"<unk>", 0},
                  {"a", 0},
                  {"b", 0},
                  {"c", 0},
                  {"d", 0},
                  {"cd", 1},
                  {"ab", 2},
                  {"abc", 5},
                  {"abcd", 10}});
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(Split(*m, "abcdacdxx"), (Pieces{"abcd:8", "a:1", "cd:5", "xx:0"}));
  EXPECT_TRUE(Split(*m, "").empty());
}

// Where two paths to a place score the same, the one found first is kept:
// the one whose last piece starts earlier. "000" as "0 00" (the last piece
// from 1) and "00 0" (from 2) score the same; the library gives "0 00".
TEST(UnigramModel, TiesKeepTheEarlierStart) {
  auto m = Model({{"<unk>", 0}, {"0", -1}, {"00", -2}});
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(Split(*m, "000"), (Pieces{"0:1", "00:2"}));
  EXPECT_EQ(Split(*m, "00000"), (Pieces{"0:1", "00:2", "00:2"}));
  // "hah": "ha" and "h a" tie at 2 ("ha", from 0, kept), then "h ah" (from
  // 1) and "ha h" (from 2) at 3.
  auto f = Model({{"<unk>", 0}, {"h", -3.1}, {"a", -7.3}, {"ha", -10.4}, {"ah", -10.4}});
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(Split(*f, "hah"), (Pieces{"h:1", "ah:4"}));
}

// A character no piece is alone is an <unk>, scored the lowest score less
// 10, and a run of them is one <unk>; a multi-character piece still wins
// where it scores higher.
TEST(UnigramModel, UnknownCharactersAreOneUnknownPerRun) {
  auto m = Model({{"a", -1}, {"<unk>", 0}, {"\xe2\x82\xac\xe2\x82\xac", -30}, {"b", -2}}, 1);
  ASSERT_NE(m, nullptr);
  // € alone: no piece; "€€" (-30) beats two <unk> (2 x (-30 - 10)).
  EXPECT_EQ(Split(*m,
                  "a\xe2\x82\xac\xf0\x9f\x98\x80x"
                  "b"),
            (Pieces{"a:0", "\xe2\x82\xac\xf0\x9f\x98\x80x:1", "b:3"}));
  EXPECT_EQ(Split(*m,
                  "\xe2\x82\xac\xe2\x82\xac"
                  "a"),
            (Pieces{"\xe2\x82\xac\xe2\x82\xac:2", "a:0"}));
}

// A run of <unk> pieces that outscores the piece of the same text (scores
// no real vocabulary has) still gets that piece's id, as the library looks
// each piece's text up.
TEST(UnigramModel, AnUnknownRunWhoseTextIsAPieceHasItsId) {
  const std::string snowmen = "\xe2\x98\x83\xe2\x98\x83";
  auto m = Model({{"<unk>", 50}, {"a", 50}, {snowmen, 50}});
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(Split(*m, snowmen), (Pieces{snowmen + ":2"}));
  EXPECT_EQ(Split(*m, snowmen + "\xe2\x98\x83"), (Pieces{snowmen + "\xe2\x98\x83:0"}));
}

// Every entry is a piece, a special's too; a piece given twice is its last
// entry.
TEST(UnigramModel, EveryEntryIsAPieceTheLastOfATextKept) {
  auto m = Model({{"<s>", 0}, {"<unk>", 0}, {"<", -5}, {"s", -5}, {">", -5}, {"s", -1}}, 1);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(Split(*m, "<s>"), (Pieces{"<s>:0"}));
  EXPECT_EQ(Split(*m, "<ss"), (Pieces{"<:2", "s:5", "s:5"}));
}

TEST(UnigramModel, RefusesWhatTheLibraryRefuses) {
  EXPECT_FALSE(UnigramModel::Create({}, 0).ok());
  EXPECT_FALSE(UnigramModel::Create({{"a", 0}}, 1).ok());
  EXPECT_FALSE(UnigramModel::Create({{"a", 0}}, -1).ok());
  EXPECT_FALSE(UnigramModel::Create({{"a", 0}, {"", 0}}, 0).ok());
  EXPECT_FALSE(UnigramModel::Create({{"a", 0}, {"\xff", 0}}, 0).ok());
}

}  // namespace
}  // namespace encoderd
