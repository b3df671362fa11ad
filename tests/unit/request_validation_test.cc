// Request validation (server/core/request_validation.h): every hostile field gets
// INVALID_ARGUMENT naming it, and a 1 MiB single word costs a bounded prefix
// with the real tokenizers (the default model's SentencePiece, WordPiece).
#include "server/core/request_validation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <map>
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

// A model that masks pad keys (fairseq's and torchtext's RoBERTa): a
// sequence of pad tokens alone has nothing to attend to (their softmax gives
// NaN); where the device cannot mask them (CUDA), no pad token is taken.
TEST(RequestValidationTest, PadTokensOfAModelThatMasksThem) {
  RequestLimits masks = kLimits;
  masks.masked_pad_id = 1;
  EXPECT_TRUE(CheckTokenIds({{0, 1, 1, 5, 2, 1, 1}, {1, 0}, {0}}, masks).ok());
  ExpectInvalid(CheckTokenIds({{0, 2}, {1, 1, 1}}, masks),
                "token_ids[1] holds the pad token (id 1) alone, which this model masks as a key");
  ExpectInvalid(CheckTokenIds({{1}}, masks), "token_ids[0] holds the pad token (id 1) alone");
  EXPECT_TRUE(CheckTokenIds({{1, 1}}, kLimits).ok());  // attended to where not masked
  RequestLimits unmasked = masks;
  unmasked.pad_keys_unmasked = true;
  EXPECT_TRUE(CheckTokenIds({{0, 5, 2}}, unmasked).ok());
  ExpectInvalid(CheckTokenIds({{0, 5, 2}, {0, 5, 2, 1}}, unmasked),
                "token_ids[1]: position 3 is the pad token (id 1), which this model masks as a "
                "key, and its device does not; send sequences unpadded");
  ExpectInvalid(CheckPadKeys({0, 1, 2}, unmasked, "texts", 2), "texts[2]: position 1");
}

TEST(RequestValidationTest, EncodeInputsAndPooling) {
  ExpectInvalid(CheckEncodeInputs(1, 1), "either texts or token_ids, not both");
  ExpectInvalid(CheckEncodeInputs(0, 0), "neither texts nor token_ids");
  EXPECT_TRUE(CheckEncodeInputs(2, 0).ok());
  EXPECT_TRUE(CheckEncodeInputs(0, 2).ok());
  for (int32_t p : {-1, 7, 99, INT32_MAX, INT32_MIN})
    ExpectInvalid(CheckPooling(p).status(), "pooling ");
  ExpectInvalid(CheckPooling(99).status(), "pooling 99 is not one of POOLING_DEFAULT (0)");
  EXPECT_EQ(CheckPooling(0).value(), std::nullopt);
  // encoderd.proto's values 1..6, in kAllPoolings' order.
  const std::pair<int32_t, Pooling> wire[] = {
      {1, Pooling::kCls},         {2, Pooling::kMean},         {3, Pooling::kMax},
      {4, Pooling::kMeanSqrtLen}, {5, Pooling::kWeightedMean}, {6, Pooling::kLastToken}};
  for (const auto& [value, pooling] : wire) EXPECT_EQ(CheckPooling(value).value(), pooling);
}

