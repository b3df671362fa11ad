// sentence-transformers folders: what is read from modules.json,
// 1_Pooling/config.json and sentence_bert_config.json, and what is refused
// with the file and the module named. (Loading and parity of whole folders:
// the hf_st_* fixtures in model_directory_test and encoder_parity_test.)
#include "engine/model/sentence_transformers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cli/encode_command.h"
#include "cli/inspect_command.h"
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
  EXPECT_EQ(st.pooling.value_or(Pooling::kCls), Pooling::kMean);
  EXPECT_FALSE(st.cross_encoder);
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
  // 5.4+'s keys: a Dense over the pooled sentence_embedding is served; over
  // the token embeddings, or added back to its input (6.0), it is refused.
  Write("2_Dense/config.json", R"({"in_features": 64, "out_features": 32,
      "module_input_name": "sentence_embedding", "module_output_name": null,
      "use_residual": false})");
  EXPECT_EQ(Error(), "ok");
  Write("2_Dense/config.json", R"({"in_features": 64, "out_features": 32,
      "module_input_name": "token_embeddings"})");
  EXPECT_NE(Error().find("a Dense module over \"token_embeddings\" is not supported"),
            std::string::npos)
      << Error();
  Write("2_Dense/config.json", R"({"in_features": 64, "out_features": 32,
      "module_output_name": "scores"})");
  EXPECT_NE(Error().find("a Dense module over \"scores\""), std::string::npos) << Error();
  Write("2_Dense/config.json", R"({"in_features": 64, "out_features": 32, "use_residual": true})");
  EXPECT_NE(Error().find("use_residual true is not supported"), std::string::npos) << Error();
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
    EXPECT_EQ((*layout)->pooling.value_or(encoderd::Pooling::kCls), pooling) << key;
  }
}

// sentence-transformers 5.4+ saves the mode as "pooling_mode" (a name, or a
// list to concatenate) in place of the pooling_mode_* flags; until
// 2026-12-04 every such folder was refused ("no pooling_mode_* is true").
TEST_F(SentenceTransformersTest, ReadsThePoolingModeNameOfSentenceTransformers54) {
  Modules(std::string(kTransformer) + "," + kPooling);
  const std::pair<const char*, encoderd::Pooling> modes[] = {
      {R"("cls")", encoderd::Pooling::kCls},
      {R"("mean")", encoderd::Pooling::kMean},
      {R"(["max"])", encoderd::Pooling::kMax},
      {R"("mean_sqrt_len_tokens")", encoderd::Pooling::kMeanSqrtLen},
      {R"("weightedmean")", encoderd::Pooling::kWeightedMean},
      {R"("lasttoken")", encoderd::Pooling::kLastToken}};
  for (const auto& [mode, pooling] : modes) {
    // The name decides; flags beside it are dropped, as sentence-transformers does.
    Pooling(std::string(R"("embedding_dimension": 64, "include_prompt": true, "pooling_mode": )") +
            mode + R"(, "pooling_mode_cls_token": true)");
    auto layout = ReadSentenceTransformers(dir_.string());
    ASSERT_TRUE(layout.ok()) << mode << ": " << layout.status().ToString();
    EXPECT_EQ((*layout)->pooling.value_or(encoderd::Pooling::kCls), pooling) << mode;
  }
  Pooling(R"("pooling_mode": ["cls", "mean"])");
  EXPECT_NE(Error().find(R"(pooling_mode ["cls","mean"] concatenates poolings)"), std::string::npos)
      << Error();
  Pooling(R"("pooling_mode": "median")");
  EXPECT_NE(Error().find(R"(pooling_mode "median" is not supported)"), std::string::npos)
      << Error();
  Pooling(R"("pooling_mode": 1)");
  EXPECT_NE(Error().find("pooling_mode 1 is not supported"), std::string::npos) << Error();
}

