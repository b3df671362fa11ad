// Tokenizers against the reference encodings written by
// tests/fixtures/fx_tokenizers.py (python3-sentencepiece with the XLM-R id
// mapping, and transcriptions of Hugging Face's BertTokenizer and of GPT-2's
// byte-level BPE).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engine/text/byte_bpe_tokenizer.h"
#include "engine/text/hf_tokenizer_json.h"
#include "engine/text/sentencepiece_tokenizer.h"
#include "engine/text/wordpiece_tokenizer.h"
#include "tests/unit/tokenizer_fixtures.h"

namespace encoderd {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(ENCODERD_FIXTURES_DIR) / "tokenizers";
constexpr int64_t kNoLimit = int64_t{1} << 30;

nlohmann::json ReadJson(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing fixture " << path << " (run ctest -R generate_fixtures)";
  return in ? nlohmann::json::parse(in) : nlohmann::json();
}

std::unique_ptr<Tokenizer> Make(const std::string& name) {
  StatusOr<std::unique_ptr<Tokenizer>> t = Status(StatusCode::kInternal, "unknown " + name);
  if (name.rfind("json_", 0) == 0) {  // the same tokenizer written as tokenizer.json
    auto json =
        CreateTokenizerFromHfJson((kDir / "tokenizer_json" / (name.substr(5) + ".json")).string());
    t = json.ok() ? StatusOr<std::unique_ptr<Tokenizer>>(std::move(json->tokenizer))
                  : StatusOr<std::unique_ptr<Tokenizer>>(json.status());
  } else if (name == "spm") {
    t = CreateSentencePieceTokenizer((kDir / "spm" / "sentencepiece.bpe.model").string(), {});
  } else if (name == "spm_xlmr_class") {
    t = testing::XlmrClassSentencePiece(kDir.string());
  } else if (name == "spm_unigram") {
    t = CreateSentencePieceTokenizer((kDir / "spm" / "sentencepiece.unigram.model").string(), {});
  } else if (name == "spm_deberta") {  // as a DeBERTa folder's spm.model is read
    SentencePieceOptions options;
    options.id_offset = 0;
    options.pieces = {"[CLS]", "[SEP]", "[PAD]", "[UNK]"};
    options.special_ids_from_model = true;
    t = CreateSentencePieceTokenizer((kDir / "spm" / "deberta.model").string(), options);
  } else if (name == "bytebpe") {
    t = CreateByteBpeTokenizer((kDir / "bytebpe" / "vocab.json").string(),
                               (kDir / "bytebpe" / "merges.txt").string(), {});
  } else {
    WordPieceOptions options;
    options.lower_case = name.rfind("wordpiece_uncased", 0) == 0;
    if (name.find("_keep_accents") != std::string::npos) options.strip_accents = false;
    if (name.find("_strip_accents") != std::string::npos) options.strip_accents = true;
    const std::string file = *options.lower_case ? "vocab_uncased.txt" : "vocab_cased.txt";
    t = CreateWordPieceTokenizer((kDir / "wordpiece" / file).string(), options);
  }
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

class TokenizerFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    samples_ = ReadJson(kDir / "samples.json").get<std::vector<std::string>>();
    const std::string& name = GetParam();
    // A tokenizer.json has expectations of its own where its library's rules
    // differ from the other files' (BERT's: BertRules), else theirs.
    const nlohmann::json all = ReadJson(kDir / "expected.json");
    expected_ = all.contains(name) ? all[name] : all[name.substr(5)];
    tokenizer_ = Make(GetParam());
    ASSERT_NE(tokenizer_, nullptr);
    ASSERT_EQ(expected_.size(), samples_.size());
  }
  std::vector<std::string> samples_;
  nlohmann::json expected_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_P(TokenizerFixtureTest, MatchesReferenceOnEverySample) {
  for (size_t i = 0; i < samples_.size(); ++i) {
    SCOPED_TRACE("sample " + std::to_string(i) + ": " + samples_[i].substr(0, 80));
    StatusOr<Encoding> enc = tokenizer_->Encode(samples_[i], kNoLimit, /*truncate=*/false);
    ASSERT_TRUE(enc.ok()) << enc.status().ToString();
    EXPECT_EQ(enc->pieces, expected_[i]["pieces"].get<std::vector<std::string>>());
    EXPECT_EQ(enc->ids, expected_[i]["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(enc->untruncated_length, static_cast<int64_t>(enc->ids.size()));
    EXPECT_FALSE(enc->truncated());
  }
}

TEST_P(TokenizerFixtureTest, TruncatesOrRejectsLongInput) {
  const std::string& text = samples_.back();  // the long text
  const auto full = expected_.back()["ids"].get<std::vector<int32_t>>();
  ASSERT_GT(full.size(), 600u);
  constexpr int64_t kLimit = 64;

  StatusOr<Encoding> cut = tokenizer_->Encode(text, kLimit, /*truncate=*/true);
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  ASSERT_EQ(cut->ids.size(), static_cast<size_t>(kLimit));
  EXPECT_EQ(cut->pieces.size(), static_cast<size_t>(kLimit));
  EXPECT_TRUE(std::equal(full.begin(), full.begin() + kLimit - 1, cut->ids.begin()));
  EXPECT_EQ(cut->ids.back(), tokenizer_->special_tokens().eos);
  // The tokenizer stopped reading once the cut was settled: the length
  // before truncation is a lower bound.
  EXPECT_GT(cut->untruncated_length, kLimit);
  EXPECT_LE(cut->untruncated_length, static_cast<int64_t>(full.size()));
  EXPECT_LT(cut->bytes_read, static_cast<int64_t>(text.size()));
  EXPECT_TRUE(cut->truncated());

  StatusOr<Encoding> rejected = tokenizer_->Encode(text, kLimit, /*truncate=*/false);
  ASSERT_FALSE(rejected.ok());
  EXPECT_EQ(rejected.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rejected.status().message().find("more than the limit of 64 tokens"), std::string::npos)
      << rejected.status().message();
  EXPECT_NE(rejected.status().message().find("input is at least "), std::string::npos)
      << rejected.status().message();

  // Exactly at the limit: nothing is cut, with or without truncation.
  const auto exact = static_cast<int64_t>(full.size());
  for (bool truncate : {true, false}) {
    StatusOr<Encoding> fits = tokenizer_->Encode(text, exact, truncate);
    ASSERT_TRUE(fits.ok()) << fits.status().ToString();
    EXPECT_EQ(fits->ids, full);
    EXPECT_FALSE(fits->truncated());
  }
  EXPECT_FALSE(tokenizer_->Encode(text, 1, true).ok());
}

TEST_P(TokenizerFixtureTest, RejectsInvalidUtf8) {
  const std::vector<std::string> bad = {"\xff",
                                        "abc\x80",
                                        "\xc0\xaf",  // stray, continuation, overlong
                                        "\xed\xa0\x80",
                                        "ok \xe2\x82",
                                        "\xf4\x90\x80\x80",  // surrogate, cut, > U+10FFFF
                                        "\xf8\x88\x80\x80\x80"};
  for (const std::string& text : bad) {
    StatusOr<Encoding> enc = tokenizer_->Encode(text, kNoLimit, true);
    ASSERT_FALSE(enc.ok());
    EXPECT_EQ(enc.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(enc.status().message().find("UTF-8"), std::string::npos);
  }
}

TEST_P(TokenizerFixtureTest, ConcurrentEncodesAgree) {
  std::vector<std::vector<Encoding>> results(4);
  std::vector<std::thread> threads;
  for (auto& out : results) {
    threads.emplace_back([&] {
      for (int round = 0; round < 5; ++round) {
        for (const std::string& text : samples_) {
          StatusOr<Encoding> enc = tokenizer_->Encode(text, 128, true);
          if (round == 0 && enc.ok()) out.push_back(*enc);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& out : results) {
    ASSERT_EQ(out.size(), samples_.size());
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(out[i].ids, results[0][i].ids);
      const auto full = expected_[i]["ids"].get<std::vector<int32_t>>();
      EXPECT_TRUE(std::equal(out[i].ids.begin(), out[i].ids.end() - 1, full.begin()));
    }
  }
}

// A sentencepiece tokenizer's added tokens with id -1 take the model's ids;
// one the vocabulary cannot hold is dropped, a given id outside it refused.
TEST(SentencePieceAddedTokens, IdsResolvedDroppedOrRefused) {
  const std::string model = (kDir / "spm" / "sentencepiece.bpe.model").string();
  SentencePieceOptions options;
  options.added_tokens = XlmrClassSpecials();  // <mask> is the piece after the model's
  auto without_mask = CreateSentencePieceTokenizer(model, options);
  ASSERT_TRUE(without_mask.ok()) << without_mask.status().ToString();
  EXPECT_NE((*without_mask)->Describe().find("4 special tokens matched"), std::string::npos)
      << (*without_mask)->Describe();
  auto e = (*without_mask)->Encode("a </s> <mask>", kNoLimit, false);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(std::count(e->ids.begin(), e->ids.end(), 2), 2);  // </s>, fairseq's 2
  EXPECT_TRUE(std::all_of(e->ids.begin(), e->ids.end(), [&](int32_t id) {
    return id >= 0 && id < (*without_mask)->vocab_size();
  }));
  // A model with a piece <mask> of its own (3 of 600): <mask> still comes
  // after the pieces where the vocabulary has room (XLMRobertaTokenizer's
  // fairseq table, the converters' vocabularies), else it is that piece.
  // Until 2026-12-07 it was that piece either way.
  const std::string with_piece = (kDir / "spm" / "sentencepiece.unigram_mask.model").string();
  for (const auto& [vocab_size, mask] : {std::pair{0, 4}, std::pair{602, 601}}) {
    options.vocab_size = vocab_size;
    auto tokenizer = CreateSentencePieceTokenizer(with_piece, options);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    auto masked = (*tokenizer)->Encode("a <mask>", kNoLimit, false);
    ASSERT_TRUE(masked.ok()) << masked.status().ToString();
    ASSERT_GE(masked->ids.size(), 2u);
    EXPECT_EQ(masked->ids.end()[-2], mask) << "vocab_size " << vocab_size;  // before </s>
  }
  options.vocab_size = 0;
  options.added_tokens = {AddedToken{"a", 5000}};
  auto refused = CreateSentencePieceTokenizer(model, options);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(
      refused.status().message().find("added token \"a\" has id 5000, outside the vocabulary"),
      std::string::npos)
      << refused.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    All, TokenizerFixtureTest,
    ::testing::Values("spm", "spm_xlmr_class", "spm_deberta", "wordpiece_uncased",
                      "wordpiece_cased", "bytebpe", "json_wordpiece_uncased",
                      "json_wordpiece_cased", "json_bytebpe",
                      // lower_case and strip_accents apart (were
                      // always together; tokenizer.json refused them)
                      "wordpiece_uncased_keep_accents", "wordpiece_cased_strip_accents",
                      "json_wordpiece_uncased_keep_accents", "json_wordpiece_cased_strip_accents",
                      // XLM-R's tokenizer.json as transformers' converters
                      // wrote it over the years (runs collapsed, Precompiled
                      // alone, Strip and runs collapsed), as the tokenizers
                      // library runs it, and the model it came from
                      "spm_unigram", "json_xlmr_unigram", "json_xlmr_unigram_keep",
                      "json_xlmr_unigram_strip",
                      // MPNet's files, the library's BERT rules with <s> </s>
                      "json_mpnet", "json_mpnet_template"));

}  // namespace
}  // namespace encoderd
