// sentence-transformers folders: what is read from modules.json,
// 1_Pooling/config.json and sentence_bert_config.json, and what is refused
// with the file and the module named. (Loading and parity of whole folders:
// the hf_st_* fixtures in model_directory_test and encoder_parity_test.)
#include "engine/model/sentence_transformers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/encode_command.h"
#include "server/config/model_card_yaml.h"
#include "tests/unit/model_fixtures.h"

namespace encoderd {
namespace {

namespace fs = std::filesystem;

class SentenceTransformersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() /
        ("st_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "1_Pooling");
  }
  void Write(const std::string& name, const std::string& text) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name) << text;
  }
  void Modules(const std::string& entries) { Write("modules.json", "[" + entries + "]"); }
  void Pooling(const std::string& modes) { Write("1_Pooling/config.json", "{" + modes + "}"); }
  std::string Error() {
    auto layout = ReadSentenceTransformers(dir_.string());
    return layout.ok() ? "ok" : layout.status().message();
  }
  fs::path dir_;
};

constexpr char kTransformer[] =
    R"({"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"})";
constexpr char kPooling[] =
    R"({"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"})";
constexpr char kNormalize[] =
    R"({"idx": 2, "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})";

TEST_F(SentenceTransformersTest, NoModulesJsonIsNotSentenceTransformers) {
  auto layout = ReadSentenceTransformers(dir_.string());
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_FALSE(layout->has_value());
}

TEST_F(SentenceTransformersTest, ReadsPoolingNormalizeAndSequenceLimit) {
  Modules(
      std::string(
          R"({"idx": 0, "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"},)") +
      kPooling + "," + kNormalize);
  Pooling(R"("pooling_mode_cls_token": false, "pooling_mode_mean_tokens": true)");
  Write("0_Transformer/sentence_bert_config.json",
        R"({"max_seq_length": 256, "do_lower_case": false})");
  auto layout = ReadSentenceTransformers(dir_.string());
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_TRUE(layout->has_value());
  const SentenceTransformersLayout& st = **layout;
  EXPECT_EQ(st.transformer_dir, (dir_ / "0_Transformer").string());
  EXPECT_EQ(st.pooling, Pooling::kMean);
  EXPECT_TRUE(st.normalize);
  EXPECT_EQ(st.max_seq_length, 256);
  EXPECT_EQ(st.modules.size(), 3u);
}

TEST_F(SentenceTransformersTest, RefusesModulesItCannotRunAndNamesThem) {
  Pooling(R"("pooling_mode_mean_tokens": true)");
  Modules(std::string(kTransformer) + "," + kPooling +
          R"(, {"idx": 2, "path": "2_W", "type": "sentence_transformers.models.WordWeights"})");
  EXPECT_NE(Error().find("module 2 (sentence_transformers.models.WordWeights"), std::string::npos)
      << Error();
  Modules(std::string(kPooling) + "," + kTransformer);  // pooling before the transformer
  EXPECT_NE(Error().find("module 0 (sentence_transformers.models.Pooling"), std::string::npos)
      << Error();
  Modules(kTransformer);
  EXPECT_NE(Error().find("needs a Transformer and a Pooling module"), std::string::npos) << Error();
  Modules(
      R"({"idx": 0, "path": "../elsewhere", "type": "sentence_transformers.models.Transformer"})");
  EXPECT_NE(Error().find("leaves the model folder"), std::string::npos) << Error();
  Modules(R"({"idx": 0, "path": "a/../../b", "type": "sentence_transformers.models.Transformer"})");
  EXPECT_NE(Error().find("leaves the model folder"), std::string::npos) << Error();
  Write("modules.json", "{not json");
  EXPECT_NE(Error().find("modules.json: not valid JSON"), std::string::npos) << Error();
}

TEST_F(SentenceTransformersTest, ReadsDenseModulesAndRefusesOtherActivations) {
  Pooling(R"("pooling_mode_mean_tokens": true)");
  Modules(std::string(kTransformer) + "," + kPooling +
          R"(, {"idx": 2, "path": "2_Dense", "type": "sentence_transformers.models.Dense"})");
  Write("2_Dense/config.json", R"({"in_features": 64, "out_features": 32, "bias": false})");
  auto layout = ReadSentenceTransformers(dir_.string());
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_EQ((*layout)->dense.size(), 1u);
  const EncoderConfig::PoolDense& dense = (*layout)->dense[0].shape;
  EXPECT_EQ((*layout)->dense[0].dir, (dir_ / "2_Dense").string());
  EXPECT_EQ(dense.in, 64);
  EXPECT_EQ(dense.out, 32);
  EXPECT_FALSE(dense.bias);
  EXPECT_TRUE(dense.tanh);  // sentence-transformers' default activation
  Write("2_Dense/config.json",
        R"({"in_features": 64, "out_features": 32,
            "activation_function": "torch.nn.modules.activation.ReLU"})");
  EXPECT_NE(Error().find("activation_function torch.nn.modules.activation.ReLU is not supported"),
            std::string::npos)
      << Error();
  Write("2_Dense/config.json", R"({"out_features": 32})");
  EXPECT_NE(Error().find("in_features must be a positive integer"), std::string::npos) << Error();
}