// include_prompt false: the prompt's tokens are left out of the pooling
// (refused at load until 2026-12-06). Absent, null or true: included.
TEST_F(SentenceTransformersTest, ReadsIncludePrompt) {
  Modules(std::string(kTransformer) + "," + kPooling);
  const std::pair<const char*, bool> cases[] = {
      {R"("pooling_mode": "mean", "include_prompt": false)", false},
      {R"("pooling_mode_mean_tokens": true, "include_prompt": false)", false},
      {R"("pooling_mode": "mean", "include_prompt": true)", true},
      {R"("pooling_mode": "mean", "include_prompt": null)", true},
      {R"("pooling_mode": "mean")", true}};
  for (const auto& [pooling, include] : cases) {
    Pooling(pooling);
    auto layout = ReadSentenceTransformers(dir_.string());
    ASSERT_TRUE(layout.ok()) << pooling << ": " << layout.status().ToString();
    EXPECT_EQ((*layout)->include_prompt, include) << pooling;
    EXPECT_EQ((*layout)->modules[1].find("the prompt's tokens left out") != std::string::npos,
              !include)
        << (*layout)->modules[1];
  }
  Pooling(R"("pooling_mode": "mean", "include_prompt": "false")");
  EXPECT_NE(Error().find(R"(include_prompt must be true or false, got "false")"), std::string::npos)
      << Error();
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
  // No mode on: sentence-transformers pools by mean (until 2026-12-04
  // encoderd refused: "no pooling_mode_* is true").
  for (const char* modes : {R"("pooling_mode_mean_tokens": false, "pooling_mode_cls_token": false)",
                            R"("embedding_dimension": 64)"}) {
    Pooling(modes);
    auto layout = ReadSentenceTransformers(dir_.string());
    ASSERT_TRUE(layout.ok()) << modes << ": " << layout.status().ToString();
    EXPECT_EQ((*layout)->pooling.value_or(encoderd::Pooling::kCls), encoderd::Pooling::kMean);
  }
  Pooling(R"("pooling_mode_mean_tokens": true)");
  Write("sentence_bert_config.json", R"({"do_lower_case": true})");
  EXPECT_NE(Error().find("do_lower_case = true is not supported"), std::string::npos) << Error();
  Write("sentence_bert_config.json", R"({"max_seq_length": 0})");
  EXPECT_NE(Error().find("max_seq_length must be a positive integer"), std::string::npos)
      << Error();
  Write("sentence_bert_config.json", R"({"max_seq_length": 64})");
  EXPECT_EQ(Error(), "ok");
}

// sentence-transformers 5.4+ takes the limit from the tokenizer's
// model_max_length where sentence_bert_config.json gives none (2.x did the
// same, bounded by the position table); until 2026-12-04 encoderd read only
// sentence_bert_config.json and served up to the position table's length.
TEST_F(SentenceTransformersTest, TakesTheTokenizersLimitWhereTheConfigGivesNone) {
  Modules(std::string(kTransformer) + "," + kPooling);
  Pooling(R"("pooling_mode_mean_tokens": true)");
  const auto limit = [this]() -> std::optional<int64_t> {
    auto layout = ReadSentenceTransformers(dir_.string());
    EXPECT_TRUE(layout.ok()) << layout.status().ToString();
    return layout.ok() ? (*layout)->max_seq_length : std::nullopt;
  };
  EXPECT_EQ(limit(), std::nullopt);
  Write("tokenizer_config.json", R"({"model_max_length": 128, "do_lower_case": false})");
  EXPECT_EQ(limit(), 128);
  Write("sentence_bert_config.json", R"({"max_seq_length": 200})");  // it wins
  EXPECT_EQ(limit(), 200);
  Write("sentence_bert_config.json", R"({"max_seq_length": null})");
  EXPECT_EQ(limit(), 128);
  // transformers' "no limit" (int(1e30)), written as an integer or a float.
  Write("tokenizer_config.json", R"({"model_max_length": 1000000000000000019884624838656})");
  EXPECT_EQ(limit(), std::nullopt);
  Write("tokenizer_config.json", R"({"model_max_length": 1e30})");
  EXPECT_EQ(limit(), std::nullopt);
  Write("tokenizer_config.json", R"({"model_max_length": 18446744073709551615})");
  EXPECT_EQ(limit(), std::nullopt);
  Write("tokenizer_config.json", R"({"model_max_length": 256.0})");  // a whole number
  EXPECT_EQ(limit(), 256);
  Write("tokenizer_config.json", R"({"model_max_length": 1e18})");  // past any position table
  EXPECT_EQ(limit(), int64_t{1000000000000000000});
  Write("tokenizer_config.json", R"({"model_max_length": 0.5})");
  EXPECT_NE(Error().find("model_max_length must be a positive integer, got 0.5"), std::string::npos)
      << Error();
  Write("tokenizer_config.json", "[512]");
  EXPECT_NE(Error().find("tokenizer_config.json: expected a JSON object"), std::string::npos)
      << Error();
  Write("tokenizer_config.json", R"({"model_max_length": "512"})");
  EXPECT_NE(Error().find("tokenizer_config.json: model_max_length must be a positive integer"),
            std::string::npos)
      << Error();
  Write("tokenizer_config.json", R"({"model_max_length": 0})");
  EXPECT_NE(Error().find("model_max_length must be a positive integer, got 0"), std::string::npos)
      << Error();
}