// Matryoshka truncation (EmbedRequest.dimensions): 0 keeps the model's
// default (all, or its truncate_dim), 1 to the embedding's width that many,
// anything else names the sizes.
TEST(RequestValidationTest, DimensionsKeepAPrefixOfTheEmbedding) {
  EXPECT_EQ(KeptDimensions(0, 768, 768, "m").value(), 768);
  EXPECT_EQ(KeptDimensions(0, 256, 768, "m").value(), 256);  // a folder's truncate_dim
  EXPECT_EQ(KeptDimensions(1, 768, 768, "m").value(), 1);
  EXPECT_EQ(KeptDimensions(768, 256, 768, "m").value(), 768);  // past truncate_dim
  for (int32_t d : {-1, 769, INT32_MAX, INT32_MIN})
    ExpectInvalid(KeptDimensions(d, 256, 768, "m").status(),
                  "dimensions " + std::to_string(d) +
                      " is not 0 (the default: 256) or 1 to 768 (the max_dimensions of model "
                      "'m')");
  // A long model name is cut in the message (QuotedForStatus).
  EXPECT_LT(KeptDimensions(-1, 8, 8, std::string(100000, 'x')).status().message().size(), 300u);

  const std::vector<float> e = {0.6f, 0.0f, 0.8f, 0.0f};  // unit length
  EXPECT_EQ(KeptValues(e.data(), 4, 4, /*normalize=*/true), e);
  EXPECT_EQ(KeptValues(e.data(), 4, 4, /*normalize=*/false), e);
  EXPECT_EQ(KeptValues(e.data(), 4, 2, /*normalize=*/false), std::vector<float>({0.6f, 0.0f}));
  // Cut and normalized: unit length again, as normalize(e[:2]).
  EXPECT_EQ(KeptValues(e.data(), 4, 2, /*normalize=*/true), std::vector<float>({1.0f, 0.0f}));
  const std::vector<float> v = {3.0f, -4.0f, 12.0f};
  const std::vector<float> cut = KeptValues(v.data(), 3, 2, /*normalize=*/true);
  ASSERT_EQ(cut.size(), 2u);
  EXPECT_FLOAT_EQ(cut[0], 0.6f);
  EXPECT_FLOAT_EQ(cut[1], -0.8f);
  // A zero prefix stays zero (the norm is clamped, as a whole embedding's).
  const std::vector<float> z = {0.0f, 0.0f, 1.0f};
  EXPECT_EQ(KeptValues(z.data(), 3, 2, /*normalize=*/true), std::vector<float>({0.0f, 0.0f}));
}