// Every pooling mode of sentence-transformers 2.x maps to its Pooling.
TEST_F(SentenceTransformersTest, ReadsEveryPoolingMode) {
  Modules(std::string(kTransformer) + "," + kPooling);
  const std::pair<const char*, encoderd::Pooling> modes[] = {
      {"pooling_mode_cls_token", encoderd::Pooling::kCls},
      {"pooling_mode_mean_tokens", encoderd::Pooling::kMean},
      {"pooling_mode_max_tokens", encoderd::Pooling::kMax},
      {"pooling_mode_mean_sqrt_len_tokens", encoderd::Pooling::kMeanSqrtLen},
      {"pooling_mode_weightedmean_tokens", encoderd::Pooling::kWeightedMean},
      {"pooling_mode_lasttoken", encoderd::Pooling::kLastToken}};
  for (const auto& [key, pooling] : modes) {
    Pooling("\"" + std::string(key) + "\": true, \"pooling_mode_cls_token_x\": false");
    auto layout = ReadSentenceTransformers(dir_.string());
    ASSERT_TRUE(layout.ok()) << key << ": " << layout.status().ToString();
    EXPECT_EQ((*layout)->pooling, pooling) << key;
  }
}

TEST_F(SentenceTransformersTest, RefusesPoolingItCannotDo) {
  Modules(std::string(kTransformer) + "," + kPooling);
  Pooling(R"("pooling_mode_mean_tokens": true, "pooling_mode_median_tokens": true)");
  EXPECT_NE(Error().find("pooling_mode_median_tokens is not supported"), std::string::npos)
      << Error();
  Pooling(R"("pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true)");
  EXPECT_NE(Error().find("are both true"), std::string::npos) << Error();
  Pooling(R"("pooling_mode_mean_tokens": 1)");  // sentence-transformers would take it as on
  EXPECT_NE(Error().find("pooling_mode_mean_tokens must be true or false, got 1"),
            std::string::npos)
      << Error();
  Pooling(R"("pooling_mode_mean_tokens": false)");
  EXPECT_NE(Error().find("no pooling_mode_* is true"), std::string::npos) << Error();
  Pooling(R"("pooling_mode_mean_tokens": true, "include_prompt": false)");
  EXPECT_NE(Error().find("include_prompt = false"), std::string::npos) << Error();
  Pooling(R"("pooling_mode_mean_tokens": true)");
  Write("sentence_bert_config.json", R"({"do_lower_case": true})");
  EXPECT_NE(Error().find("do_lower_case = true is not supported"), std::string::npos) << Error();
  Write("sentence_bert_config.json", R"({"max_seq_length": 0})");
  EXPECT_NE(Error().find("max_seq_length must be a positive integer"), std::string::npos)
      << Error();
  Write("sentence_bert_config.json", R"({"max_seq_length": 64})");
  EXPECT_EQ(Error(), "ok");
}

}  // namespace
}  // namespace encoderd

namespace encoderd::server {
namespace {

// The folder's pooling and Normalize are what `encode` (and Embed) serve
// when the request names neither; an explicit pooling still wins.
TEST(SentenceTransformersServingTest, EncodeServesTheFolderDefaults) {
  const std::string dir = testing::ModelsDir() + "/hf_st_mean_normalize";
  auto run = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {dir, "--text", "hello world", "--json"};
    args.insert(args.end(), more.begin(), more.end());
    std::ostringstream out, err;
    EXPECT_EQ(RunEncodeCommand(args, out, err), 0) << err.str();
    return nlohmann::json::parse(out.str())["results"][0]["embedding"].get<std::vector<double>>();
  };
  auto length = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s);
  };
  const std::vector<double> served = run({});
  const std::vector<double> mean = run({"--pooling", "mean"});
  const std::vector<double> cls = run({"--pooling", "cls"});
  EXPECT_NEAR(length(served), 1.0, 1e-5);  // Normalize, without --normalize
  ASSERT_EQ(served.size(), mean.size());
  for (size_t i = 0; i < served.size(); ++i) EXPECT_NEAR(served[i], mean[i], 1e-6);  // mean pooling
  EXPECT_GT(std::fabs(cls[0] - mean[0]) + std::fabs(cls[1] - mean[1]), 1e-4);        // cls differs
}

// A Dense module whose weights disagree with its config.json is refused at
// load, naming the file (not served with a wrong-width embedding).
TEST(SentenceTransformersServingTest, DenseWeightsMustMatchTheirConfig) {
  const fs::path dir = fs::temp_directory_path() / "st_dense_mismatch";
  fs::remove_all(dir);
  fs::copy(testing::ModelsDir() + "/hf_st_dense", dir, fs::copy_options::recursive);
  std::ofstream(dir / "2_Dense" / "config.json") << R"({"in_features": 64, "out_features": 16})";
  auto bundle = LoadModelDirectory(dir.string());
  ASSERT_FALSE(bundle.ok());
  EXPECT_NE(
      bundle.status().message().find("linear.weight is [32, 64] but config.json says [16, 64]"),
      std::string::npos)
      << bundle.status().ToString();
}

}  // namespace
}  // namespace encoderd::server