constexpr char kTransformer54[] =
    R"({"idx": 0, "name": "0", "path": "",
        "type": "sentence_transformers.base.modules.transformer.Transformer"})";
constexpr char kClassifierTask[] =
    R"({"transformer_task": "sequence-classification",
        "modality_config": {"text": {"method": "forward", "method_output_name": "logits"}},
        "module_output_name": "scores"})";

// A CrossEncoder as sentence-transformers 5.4+ saves it: one Transformer
// module over a sequence classifier, the activation of its score in
// config_sentence_transformers.json. Until 2026-12-04 such a folder was
// refused ("needs a Transformer and a Pooling module").
TEST_F(SentenceTransformersTest, ReadsACrossEncoderOfOneTransformerModule) {
  Modules(kTransformer54);
  Write("sentence_bert_config.json", kClassifierTask);
  Write("config_sentence_transformers.json",
        R"({"__version__": {"sentence_transformers": "5.4.0"}, "model_type": "CrossEncoder",
            "activation_fn": "torch.nn.modules.linear.Identity",
            "prompts": {"query": "", "document": ""}, "default_prompt_name": null})");
  Write("tokenizer_config.json", R"({"model_max_length": 512})");
  auto layout = ReadSentenceTransformers(dir_.string());
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  const SentenceTransformersLayout& st = **layout;
  EXPECT_TRUE(st.cross_encoder);
  EXPECT_FALSE(st.pooling.has_value());
  EXPECT_EQ(st.activation_fn, "torch.nn.modules.linear.Identity");
  EXPECT_EQ(st.transformer_dir, dir_.string());
  EXPECT_EQ(st.max_seq_length, 512);
  ASSERT_EQ(st.modules.size(), 1u);
  EXPECT_NE(st.modules[0].find("a CrossEncoder"), std::string::npos) << st.modules[0];
  // A null activation_fn: config.json's keys decide (model_directory_test).
  Write("config_sentence_transformers.json",
        R"({"model_type": "CrossEncoder", "activation_fn": null})");
  layout = ReadSentenceTransformers(dir_.string());
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_TRUE((*layout)->cross_encoder);
  EXPECT_EQ((*layout)->activation_fn, "");
  // Without config_sentence_transformers.json, or its model_type, the task
  // says it.
  for (const bool file : {true, false}) {
    if (file) {
      Write("config_sentence_transformers.json", R"({"prompts": {}})");
    } else {
      fs::remove(dir_ / "config_sentence_transformers.json");
    }
    layout = ReadSentenceTransformers(dir_.string());
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    EXPECT_TRUE((*layout)->cross_encoder);
  }
  // In a subfolder too.
  Modules(R"({"idx": 0, "path": "0_Transformer",
              "type": "sentence_transformers.base.modules.transformer.Transformer"})");
  Write("0_Transformer/sentence_bert_config.json", kClassifierTask);
  layout = ReadSentenceTransformers(dir_.string());
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_TRUE((*layout)->cross_encoder);
  EXPECT_EQ((*layout)->transformer_dir, (dir_ / "0_Transformer").string());
  Modules(kTransformer54);
  // An embedding model of 5.4+ (feature-extraction) still needs its Pooling.
  Write("sentence_bert_config.json", R"({"transformer_task": "feature-extraction"})");
  EXPECT_NE(Error().find("needs a Transformer and a Pooling module"), std::string::npos) << Error();
  Modules(std::string(kTransformer54) + "," + kPooling);
  Pooling(R"("pooling_mode_mean_tokens": true)");
  Write("config_sentence_transformers.json", R"({"model_type": "SentenceTransformer"})");
  EXPECT_EQ(Error(), "ok");
}

