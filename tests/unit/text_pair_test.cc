// Text pairs (engine/text/text_pair.h): the BERT and RoBERTa templates, token
// types, Hugging Face's longest_first truncation, the refusal without
// truncation, bounded reading of a huge text, and the request-level checks
// (server/core/request_validation.h) that name text_pairs[i] and query.
#include "engine/text/text_pair.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/text/sentencepiece_tokenizer.h"
#include "engine/text/wordpiece_tokenizer.h"
#include "server/core/request_validation.h"
#include "tests/unit/tokenizer_tiny_models.h"

namespace encoderd {
namespace {

using Pieces = std::vector<std::string>;

std::unique_ptr<Tokenizer> TinyWordPiece() {
  auto t = CreateWordPieceTokenizerFromTokens(testing::TinyWordPieceVocab(), WordPieceOptions{});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::unique_ptr<Tokenizer> TinySentencePiece() {
  auto t = CreateSentencePieceTokenizerFromProto(testing::TinySentencePieceModel(),
                                                 SentencePieceOptions{});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

// The content pieces of a single-text encoding (its specials dropped).
Pieces Content(const Tokenizer& t, const std::string& text) {
  auto e = t.Encode(text, 1 << 20, /*truncate=*/false);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return Pieces(e->pieces.begin() + 1, e->pieces.end() - 1);
}

Pieces Concat(std::initializer_list<Pieces> parts) {
  Pieces out;
  for (const Pieces& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Hugging Face tokenizers' truncate_encodings, LongestFirst, step by step as
// the Rust source reads (the cases worked out by hand, not by the formula).
TEST(TextPairTest, LongestFirstLengthsFollowHuggingFace) {
  struct Case {
    int64_t n1, n2, budget, keep1, keep2;
  };
  const Case cases[] = {
      {3, 4, 10, 3, 4},     // fits: nothing cut
      {3, 20, 10, 3, 7},    // only the longer text is cut
      {20, 3, 10, 7, 3},    // the same with the longer text first
      {6, 7, 10, 5, 5},     // both cut to half
      {10, 10, 9, 4, 5},    // odd budget, a tie: the second text gets the odd token
      {12, 30, 9, 4, 5},    // odd budget: the longer (second) gets it
      {30, 12, 9, 5, 4},    // ... or the longer first
      {5, 5, 10, 5, 5},     // exactly full
      {1, 100, 4, 1, 3},    // a one-token text survives whole
      {100, 100, 2, 1, 1},  // the smallest budget a pair may have
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.n1) + "+" + std::to_string(c.n2) + " in " +
                 std::to_string(c.budget));
    const auto [keep1, keep2] = LongestFirstLengths(c.n1, c.n2, c.budget);
    EXPECT_EQ(keep1, c.keep1);
    EXPECT_EQ(keep2, c.keep2);
  }
  for (int64_t n1 = 1; n1 < 20; ++n1) {
    for (int64_t n2 = 1; n2 < 20; ++n2) {
      for (int64_t budget = 2; budget < 24; ++budget) {
        const auto [keep1, keep2] = LongestFirstLengths(n1, n2, budget);
        EXPECT_LE(keep1 + keep2, budget);
        EXPECT_EQ(keep1 + keep2, std::min(n1 + n2, budget));
        EXPECT_TRUE(keep1 >= 1 && keep1 <= n1 && keep2 >= 1 && keep2 <= n2);
      }
    }
  }
}

TEST(TextPairTest, BertTemplateAndTokenTypes) {
  auto t = TinyWordPiece();
  ASSERT_NE(t, nullptr);
  auto pair = EncodePair(*t, PairTemplate::kBert, "the quick fox", "unable!", 64, false);
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  const Pieces a = Content(*t, "the quick fox"), b = Content(*t, "unable!");
  EXPECT_EQ(pair->pieces, Concat({{"[CLS]"}, a, {"[SEP]"}, b, {"[SEP]"}}));
  std::vector<int32_t> types(a.size() + 2, 0);
  types.insert(types.end(), b.size() + 1, 1);
  EXPECT_EQ(pair->token_types, types);
  EXPECT_EQ(pair->ids.size(), pair->pieces.size());
  EXPECT_EQ(pair->ids.front(), t->special_tokens().bos);
  EXPECT_EQ(pair->ids.back(), t->special_tokens().eos);
  EXPECT_FALSE(pair->truncated());
}

TEST(TextPairTest, RobertaTemplateHasTwoSeparatorsAndNoTypes) {
  auto t = TinySentencePiece();
  ASSERT_NE(t, nullptr);
  auto pair = EncodePair(*t, PairTemplate::kRoberta, "the thing", "a tern", 64, false);
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  const Pieces a = Content(*t, "the thing"), b = Content(*t, "a tern");
  EXPECT_EQ(pair->pieces, Concat({{"<s>"}, a, {"</s>", "</s>"}, b, {"</s>"}}));
  EXPECT_EQ(pair->token_types, std::vector<int32_t>(pair->ids.size(), 0));
}

TEST(TextPairTest, TruncatesLongestFirstAndKeepsTheSpecials) {
  auto t = TinyWordPiece();
  ASSERT_NE(t, nullptr);
  const std::string long_text = "the quick fox the quick fox the quick fox the quick fox";
  const Pieces a = Content(*t, long_text), b = Content(*t, "fox");
  ASSERT_EQ(a.size(), 12u);
  // 12 + 1 content tokens, 8 fit in max_tokens 11: the short text stays whole.
  auto cut = EncodePair(*t, PairTemplate::kBert, long_text, "fox", 11, true);
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  EXPECT_EQ(cut->pieces,
            Concat({{"[CLS]"}, Pieces(a.begin(), a.begin() + 7), {"[SEP]"}, b, {"[SEP]"}}));
  EXPECT_EQ(cut->untruncated_length, 16);
  EXPECT_TRUE(cut->truncated());
  EXPECT_EQ(cut->token_types.size(), 11u);
  // Both long: each keeps half of the 8-token budget.
  auto both = EncodePair(*t, PairTemplate::kBert, long_text, long_text, 11, true);
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  const Pieces half(a.begin(), a.begin() + 4);
  EXPECT_EQ(both->pieces, Concat({{"[CLS]"}, half, {"[SEP]"}, half, {"[SEP]"}}));

  auto refused = EncodePair(*t, PairTemplate::kBert, long_text, "fox", 11, false);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("text pair is 16 tokens long, more than the limit "
                                            "of 11 tokens"),
            std::string::npos)
      << refused.status().message();

  // Both over an odd budget, both read whole: the longer (first, 12
  // tokens) gets the odd token, as Hugging Face gives it.
  const Pieces c = Content(*t, "the quick fox the quick fox the quick fox fox");
  ASSERT_EQ(c.size(), 10u);
  auto odd = EncodePair(*t, PairTemplate::kBert, long_text,
                        "the quick fox the quick fox the quick fox fox", 10, true);
  ASSERT_TRUE(odd.ok()) << odd.status().ToString();
  EXPECT_EQ(odd->pieces, Concat({{"[CLS]"},
                                 Pieces(a.begin(), a.begin() + 4),
                                 {"[SEP]"},
                                 Pieces(c.begin(), c.begin() + 3),
                                 {"[SEP]"}}));

  auto tiny = EncodePair(*t, PairTemplate::kRoberta, "the", "fox", 5, true);
  EXPECT_EQ(tiny.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tiny.status().message().find("at least 6"), std::string::npos)
      << tiny.status().message();
}

// A 4 MiB first text costs what max_tokens can use, as a single text does.
TEST(TextPairTest, HugeTextIsReadAsFarAsTheLimitNeeds) {
  std::pair<std::unique_ptr<Tokenizer>, PairTemplate> cases[] = {
      {TinyWordPiece(), PairTemplate::kBert}, {TinySentencePiece(), PairTemplate::kRoberta}};
  for (const auto& [t, form] : cases) {
    ASSERT_NE(t, nullptr);
    SCOPED_TRACE(t->Describe());
    std::string huge;
    while (huge.size() < (4u << 20)) huge += "the quick fox ";
    auto cut = EncodePair(*t, form, huge, "fox", 128, true);
    ASSERT_TRUE(cut.ok()) << cut.status().ToString();
    EXPECT_EQ(cut->ids.size(), 128u);
    EXPECT_LT(cut->bytes_read, 64 * 1024);
    auto refused = EncodePair(*t, form, "fox", huge, 128, false);
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("at least"), std::string::npos)
        << refused.status().message();
  }
}

// Rerank joins one encoding of the query to every text: the same pairs as
// encoding each pair whole, and errors name the query or the text.
TEST(TextPairTest, QueryPairsEqualWholePairs) {
  auto t = TinyWordPiece();
  ASSERT_NE(t, nullptr);
  const server::RequestLimits limits{4, 16, 100};
  const std::vector<std::string> texts = {"fox", "the quick fox the quick fox the quick fox"};
  const auto joined =
      server::TokenizeQueryPairs(*t, PairTemplate::kBert, "the fox", texts, limits, true);
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto whole = EncodePair(*t, PairTemplate::kBert, "the fox", texts[i], 16, true);
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    EXPECT_EQ((*joined)[i].ids, whole->ids);
    EXPECT_EQ((*joined)[i].token_types, whole->token_types);
    EXPECT_EQ((*joined)[i].untruncated_length, whole->untruncated_length);
  }
  EXPECT_EQ(server::TokenizeQueryPairs(*t, PairTemplate::kBert, "", texts, limits, true)
                .status()
                .message(),
            "query is empty");
  EXPECT_NE(server::TokenizeQueryPairs(*t, PairTemplate::kBert, "q", {"a", ""}, limits, true)
                .status()
                .message()
                .find("texts[1] is empty"),
            std::string::npos);
  // 2 + 12 + 3 tokens: over 16.
  const auto strict = server::TokenizeQueryPairs(
      *t, PairTemplate::kBert, "the fox",
      {"fox", "the quick fox the quick fox the quick fox the quick fox"}, limits, false);
  EXPECT_NE(strict.status().message().find("texts[1]: text pair is"), std::string::npos)
      << strict.status().message();
  const auto many = server::TokenizeQueryPairs(*t, PairTemplate::kBert, "q",
                                               std::vector<std::string>(5, "a"), limits, true);
  EXPECT_NE(many.status().message().find("max_client_batch_size"), std::string::npos)
      << many.status().message();
}

TEST(TextPairTest, RequestChecksNameTheField) {
  auto t = TinyWordPiece();
  ASSERT_NE(t, nullptr);
  const server::RequestLimits limits{4, 16, 100};
  const auto count =
      server::TokenizeTextPairs(*t, PairTemplate::kBert, {"the", "fox"}, {"fox"}, limits, true);
  EXPECT_EQ(count.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(count.status().message().find("1 text_pairs for 2 texts"), std::string::npos)
      << count.status().message();
  const auto empty =
      server::TokenizeTextPairs(*t, PairTemplate::kBert, {"the", "fox"}, {"fox", ""}, limits, true);
  EXPECT_NE(empty.status().message().find("text_pairs[1] is empty"), std::string::npos)
      << empty.status().message();
  const auto bad =
      server::TokenizeTextPairs(*t, PairTemplate::kBert, {"the"}, {"a\xff"}, limits, true);
  EXPECT_NE(bad.status().message().find("text_pairs[0]"), std::string::npos)
      << bad.status().message();
  const std::string long_text = "the quick fox the quick fox the quick fox";
  const auto strict = server::TokenizeTextPairs(*t, PairTemplate::kBert, {"fox", long_text},
                                                {"fox", long_text}, limits, false);
  EXPECT_NE(strict.status().message().find("texts[1]: text pair is"), std::string::npos)
      << strict.status().message();
  const auto ok = server::TokenizeTextPairs(*t, PairTemplate::kBert, {"fox", long_text},
                                            {"fox", long_text}, limits, true);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)[1].ids.size(), 16u);
  EXPECT_EQ(server::CheckQuery("").message(), "query is empty");
  EXPECT_TRUE(server::CheckQuery("the fox").ok());
}

}  // namespace
}  // namespace encoderd