// Nothing bounded an Encode reply: 256 x 512 token ids (a 300 KB request)
// made a BERT-base reply of 400 MB, held about three times over until sent.
TEST(RequestValidationTest, EncodeRepliesFitTheSendLimit) {
  constexpr int64_t kLimit = 64 << 20;
  // (64 MiB - 64 KiB - 16 x 16) / (768 x 4) = 21,823.9: 21,823 tokens in 16
  // sequences fit, and in one sequence too ((64 MiB - 64 KiB - 16) / 3072 =
  // 21,823.99).
  EXPECT_TRUE(CheckEncodeReplySize(21823, 16, 768, kLimit).ok());
  ExpectInvalid(CheckEncodeReplySize(21824, 16, 768, kLimit),
                "the reply would hold the hidden states of 21824 tokens in 16 sequences (21824 x "
                "768 x 4 bytes and 65792 of framing), more than listen.max_send_message_bytes "
                "(67108864) allows");
  EXPECT_TRUE(CheckEncodeReplySize(21823, 1, 768, kLimit).ok());
  ExpectInvalid(CheckEncodeReplySize(21824, 1, 768, kLimit), "21824 tokens in 1 sequences");
  // Each sequence's framing counts: 8,192 sequences take 128 KiB more.
  ExpectInvalid(CheckEncodeReplySize(21800, 8192, 768, kLimit), "21800 tokens");
  ExpectInvalid(CheckEncodeReplySize(256 * 512, 256, 768, kLimit), "131072 tokens");
  // Huge counts do not wrap.
  ExpectInvalid(CheckEncodeReplySize(INT64_MAX / 2, 1, 1 << 20, kLimit), "tokens");
  EXPECT_TRUE(CheckEncodeReplySize(0, 0, 768, 1 << 20).ok());
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

// A prompt goes in front of each text (a pair's first text, Rerank's query)
// once the texts as sent passed the checks, and the limit counts its tokens.
TEST(RequestValidationTest, ThePromptGoesInFrontOfEachText) {
  auto tokenizer = LangidTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  const std::string prompt = "query: ";
  auto got = TokenizeTexts(*tokenizer, {"the fox", "a dog"}, kLimits, true, prompt);
  auto want = TokenizeTexts(*tokenizer, {prompt + "the fox", prompt + "a dog"}, kLimits, true);
  ASSERT_TRUE(got.ok() && want.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ((*got)[i].ids, (*want)[i].ids) << i;
  auto alone = TokenizeTexts(*tokenizer, {"the fox"}, kLimits, true);
  ASSERT_TRUE(alone.ok());
  EXPECT_GT((*got)[0].ids.size(), (*alone)[0].ids.size());
  // An empty text is refused as sent, not as prompted.
  ExpectInvalid(TokenizeTexts(*tokenizer, {""}, kLimits, true, prompt).status(),
                "texts[0] is empty");
  // The prompt's tokens count toward max_tokens.
  const RequestLimits tight{4, static_cast<int64_t>((*alone)[0].ids.size()), 100};
  EXPECT_TRUE(TokenizeTexts(*tokenizer, {"the fox"}, tight, false).ok());
  ExpectInvalid(TokenizeTexts(*tokenizer, {"the fox"}, tight, false, prompt).status(),
                "more than the limit");
  // Pairs: in front of the first text; Rerank: in front of the query.
  auto pair = TokenizeTextPairs(*tokenizer, PairTemplate::kRoberta, {"the fox"}, {"a dog"}, kLimits,
                                true, prompt);
  auto pair_want = TokenizeTextPairs(*tokenizer, PairTemplate::kRoberta, {prompt + "the fox"},
                                     {"a dog"}, kLimits, true);
  ASSERT_TRUE(pair.ok() && pair_want.ok()) << pair.status().ToString();
  EXPECT_EQ((*pair)[0].ids, (*pair_want)[0].ids);
  auto rerank = TokenizeQueryPairs(*tokenizer, PairTemplate::kRoberta, "fox", {"a dog"}, kLimits,
                                   true, prompt);
  auto rerank_want = TokenizeQueryPairs(*tokenizer, PairTemplate::kRoberta, prompt + "fox",
                                        {"a dog"}, kLimits, true);
  ASSERT_TRUE(rerank.ok() && rerank_want.ok()) << rerank.status().ToString();
  EXPECT_EQ((*rerank)[0].ids, (*rerank_want)[0].ids);
  ExpectInvalid(
      TokenizeQueryPairs(*tokenizer, PairTemplate::kRoberta, "", {"a"}, kLimits, true, prompt)
          .status(),
      "query is empty");
}

// include_prompt = false leaves out the prompt's own encoding less its
// closing special token ([CLS] and the prompt's tokens), as
// sentence-transformers 5 counts it; nothing for an empty prompt.
TEST(RequestValidationTest, PromptPoolStartCountsThePromptsTokens) {
  auto tokenizer = LangidTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  auto alone = tokenizer->Encode("query: ", 16, true);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  ASSERT_GE(alone->ids.size(), 3u);
  EXPECT_EQ(alone->ids.back(), tokenizer->special_tokens().eos);
  auto start = PromptPoolStart(*tokenizer, "query: ", 16);
  ASSERT_TRUE(start.ok()) << start.status().ToString();
  EXPECT_EQ(*start, static_cast<int32_t>(alone->ids.size()) - 1);
  // The prompted text begins with those tokens.
  auto prompted = TokenizeTexts(*tokenizer, {"the fox"}, kLimits, true, "query: ");
  ASSERT_TRUE(prompted.ok());
  EXPECT_TRUE(std::equal(alone->ids.begin(), alone->ids.end() - 1, (*prompted)[0].ids.begin()));
  start = PromptPoolStart(*tokenizer, "", 16);
  ASSERT_TRUE(start.ok());
  EXPECT_EQ(*start, 0);
  // A prompt over max_tokens counts as its truncated encoding does.
  start = PromptPoolStart(*tokenizer, "the quick brown fox jumps over the lazy dog", 4);
  ASSERT_TRUE(start.ok());
  EXPECT_EQ(*start, 3);
}

// prompt_name: empty is the default prompt; a name among the prompts is
// that prompt (an empty one included); any other name is refused, listing
// the names there are.
TEST(RequestValidationTest, PromptNamedPicksAmongTheModelsPrompts) {
  const std::map<std::string, std::string> prompts{
      {"query", "query: "}, {"passage", "passage: "}, {"document", ""}};
  auto prompt = PromptNamed(prompts, "query: ", "", "model 'm'");
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(*prompt, "query: ");
  prompt = PromptNamed(prompts, "query: ", "passage", "model 'm'");
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(*prompt, "passage: ");
  prompt = PromptNamed(prompts, "query: ", "document", "model 'm'");
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(*prompt, "");
  ExpectInvalid(PromptNamed(prompts, "query: ", "Query", "model 'm'").status(),
                "prompt_name \"Query\" is not a prompt of model 'm' (its prompts: \"document\", "
                "\"passage\", \"query\")");
  ExpectInvalid(PromptNamed({}, "", "query", "model 'm'").status(),
                "prompt_name \"query\": model 'm' has no prompts");
  prompt = PromptNamed({}, "", "", "model 'm'");
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(*prompt, "");
  // A client's long name is cut in the message (a 4 MiB request could
  // otherwise make trailers no client takes), and a model's many names
  // are listed up to 16 (the review of 1f18f51: the whole name went in).
  const Status long_name = PromptNamed(prompts, "", std::string(200000, 'x'), "model 'm'").status();
  ExpectInvalid(long_name, "prompt_name \"" + std::string(64, 'x') + "...\" (200000 bytes)");
  EXPECT_LT(long_name.message().size(), 300u) << long_name.message().size();
  std::map<std::string, std::string> many;
  for (int i = 0; i < 40; ++i) many["p" + std::to_string(100 + i)] = "";
  const Status listed = PromptNamed(many, "", "q", "model 'm'").status();
  ExpectInvalid(listed, "\"p114\", \"p115\" and 24 more)");
  EXPECT_EQ(listed.message().find("p116"), std::string::npos) << listed.message();
}

// A client's string in a status message: whole up to 64 bytes, else cut at
// a character's start with its length.
TEST(RequestValidationTest, QuotedForStatusCutsLongStrings) {
  EXPECT_EQ(QuotedForStatus("bert"), "'bert'");
  EXPECT_EQ(QuotedForStatus("bert", '"'), "\"bert\"");
  EXPECT_EQ(QuotedForStatus(std::string(100, 'a')),
            "'" + std::string(64, 'a') + "...' (100 bytes)");
  // 63 ASCII bytes, then a 2-byte character across byte 64: cut before it.
  const std::string text = std::string(63, 'a') + "\xc3\xa9" + std::string(10, 'b');
  EXPECT_EQ(QuotedForStatus(text), "'" + std::string(63, 'a') + "...' (75 bytes)");
}

// A 1 MiB "word" (no spaces) from a hostile client: the tokenizers read a
// prefix bounded by max_tokens, not the megabyte, and the length limit
// applies as for any text (truncated, or refused without truncation). The
// one exception is a word that is a single token however long (WordPiece's
// [UNK] for a word over 100 characters): read to its end, it fits. The CPU
// cost per MiB is measured by engine/text/bench/tokenize_bench, not here.
TEST(RequestValidationTest, OneMegabyteWordReadsABoundedPrefix) {
  auto spm = LangidTokenizer();
  ASSERT_NE(spm, nullptr);
  auto wordpiece =
      CreateWordPieceTokenizerFromTokens(testing::TinyWordPieceVocab(), WordPieceOptions{});
  ASSERT_TRUE(wordpiece.ok()) << wordpiece.status().ToString();
  std::string mixed;  // letters of several scripts, no separator
  while (mixed.size() < (1u << 20))
    mixed += "abcxyz\xc3\xa4\xc3\xb6\xc3\xbc\xe6\x97\xa5\xe6\x9c\xac";
  const std::string a_run(1u << 20, 'a');
  const RequestLimits limits{1, 128, 1 << 20};
  for (const std::string* word : {&a_run, static_cast<const std::string*>(&mixed)}) {
    for (const Tokenizer* t : {spm.get(), wordpiece->get()}) {
      SCOPED_TRACE(t->Describe() + (word == &a_run ? ", 'a' x 2^20" : ", mixed scripts"));
      const auto cut = TokenizeTexts(*t, {*word}, limits, /*truncate=*/true);
      ASSERT_TRUE(cut.ok()) << cut.status().ToString();
      const auto strict = TokenizeTexts(*t, {*word}, limits, /*truncate=*/false);
      if (t == wordpiece->get() && word == &a_run) {
        ASSERT_TRUE(strict.ok()) << strict.status().ToString();
        EXPECT_EQ((*strict)[0].ids, (std::vector<int32_t>{2, 1, 3}));  // [CLS] [UNK] [SEP]
        EXPECT_EQ((*cut)[0].ids, (*strict)[0].ids);
        continue;
      }
      EXPECT_EQ((*cut)[0].ids.size(), 128u);
      EXPECT_TRUE((*cut)[0].truncated());
      EXPECT_LT((*cut)[0].bytes_read, 64 * 1024);
      ExpectInvalid(strict.status(), "more than the limit of 128 tokens");
    }
  }
}

}  // namespace
}  // namespace encoderd::server