TEST_F(SentenceTransformersTest, RefusesCrossEncodersItCannotServe) {
  Pooling(R"("pooling_mode_lasttoken": true)");
  Write("sentence_bert_config.json", kClassifierTask);
  // A CrossEncoder scoring through Pooling and Dense (a causal LM's chain).
  Modules(std::string(kTransformer54) + "," + kPooling);
  Write("config_sentence_transformers.json", R"({"model_type": "CrossEncoder"})");
  EXPECT_NE(Error().find("a CrossEncoder is served as one Transformer module"), std::string::npos)
      << Error();
  Modules(kTransformer54);
  Write("sentence_bert_config.json", R"({"transformer_task": "feature-extraction"})");
  EXPECT_NE(Error().find("this one has 1 module(s) and transformer_task \"feature-extraction\""),
            std::string::npos)
      << Error();
  Write("sentence_bert_config.json", R"({"transformer_task": "text-generation"})");
  EXPECT_NE(Error().find("transformer_task \"text-generation\" is not supported"),
            std::string::npos)
      << Error();
  Write("sentence_bert_config.json", kClassifierTask);
  Write("config_sentence_transformers.json", R"({"model_type": "SentenceTransformer"})");
  EXPECT_NE(Error().find("needs model_type \"CrossEncoder\""), std::string::npos) << Error();
  Write("config_sentence_transformers.json", R"({"model_type": "SparseEncoder"})");
  EXPECT_NE(Error().find("model_type \"SparseEncoder\" is not supported"), std::string::npos)
      << Error();
  Write("config_sentence_transformers.json", R"({"model_type": "CrossEncoder",
                                                  "activation_fn": 1})");
  EXPECT_NE(Error().find("activation_fn must be a string"), std::string::npos) << Error();
  Write("config_sentence_transformers.json", R"({"model_type": "CrossEncoder"})");
  EXPECT_EQ(Error(), "ok");
  // A CrossEncoder has no prompts it starts from.
  Write("config_sentence_transformers.json",
        R"({"model_type": "CrossEncoder", "prompts": {}, "default_prompt_name": "query"})");
  EXPECT_NE(Error().find("default_prompt_name \"query\" is not a key of prompts"),
            std::string::npos)
      << Error();
  Write("config_sentence_transformers.json", "[1]");
  EXPECT_NE(Error().find("config_sentence_transformers.json: expected a JSON object"),
            std::string::npos)
      << Error();
  // What the Transformer would do beyond its forward over text.
  Write("config_sentence_transformers.json", R"({"model_type": "CrossEncoder"})");
  const std::pair<const char*, const char*> transformer_cases[] = {
      {R"({"transformer_task": "sequence-classification",
           "processing_kwargs": {"text": {"max_length": 64}}})",
       "processing_kwargs {\"text\":{\"max_length\":64}} is not supported"},
      {R"({"transformer_task": "sequence-classification", "processing_kwargs": {}})", "ok"},
      {R"({"transformer_task": "sequence-classification",
           "modality_config": {"image": {"method": "forward"}}})",
       "modality_config {\"image\""},
      {R"({"transformer_task": "sequence-classification",
           "modality_config": {"text": {"method": "get_text_features"}}})",
       R"(is not supported ({"text":{"method":"forward","method_output_name":"logits"}}))"},
      // 5.4 adds "message" where the tokenizer has a chat template.
      {R"({"transformer_task": "sequence-classification",
           "modality_config": {"text": {"method": "forward", "method_output_name": "logits"},
                               "message": {"method": "forward", "method_output_name": "logits"}}})",
       "modality_config {\"message\""},
      {R"({"transformer_task": "sequence-classification", "query_length": 32})",
       "query_length (a multi-vector model's) is not supported"},
      {R"({"transformer_task": "sequence-classification", "max_seq_length": 1e40})", "ok"},
      {R"({"transformer_task": "sequence-classification", "max_seq_length": -3})",
       "max_seq_length must be a positive integer, got -3"}};
  for (const auto& [config, says] : transformer_cases) {
    Write("sentence_bert_config.json", config);
    EXPECT_NE(Error().find(says), std::string::npos) << config << ": " << Error();
  }
}

