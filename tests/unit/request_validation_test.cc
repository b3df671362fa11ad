// Request validation (server/request_validation.h): every hostile field gets
// INVALID_ARGUMENT naming it, and a 1 MB single word tokenizes in bounded time
// with the real tokenizers (the default model's SentencePiece, WordPiece).
#include "server/request_validation.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "engine/text/sentencepiece_tokenizer.h"
#include "engine/text/wordpiece_tokenizer.h"
#include "tests/unit/tokenizer_tiny_models.h"

namespace encoderd::server {
namespace {

const RequestLimits kLimits{/*max_client_batch_size=*/4, /*max_tokens=*/16, /*vocab_size=*/100};

void ExpectInvalid(const Status& status, const std::string& part) {
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find(part), std::string::npos)
      << "'" << status.message() << "' lacks '" << part << "'";
}

std::unique_ptr<Tokenizer> LangidTokenizer() {
  auto t = CreateSentencePieceTokenizer(
      ENCODERD_SOURCE_DIR "/models/langid/sentencepiece.bpe.model", SentencePieceOptions{});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(RequestValidationTest, TextCount) {
  ExpectInvalid(CheckTexts({}, kLimits), "the request has no texts");
  ExpectInvalid(CheckTexts({"a", "b", "c", "d", "e"}, kLimits),
                "5 texts; the limit is 4 (max_client_batch_size)");
  EXPECT_TRUE(CheckTexts({"a", "b", "c", "d"}, kLimits).ok());
}

TEST(RequestValidationTest, BadTextsNameTheirIndex) {
  ExpectInvalid(CheckTexts({"ok", ""}, kLimits), "texts[1] is empty");
  ExpectInvalid(CheckTexts({"ok", std::string("ab\0cd", 5)}, kLimits),
                "texts[1] contains a NUL byte (at byte 2)");
  ExpectInvalid(CheckTexts({"\xff\xfe"
                            "A"},
                           kLimits),
                "texts[0]: text is not valid UTF-8");
  // Truncated multi-byte sequence, overlong encoding, UTF-16 surrogate.
  for (const char* bad : {"abc\xe4\xb8", "\xc0\xaf", "\xed\xa0\x80"})
    ExpectInvalid(CheckText(bad, 3), "texts[3]: text is not valid UTF-8");
  EXPECT_TRUE(CheckTexts({"Grüße", "日本語", "emoji \xf0\x9f\x98\x80"}, kLimits).ok());
}

TEST(RequestValidationTest, TokenIds) {
  ExpectInvalid(CheckTokenIds({}, kLimits), "the request has no token_ids");
  ExpectInvalid(CheckTokenIds(std::vector<std::vector<int32_t>>(5, {0, 2}), kLimits),
                "5 token_ids; the limit is 4");
  ExpectInvalid(CheckTokenIds({{0, 2}, {}}, kLimits), "token_ids[1] is empty");
  ExpectInvalid(CheckTokenIds({std::vector<int32_t>(17, 5)}, kLimits),
                "token_ids[0] has 17 tokens; the limit is 16");
  ExpectInvalid(CheckTokenIds({{0, -1, 2}}, kLimits),
                "token id -1 (position 1) is outside the vocabulary [0, 100)");
  ExpectInvalid(CheckTokenIds({{0, 100}}, kLimits), "token id 100 (position 1)");
  ExpectInvalid(CheckTokenIds({{INT32_MIN}}, kLimits), "token id -2147483648");
  ExpectInvalid(CheckTokenIds({{INT32_MAX}}, kLimits), "token id 2147483647");
  EXPECT_TRUE(CheckTokenIds({{0, 99, 2}, std::vector<int32_t>(16, 7)}, kLimits).ok());
}

TEST(RequestValidationTest, EncodeInputsAndPooling) {
  ExpectInvalid(CheckEncodeInputs(1, 1), "either texts or token_ids, not both");
  ExpectInvalid(CheckEncodeInputs(0, 0), "neither texts nor token_ids");
  EXPECT_TRUE(CheckEncodeInputs(2, 0).ok());
  EXPECT_TRUE(CheckEncodeInputs(0, 2).ok());
  for (int32_t p : {-1, 3, 99, INT32_MAX, INT32_MIN}) ExpectInvalid(CheckPooling(p), "pooling ");
  ExpectInvalid(CheckPooling(99), "pooling 99 is not one of POOLING_DEFAULT (0)");
  for (int32_t p : {0, 1, 2}) EXPECT_TRUE(CheckPooling(p).ok());
}

TEST(RequestValidationTest, TokenizeTextsEnforcesMaxTokens) {
  auto tokenizer = LangidTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  const std::string long_text = "the quick brown fox jumps over the lazy dog again and again";
  auto refused = TokenizeTexts(*tokenizer, {"short", long_text}, kLimits, /*truncate=*/false);
  ExpectInvalid(refused.status(), "texts[1]: input is ");
  ExpectInvalid(refused.status(), "more than the limit of 16 tokens");
  auto cut = TokenizeTexts(*tokenizer, {"short", long_text}, kLimits, /*truncate=*/true);
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  ASSERT_EQ(cut->size(), 2u);
  EXPECT_EQ((*cut)[1].ids.size(), 16u);
  EXPECT_GT((*cut)[1].untruncated_length, 16);
  // The checks run before any tokenization.
  ExpectInvalid(TokenizeTexts(*tokenizer, {"ok", ""}, kLimits, true).status(), "texts[1] is empty");
}

// Process CPU seconds (not wall time: the test machine may be busy) to
// tokenize `word` once.
double CpuSecondsToTokenize(const Tokenizer& t, const std::string& word, bool truncate,
                            StatusOr<std::vector<Encoding>>* out) {
  const RequestLimits limits{1, 128, 1 << 20};
  const std::clock_t start = std::clock();
  *out = TokenizeTexts(t, {word}, limits, truncate);
  return static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
}

// A 1 MB "word" (no spaces) from a hostile client: both tokenizers answer in
// linear time (4x the input costs < 10x the CPU; a quadratic algorithm costs
// 16x, and ~1e12 steps at 1 MB) and the length limit applies afterwards.
TEST(RequestValidationTest, OneMegabyteWordIsCheap) {
  auto spm = LangidTokenizer();
  ASSERT_NE(spm, nullptr);
  auto wordpiece =
      CreateWordPieceTokenizerFromTokens(testing::TinyWordPieceVocab(), WordPieceOptions{});
  ASSERT_TRUE(wordpiece.ok()) << wordpiece.status().ToString();
  std::string mixed;  // letters of several scripts, no separator
  while (mixed.size() < (1u << 20))
    mixed += "abcxyz\xc3\xa4\xc3\xb6\xc3\xbc\xe6\x97\xa5\xe6\x9c\xac";
  for (const std::string& word : {std::string(1u << 20, 'a'), mixed}) {
    const std::string quarter =
        word.substr(0, word.size() / 4 - word.size() / 4 % 18);  // whole characters
    for (const Tokenizer* t : {spm.get(), wordpiece->get()}) {
      for (bool truncate : {false, true}) {
        StatusOr<std::vector<Encoding>> enc = std::vector<Encoding>{};
        StatusOr<std::vector<Encoding>> small = std::vector<Encoding>{};
        const double seconds = CpuSecondsToTokenize(*t, word, truncate, &enc);
        const double quarter_seconds = CpuSecondsToTokenize(*t, quarter, truncate, &small);
        std::printf("1 MB word (%s) %s truncate=%d: %.3f s CPU (256 KB: %.3f s), %s\n",
                    word[1] == 'a' ? "'a' x 2^20" : "mixed scripts", t->Describe().c_str(),
                    truncate, seconds, quarter_seconds,
                    enc.ok() ? "accepted" : enc.status().message().c_str());
        EXPECT_LT(seconds, 5.0);
        EXPECT_LT(seconds, 10 * quarter_seconds + 0.05);
        if (enc.ok()) {
          EXPECT_LE((*enc)[0].ids.size(), 128u);
        } else {
          EXPECT_FALSE(truncate);
          ExpectInvalid(enc.status(), "more than the limit of 128 tokens");
        }
      }
    }
  }
}

}  // namespace
}  // namespace encoderd::server