// sentence-transformers (3.0+) prepends the prompt config_sentence_transformers.json's
// default_prompt_name names to every text; encoderd does too. A null or empty
// prompt is none; a name that is not a key of prompts is an error (but
// "query" and "document", which 5.0+ starts from empty, are no prompt).
TEST_F(SentenceTransformersTest, ReadsTheDefaultPrompt) {
  Modules(std::string(kTransformer) + "," + kPooling);
  Pooling(R"("pooling_mode_mean_tokens": true)");
  const struct {
    const char* config;
    const char* says;  // "ok" or the error
    const char* prompt;
  } cases[] = {{R"({"prompts": {"query": "query: "}, "default_prompt_name": null})", "ok", ""},
               {R"({"prompts": {"query": ""}, "default_prompt_name": "query"})", "ok", ""},
               {R"({"prompts": {"query": null}, "default_prompt_name": "query"})", "ok", ""},
               {R"({"prompts": {"query": "query: ", "passage": "passage: "},
           "default_prompt_name": "query"})",
                "ok", "query: "},
               // 5.0+ starts from empty "query" and "document" prompts.
               {R"({"prompts": {}, "default_prompt_name": "query"})", "ok", ""},
               {R"({"prompts": {}, "default_prompt_name": "passage"})",
                "default_prompt_name \"passage\" is not a key of prompts", ""},
               {R"({"prompts": {"q": "a\u0000b"}, "default_prompt_name": "q"})",
                "prompts[\"q\"] contains a NUL byte", ""},
               {R"({"prompts": {"query": 1}, "default_prompt_name": "query"})",
                "prompts[\"query\"] must be a string", ""},
               {R"({"default_prompt_name": 3})", "default_prompt_name must be a string", ""}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.config);
    Write("config_sentence_transformers.json", c.config);
    EXPECT_NE(Error().find(c.says), std::string::npos) << Error();
    auto layout = ReadSentenceTransformers(dir_.string());
    if (layout.ok()) {
      EXPECT_EQ((*layout)->default_prompt, c.prompt);
    }
  }
}

// config_sentence_transformers.json's truncate_dim (sentence-transformers
// 5.4+ saves it with the model): a positive integer or null; anything else
// is refused, naming the file. A CrossEncoder does not read the key (its
// scores are not cut), whatever it holds.
TEST_F(SentenceTransformersTest, ReadsTheTruncateDimTheFolderSaved) {
  Modules(std::string(kTransformer) + "," + kPooling);
  Pooling(R"("pooling_mode_mean_tokens": true)");
  const auto truncate_dim = [&]() -> std::optional<int64_t> {
    auto layout = ReadSentenceTransformers(dir_.string());
    EXPECT_TRUE(layout.ok() && layout->has_value()) << layout.status().ToString();
    return layout.ok() && layout->has_value() ? (*layout)->truncate_dim : std::nullopt;
  };
  EXPECT_EQ(truncate_dim(), std::nullopt);
  Write("config_sentence_transformers.json", R"({"truncate_dim": 256})");
  EXPECT_EQ(truncate_dim(), 256);
  Write("config_sentence_transformers.json", R"({"truncate_dim": null})");
  EXPECT_EQ(truncate_dim(), std::nullopt);
  Write("config_sentence_transformers.json", R"({"truncate_dim": 18446744073709551615})");
  EXPECT_EQ(truncate_dim(), std::numeric_limits<int64_t>::max());
  for (const char* bad : {"0", "-8", "8.5", "256.0", "\"256\"", "[256]"}) {
    Write("config_sentence_transformers.json", std::string(R"({"truncate_dim": )") + bad + "}");
    EXPECT_NE(Error().find("config_sentence_transformers.json: truncate_dim must be a positive "
                           "integer or null, got "),
              std::string::npos)
        << bad << ": " << Error();
  }
  Modules(kTransformer54);
  Write("sentence_bert_config.json", kClassifierTask);
  Write("config_sentence_transformers.json",
        R"({"model_type": "CrossEncoder", "truncate_dim": "8"})");
  auto cross = ReadSentenceTransformers(dir_.string());
  ASSERT_TRUE(cross.ok() && cross->has_value()) << cross.status().ToString();
  EXPECT_TRUE((*cross)->cross_encoder);
  EXPECT_EQ((*cross)->truncate_dim, std::nullopt);
}

// Every prompt of config_sentence_transformers.json is one a request may
// name (prompt_name), null ones as "". A SentenceTransformer also has
// empty "query" and "document" prompts unless the file sets them, as
// sentence-transformers 5.0+ starts from those; a CrossEncoder only the
// file's. A prompt that is not a string, or holds a NUL byte, is refused
// though no default names it. (Until 2026-12-05 only the default prompt was
// read.)
TEST_F(SentenceTransformersTest, ReadsThePromptsARequestMayName) {
  Modules(std::string(kTransformer) + "," + kPooling);
  Pooling(R"("pooling_mode_mean_tokens": true)");
  using Prompts = std::map<std::string, std::string>;
  // Without config_sentence_transformers.json too (the review of 1f18f51
  // found these missing there).
  auto none = ReadSentenceTransformers(dir_.string());
  ASSERT_TRUE(none.ok() && none->has_value()) << none.status().ToString();
  EXPECT_EQ((*none)->prompts, (Prompts{{"query", ""}, {"document", ""}}));
  Write("config_sentence_transformers.json",
        R"({"prompts": {"query": "query: ", "passage": "passage: ", "empty": null}})");
  auto layout = ReadSentenceTransformers(dir_.string());
  ASSERT_TRUE(layout.ok() && layout->has_value()) << layout.status().ToString();
  EXPECT_EQ(
      (*layout)->prompts,
      (Prompts{{"query", "query: "}, {"passage", "passage: "}, {"empty", ""}, {"document", ""}}));
  EXPECT_EQ((*layout)->default_prompt, "");
  EXPECT_EQ((*layout)->default_prompt_name, "");
  Write("config_sentence_transformers.json", R"({})");
  layout = ReadSentenceTransformers(dir_.string());
  ASSERT_TRUE(layout.ok() && layout->has_value()) << layout.status().ToString();
  EXPECT_EQ((*layout)->prompts, (Prompts{{"query", ""}, {"document", ""}}));
  Write("config_sentence_transformers.json", R"({"prompts": {"passage": 2}})");
  EXPECT_NE(Error().find("prompts[\"passage\"] must be a string"), std::string::npos) << Error();
  Write("config_sentence_transformers.json", R"({"prompts": {"passage": "a\u0000"}})");
  EXPECT_NE(Error().find("prompts[\"passage\"] contains a NUL byte"), std::string::npos) << Error();
  Write("config_sentence_transformers.json", R"({"prompts": ["query: "]})");
  EXPECT_NE(Error().find("prompts must be an object"), std::string::npos) << Error();
  // A CrossEncoder of one Transformer module (sentence-transformers 5.4+).
  Modules(kTransformer54);
  Write("sentence_bert_config.json", kClassifierTask);
  Write("config_sentence_transformers.json",
        R"({"model_type": "CrossEncoder", "prompts": {"q": "q: "}, "default_prompt_name": "q"})");
  layout = ReadSentenceTransformers(dir_.string());
  ASSERT_TRUE(layout.ok() && layout->has_value()) << layout.status().ToString();
  EXPECT_EQ((*layout)->prompts, (Prompts{{"q", "q: "}}));
  EXPECT_EQ((*layout)->default_prompt, "q: ");
  EXPECT_EQ((*layout)->default_prompt_name, "q");
  // A CrossEncoder known only by its task starts from no prompts too: a
  // default "query" the file does not list is refused, as with model_type
  // (it had been read as a SentenceTransformer's empty "query").
  Write("config_sentence_transformers.json", R"({"prompts": {}, "default_prompt_name": "query"})");
  EXPECT_NE(Error().find("default_prompt_name \"query\" is not a key of prompts"),
            std::string::npos)
      << Error();
  fs::remove(dir_ / "config_sentence_transformers.json");
  layout = ReadSentenceTransformers(dir_.string());
  ASSERT_TRUE(layout.ok() && layout->has_value()) << layout.status().ToString();
  EXPECT_TRUE((*layout)->cross_encoder);
  EXPECT_EQ((*layout)->prompts, Prompts{});
}

}  // namespace
}  // namespace encoderd

namespace encoderd::server {
namespace {

// The first embedding `encoderd encode ARGS --json` prints.
std::vector<double> EncodedEmbedding(std::vector<std::string> args) {
  args.push_back("--json");
  std::ostringstream out, err;
  EXPECT_EQ(RunEncodeCommand(args, out, err), 0) << err.str();
  return nlohmann::json::parse(out.str())["results"][0]["embedding"].get<std::vector<double>>();
}

// A copy of the fixture folder hf_st_mean_normalize, at `name` in the temp
// directory, whose config_sentence_transformers.json is `config`.
std::string PromptedCopy(const std::string& name, const std::string& config) {
  const fs::path copy = fs::temp_directory_path() / name;
  fs::remove_all(copy);
  fs::copy(testing::ModelsDir() + "/hf_st_mean_normalize", copy, fs::copy_options::recursive);
  std::ofstream(copy / "config_sentence_transformers.json") << config;
  return copy.string();
}

// The folder's pooling and Normalize are what `encode` (and Embed) serve
// when the request names neither; an explicit pooling still wins.
TEST(SentenceTransformersServingTest, EncodeServesTheFolderDefaults) {
  const std::string dir = testing::ModelsDir() + "/hf_st_mean_normalize";
  auto run = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {dir, "--text", "hello world"};
    args.insert(args.end(), more.begin(), more.end());
    return EncodedEmbedding(args);
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

// A folder's default prompt goes in front of every text: its embedding of
// "hello world" is the plain folder's of "query: hello world". (Until
// 2026-12-04 the prompt was not read: the text went in alone.)
TEST(SentenceTransformersServingTest, EncodePutsTheDefaultPromptInFront) {
  const std::string plain = testing::ModelsDir() + "/hf_st_mean_normalize";
  const std::string prompted = PromptedCopy(
      "st_default_prompt",
      R"({"prompts": {"query": "query: ", "passage": ""}, "default_prompt_name": "query"})");
  auto run = [](const std::string& dir, const std::string& text) {
    return EncodedEmbedding({dir, "--text", text});
  };
  const std::vector<double> got = run(prompted, "hello world");
  const std::vector<double> want = run(plain, "query: hello world");
  const std::vector<double> alone = run(plain, "hello world");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  double differs = 0;
  for (size_t i = 0; i < got.size(); ++i) differs += std::fabs(got[i] - alone[i]);
  EXPECT_GT(differs, 1e-3);
}

// --prompt-name puts the prompt it names in front instead of the default
// one: "document", which the folder leaves out, is empty (no prompt); a
// name the folder has not is refused, listing those it has.
TEST(SentenceTransformersServingTest, EncodeTakesThePromptItIsNamed) {
  const std::string plain = testing::ModelsDir() + "/hf_st_mean_normalize";
  const std::string dir = PromptedCopy(
      "st_named_prompt",
      R"({"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": "query"})");
  const auto run = EncodedEmbedding;
  const auto near = [](const std::vector<double>& a, const std::vector<double>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::fabs(a[i] - b[i]) > 1e-6) return false;
    return true;
  };
  EXPECT_TRUE(near(run({dir, "--text", "hello world", "--prompt-name", "passage"}),
                   run({plain, "--text", "passage: hello world"})));
  EXPECT_TRUE(near(run({dir, "--text", "hello world", "--prompt-name", "document"}),
                   run({plain, "--text", "hello world"})));
  EXPECT_FALSE(near(run({dir, "--text", "hello world", "--prompt-name", "passage"}),
                    run({dir, "--text", "hello world"})));
  std::ostringstream out, err;
  EXPECT_EQ(RunEncodeCommand({dir, "--text", "hello", "--prompt-name", "nope"}, out, err), 1);
  EXPECT_NE(err.str().find("prompt_name \"nope\" is not a prompt of " + dir +
                           " (its prompts: \"document\", \"passage\", \"query\")"),
            std::string::npos)
      << err.str();
}

// include_prompt false: `encode` leaves the prompt's tokens out of the
// mean (the copy that includes them embeds the same prompted text another
// way), not out of cls, and an empty prompt leaves nothing out.
// (Until 2026-12-06 such a folder was refused at load.)
TEST(SentenceTransformersServingTest, EncodeLeavesThePromptOutWhereThePoolingSaysSo) {
  const std::string config =
      R"({"prompts": {"query": "query: ", "document": ""}, "default_prompt_name": "query"})";
  const std::string with = PromptedCopy("st_prompt_pooled", config);
  const std::string without = PromptedCopy("st_prompt_not_pooled", config);
  std::ofstream(fs::path(without) / "1_Pooling" / "config.json")
      << R"({"word_embedding_dimension": 64, "pooling_mode_mean_tokens": true,
             "include_prompt": false})";
  const auto differ = [](const std::vector<double>& a, const std::vector<double>& b) {
    double d = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d += std::fabs(a[i] - b[i]);
    return a.size() != b.size() || d > 1e-3;
  };
  const auto run = [](const std::string& dir, std::vector<std::string> more) {
    std::vector<std::string> args = {dir, "--text", "hello world"};
    args.insert(args.end(), more.begin(), more.end());
    return EncodedEmbedding(args);
  };
  EXPECT_TRUE(differ(run(without, {}), run(with, {})));
  EXPECT_FALSE(differ(run(without, {"--pooling", "cls"}), run(with, {"--pooling", "cls"})));
  EXPECT_FALSE(differ(run(without, {"--prompt-name", "document"}),
                      run(with, {"--prompt-name", "document"})));
}

// --dimensions keeps the first values of the folder's 32-wide embedding
// (after its Dense and Normalize modules) and, since the folder normalizes,
// makes them unit length again; more than 32 is refused, naming the size.
TEST(SentenceTransformersServingTest, EncodeKeepsTheDimensionsItIsGiven) {
  const std::string dir = testing::ModelsDir() + "/hf_st_dense";
  const std::vector<double> whole = EncodedEmbedding({dir, "--text", "hello world"});
  const std::vector<double> cut =
      EncodedEmbedding({dir, "--text", "hello world", "--dimensions", "8"});
  ASSERT_EQ(whole.size(), 32u);
  ASSERT_EQ(cut.size(), 8u);
  double norm = 0;
  for (int i = 0; i < 8; ++i) norm += whole[i] * whole[i];
  norm = std::sqrt(norm);
  EXPECT_LT(norm, 0.999);  // the prefix of a unit vector is shorter
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(cut[i], whole[i] / norm, 1e-6) << i;
  EXPECT_EQ(EncodedEmbedding({dir, "--text", "hello world", "--dimensions", "32"}), whole);
  std::ostringstream out, err;
  EXPECT_EQ(RunEncodeCommand({dir, "--text", "hello", "--dimensions", "33"}, out, err), 1);
  EXPECT_NE(err.str().find("dimensions 33 is not 0 (the default: 32) or 1 to 32 (the "
                           "max_dimensions of "),
            std::string::npos)
      << err.str();
}

// A folder saved with truncate_dim 8 serves its first 8 values, made unit
// length again since the folder normalizes, as sentence-transformers 5.4+
// loads it; a request may still ask for more, up to the whole 32; a
// truncate_dim past the width cuts nothing. inspect says so.
TEST(SentenceTransformersServingTest, EncodeCutsToTheFoldersTruncateDim) {
  const std::string plain = testing::ModelsDir() + "/hf_st_dense";
  const fs::path dir = fs::temp_directory_path() / "st_truncate_dim";
  fs::remove_all(dir);
  fs::copy(plain, dir, fs::copy_options::recursive);
  std::ofstream(dir / "config_sentence_transformers.json") << R"({"truncate_dim": 8})";
  const std::vector<double> want = EncodedEmbedding({plain, "--text", "hi", "--dimensions", "8"});
  EXPECT_EQ(EncodedEmbedding({dir.string(), "--text", "hi"}), want);
  EXPECT_EQ(EncodedEmbedding({dir.string(), "--text", "hi", "--dimensions", "32"}),
            EncodedEmbedding({plain, "--text", "hi"}));
  std::ostringstream out, err;
  ASSERT_EQ(RunInspectCommand({dir.string()}, out, err), 0) << err.str();
  EXPECT_NE(out.str().find(", cut to the first 8 of 32 values (truncate_dim)"), std::string::npos)
      << out.str();
  std::ofstream(dir / "config_sentence_transformers.json") << R"({"truncate_dim": 32})";
  EXPECT_EQ(EncodedEmbedding({dir.string(), "--text", "hi"}).size(), 32u);
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
