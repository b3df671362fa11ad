// Every fixture model directory loads with the family, hyperparameters and
// canonical weights fx_models.py computed from the PyTorch modules.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>

#include "core/dtype.h"
#include "engine/io/checkpoint_reader.h"
#include "engine/model/hf_config.h"
#include "server/config/model_card_yaml.h"
#include "tests/unit/model_fixtures.h"

namespace encoderd {
namespace {

using testing::FixtureModelNames;
using testing::ModelsDir;

class ModelDirectoryTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return ModelsDir() + "/" + GetParam(); }
  std::string reference() const { return ModelsDir() + "/" + GetParam() + ".reference"; }
};

TEST_P(ModelDirectoryTest, DetectsFamilyAndHyperparameters) {
  auto bundle = server::LoadModelDirectory(dir());
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  const nlohmann::json want = testing::ReadJsonFile(reference() + "/expected.json");
  const EncoderConfig& c = bundle->config;
  EXPECT_EQ(ModelFamilyName(c.family), want["family"].get<std::string>());
  EXPECT_EQ(c.vocab_size, want["vocab_size"].get<int64_t>());
  EXPECT_EQ(c.embedding_size, want.value("embedding_size", int64_t{0}));
  EXPECT_EQ(c.hidden_size, want["hidden_size"].get<int64_t>());
  EXPECT_EQ(c.num_layers, want["num_layers"].get<int64_t>());
  EXPECT_EQ(c.num_heads, want["num_heads"].get<int64_t>());
  EXPECT_EQ(c.intermediate_size, want["intermediate_size"].get<int64_t>());
  EXPECT_EQ(c.max_positions, want["max_positions"].get<int64_t>());
  EXPECT_EQ(c.max_tokens, want["max_tokens"].get<int64_t>());
  EXPECT_EQ(c.type_vocab_size, want["type_vocab_size"].get<int64_t>());
  EXPECT_EQ(c.num_labels, want["num_labels"].get<int64_t>());
  EXPECT_EQ(c.labels, want["labels"].get<std::vector<std::string>>());
  EXPECT_EQ(c.norm_first, want["norm_first"].get<bool>());
  EXPECT_EQ(c.embedding_norm, want["embedding_norm"].get<bool>());
  EXPECT_EQ(c.final_norm, want["final_norm"].get<bool>());
  EXPECT_EQ(ActivationName(c.activation), want["activation"].get<std::string>());
  if (c.num_labels > 0) {
    EXPECT_EQ(ActivationName(c.head_activation), want["head_activation"].get<std::string>());
  }
  EXPECT_FLOAT_EQ(c.layer_norm_eps, want["layer_norm_eps"].get<float>());
  EXPECT_EQ(c.pad_token_id, want["pad_token_id"].get<int64_t>());
  EXPECT_EQ(c.special_tokens.pad, c.pad_token_id);
  EXPECT_EQ(PositionRuleName(c.position_rule), want["position_rule"].get<std::string>());
  EXPECT_EQ(CheckpointFormatName(bundle->checkpoint_format),
            want["checkpoint_format"].get<std::string>());
  EXPECT_EQ(static_cast<int64_t>(bundle->checkpoint_tensors.size()),
            want["num_tensors"].get<int64_t>());
  if (want.contains("placeholder_globals")) {
    EXPECT_EQ(bundle->placeholder_globals,
              want["placeholder_globals"].get<std::vector<std::string>>());
  }
  ASSERT_NE(bundle->tokenizer, nullptr);
  const std::string description = bundle->tokenizer->Describe();
  EXPECT_EQ(description.rfind(want["tokenizer"].get<std::string>(), 0), 0u) << description;
  if (!want["lower_case"].is_null()) {
    const bool uncased = description.find("uncased") != std::string::npos;
    EXPECT_EQ(uncased, want["lower_case"].get<bool>()) << description;
  }
  EXPECT_LE(bundle->tokenizer->vocab_size(), c.vocab_size);
  // sentence-transformers folders: from 1_Pooling/config.json and 2_Normalize.
  if (want.contains("default_pooling")) {
    EXPECT_STREQ(PoolingName(c.default_pooling),
                 want["default_pooling"].get<std::string>().c_str());
    EXPECT_EQ(c.default_normalize, want["default_normalize"].get<bool>());
    EXPECT_EQ(c.pooled_width(), want.value("pooled_width", c.hidden_size));
    EXPECT_FALSE(bundle->sentence_transformers_modules.empty());
  } else {
    EXPECT_FALSE(c.default_normalize);
    EXPECT_TRUE(bundle->sentence_transformers_modules.empty());
  }
  if (want.contains("head_output")) {
    EXPECT_STREQ(HeadOutputName(c.head_output()), want["head_output"].get<std::string>().c_str());
  }
  EXPECT_TRUE(c.Validate().ok());
}

TEST_P(ModelDirectoryTest, CanonicalWeightsAreTheCheckpointTensorsBitForBit) {
  auto bundle = server::LoadModelDirectory(dir());
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  const TensorMap want = testing::ReadTensorDump(reference() + "/canonical");
  ASSERT_FALSE(want.empty());
  std::set<std::string> want_names, got_names;
  for (const auto& [name, t] : want) want_names.insert(name);
  for (const auto& [name, t] : bundle->weights) got_names.insert(name);
  EXPECT_EQ(got_names, want_names);
  for (const auto& [name, expected] : want) {
    auto it = bundle->weights.find(name);
    if (it == bundle->weights.end()) continue;
    EXPECT_TRUE(it->second.To(DType::kFloat32).BitEqual(expected))
        << name << ": got " << it->second.Describe() << ", want " << expected.Describe();
  }
}

// Only q/k/v stored separately are copied; everything else is a view of a
// checkpoint tensor.
TEST_P(ModelDirectoryTest, WeightsShareCheckpointStorage) {
  auto bundle = server::LoadModelDirectory(dir());
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  std::set<const std::byte*> checkpoint_data;
  for (const auto& [name, t] : bundle->checkpoint_tensors) checkpoint_data.insert(t.raw_data());
  // Hugging Face and fairseq from 0.9 store q, k and v as three Linears,
  // which loading stacks into one copy.
  const bool separate_qkv =
      GetParam().rfind("hf_", 0) == 0 ||
      (GetParam().rfind("fairseq_", 0) == 0 && GetParam() != "fairseq_xlmr_legacy");
  for (const auto& [name, t] : bundle->weights) {
    const bool copied = separate_qkv && name.find("attention.qkv") != std::string::npos;
    EXPECT_EQ(checkpoint_data.count(t.raw_data()) == 0, copied) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelDirectoryTest, ::testing::ValuesIn(FixtureModelNames()));

// The bucket of every relative position, as transformers' MPNet computes it
// in PyTorch (tests/fixtures/fx_models.py): the log-scaled buckets'
// boundaries (distance 64 is bucket 14 there only if each step is float32).
TEST(RelativePositionBucketTest, MatchesTransformersMpnetAtEveryDistance) {
  const nlohmann::json want =
      testing::ReadJsonFile(ModelsDir() + "/hf_mpnet_base.reference/relative_buckets.json");
  const auto relative = want["relative"].get<std::vector<int64_t>>();
  const auto bucket = want["bucket"].get<std::vector<int64_t>>();
  ASSERT_EQ(relative.size(), bucket.size());
  ASSERT_GT(relative.size(), 1000u);
  for (size_t i = 0; i < relative.size(); ++i)
    EXPECT_EQ(RelativePositionBucket(relative[i], 32, 128), bucket[i]) << relative[i];
}

// The relative embeddings' row of every relative position, as
// transformers' DeBERTa-v2 computes it in PyTorch (fx_models.py's
// deberta_columns): 256 log buckets reaching 512 (DeBERTa-v3's; the exact
// tie at 511 decides row 1 against 0), and 8 reaching 64 (most rows clamped),
// each read through the fixture's own config.
TEST(DisentangledColumnTest, MatchesTransformersDebertaAtEveryDistance) {
  for (const char* name : {"hf_deberta_classifier", "hf_deberta_base"}) {
    SCOPED_TRACE(name);
    const nlohmann::json want =
        testing::ReadJsonFile(ModelsDir() + "/" + name + ".reference/relative_columns.json");
    auto bundle = server::LoadModelDirectory(ModelsDir() + "/" + name);
    ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
    const EncoderConfig& c = bundle->config;
    EXPECT_EQ(c.attention_span, want["span"].get<int64_t>());
    EXPECT_EQ(c.position_buckets, want["buckets"].get<int64_t>());
    EXPECT_EQ(c.max_relative_positions, want["max_relative"].get<int64_t>());
    EXPECT_TRUE(c.content_to_position && c.position_to_content);
    const auto relative = want["relative"].get<std::vector<int64_t>>();
    const auto column = want["column"].get<std::vector<int64_t>>();
    ASSERT_EQ(relative.size(), column.size());
    ASSERT_GT(relative.size(), 1000u);
    for (size_t i = 0; i < relative.size(); ++i)
      EXPECT_EQ(DisentangledColumn(relative[i], c), column[i]) << relative[i];
  }
}

// A DeBERTa checkpoint may carry a position table that position_biased_input
// false leaves unread (transformers ignores it): loaded without it, the
// same model as the folder it was copied from (until 2026-12-05 refused).
TEST(DebertaFolderTest, IgnoresAPositionTableTheConfigDoesNotRead) {
  auto stray = server::LoadModelDirectory(ModelsDir() + "/hf_deberta_stray_positions");
  ASSERT_TRUE(stray.ok()) << stray.status().ToString();
  auto base = server::LoadModelDirectory(ModelsDir() + "/hf_deberta_base");
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  EXPECT_EQ(stray->config.position_rule, PositionRule::kNone);
  EXPECT_EQ(stray->config.max_positions, 0);
  EXPECT_EQ(stray->weights.count("embeddings.position"), 0u);
  EXPECT_EQ(stray->weights.size(), base->weights.size());
  EXPECT_EQ(stray->config.max_tokens, base->config.max_tokens);
}

// A DeBERTa spm.model named by a card without ids of its own is read as a
// folder's is: the model's ids, [CLS] and [SEP] (until 2026-12-05 fairseq's
// offset 1 and <s>/</s>); a card's id_offset still decides where it is given.
TEST(DebertaFolderTest, ACardNamingTheSpmModelGetsTheModelsIds) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "deberta_card_spm";
  fs::remove_all(dir);
  fs::copy(ModelsDir() + "/hf_deberta_base", dir, fs::copy_options::recursive);
  std::ofstream(dir / "encoderd.yaml") << "tokenizer:\n  type: sentencepiece\n  file: spm.model\n";
  auto named = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  auto found = server::LoadModelDirectory(ModelsDir() + "/hf_deberta_base");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  ASSERT_NE(named->tokenizer, nullptr);
  for (const char* text : {"the quick brown fox", "  odd   spaces "}) {
    auto a = named->tokenizer->Encode(text, 64, false);
    auto b = found->tokenizer->Encode(text, 64, false);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->ids, b->ids) << text;
    EXPECT_EQ(a->ids.front(), 1);
    EXPECT_EQ(a->ids.back(), 2);
  }
  std::ofstream(dir / "encoderd.yaml")
      << "tokenizer:\n  type: sentencepiece\n  file: spm.model\n  id_offset: 1\n";
  auto offset = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(offset.ok()) << offset.status().ToString();
  EXPECT_EQ(offset->tokenizer->Encode("the fox", 64, false)->ids.front(), 0);
}

struct BadCase {
  const char* dir;
  StatusCode code;
  std::vector<const char*> mentions;  // file and key the message must name
};

class ModelDirectoryErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ModelDirectoryErrorTest, NamesFileAndKey) {
  const BadCase& bad = GetParam();
  auto bundle = server::LoadModelDirectory(ModelsDir() + "/bad/" + bad.dir);
  ASSERT_FALSE(bundle.ok());
  EXPECT_EQ(bundle.status().code(), bad.code) << bundle.status().ToString();
  for (const char* text : bad.mentions) {
    EXPECT_NE(bundle.status().message().find(text), std::string::npos)
        << "'" << text << "' not in: " << bundle.status().message();
  }
  // fairseq's pickled args or cfg became placeholders, but none stood in
  // for a tensor: no error of theirs blames them.
  if (std::string(bad.dir).rfind("fairseq_", 0) == 0) {
    EXPECT_EQ(bundle.status().message().find("globals the loader does not run"), std::string::npos)
        << bundle.status().message();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, ModelDirectoryErrorTest,
    ::testing::Values(
        BadCase{"missing_key",
                StatusCode::kNotFound,
                {"missing_key/model.safetensors", "'encoder.layer.1.output.dense.weight'"}},
        BadCase{"wrong_shape",
                StatusCode::kInvalidArgument,
                {"wrong_shape/model.safetensors", "'encoder.layer.0.intermediate.dense.weight'",
                 "[128, 65]"}},
        BadCase{"unknown_problem_type",
                StatusCode::kInvalidArgument,
                {"unknown_problem_type/config.json", "problem_type \"ranking\""}},
        BadCase{"bad_head_count",
                StatusCode::kInvalidArgument,
                {"bad_head_count/config.json", "num_attention_heads = 5", "hidden_size 64"}},
        BadCase{"config_mismatch",
                StatusCode::kInvalidArgument,
                {"config_mismatch/config.json", "hidden_size = 32", "model.safetensors", "64"}},
        BadCase{"unknown_model_type",
                StatusCode::kInvalidArgument,
                {"unknown_model_type/config.json", "model_type", "gpt2"}},
        BadCase{"missing_config", StatusCode::kNotFound, {"missing_config", "config.json"}},
        BadCase{"bad_card_key",
                StatusCode::kInvalidArgument,
                {"bad_card_key/encoderd.yaml:12", "num_head", "not a known key"}},
        BadCase{"fairseq_two_heads",
                StatusCode::kInvalidArgument,
                {"fairseq_two_heads/model.pt", "2 classification heads (nli, sentiment)"}},
        BadCase{
            "fairseq_segments",
            StatusCode::kInvalidArgument,
            {"fairseq_segments/model.pt", "'decoder.sentence_encoder.segment_embeddings.weight'"}},
        BadCase{"fairseq_encoder_and_decoder",
                StatusCode::kInvalidArgument,
                {"fairseq_encoder_and_decoder/model.pt", "both encoder.sentence_encoder.*"}},
        BadCase{"fairseq_norm_first",
                StatusCode::kInvalidArgument,
                {"fairseq_norm_first/encoderd.yaml", "norm_first = true contradicts",
                 "fairseq_norm_first/model.pt", "has no final layer_norm"}},
        BadCase{
            "fairseq_gelu_accurate",
            StatusCode::kInvalidArgument,
            {"fairseq_gelu_accurate/model.pt", "activation_fn \"gelu_accurate\"", "not supported"}},
        BadCase{"fairseq_relu_card_gelu",
                StatusCode::kInvalidArgument,
                {"fairseq_relu_card_gelu/encoderd.yaml", "activation = gelu contradicts",
                 "activation_fn = relu", "fairseq_relu_card_gelu/model.pt"}},
        BadCase{"fairseq_relu_card_tanh",
                StatusCode::kInvalidArgument,
                {"fairseq_relu_card_tanh/encoderd.yaml", "head_activation = tanh contradicts",
                 "pooler_activation_fn = relu"}},
        BadCase{"mpnet_64_buckets",
                StatusCode::kInvalidArgument,
                {"mpnet_64_buckets/pytorch_model.bin", "encoder.relative_attention_bias.weight",
                 "64 rows", "into 32"}},
        BadCase{"mpnet_bucket_mismatch",
                StatusCode::kInvalidArgument,
                {"mpnet_bucket_mismatch/config.json", "relative_attention_num_buckets = 16", "32"}},
        BadCase{"mpnet_pad_2",
                StatusCode::kInvalidArgument,
                {"mpnet_pad_2/config.json", "pad_token_id = 2", "padding index 1"}},
        BadCase{"deberta_separate_projections",
                StatusCode::kInvalidArgument,
                {"deberta_separate_projections/config.json", "share_att_key is not true"}},
        BadCase{"deberta_span_mismatch",
                StatusCode::kInvalidArgument,
                {"deberta_span_mismatch/config.json", "position_buckets", "span of 16",
                 "pytorch_model.bin", "16 rows"}},
        BadCase{"deberta_p2p",
                StatusCode::kInvalidArgument,
                {"deberta_p2p/config.json", "pos_att_type has \"p2p\""}},
        BadCase{"deberta_conv",
                StatusCode::kInvalidArgument,
                {"deberta_conv/config.json", "conv_kernel_size = 3"}},
        BadCase{"deberta_unnamed_norm",
                StatusCode::kInvalidArgument,
                {"deberta_unnamed_norm/config.json", "norm_rel_ebd does not name layer_norm",
                 "encoder.LayerNorm"}},
        BadCase{"deberta_no_relative",
                StatusCode::kInvalidArgument,
                {"deberta_no_relative/config.json", "relative_attention is not true",
                 "encoder.rel_embeddings"}},
        BadCase{"deberta_terms_without_relative",
                StatusCode::kInvalidArgument,
                {"deberta_terms_without_relative/config.json",
                 "pos_att_type names terms but relative_attention is not true"}}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return std::string(info.param.dir); });

// A copy of the fixture folder `fixture` at TempDir()/`name` (replacing one
// there), and its config.json.
std::pair<std::filesystem::path, nlohmann::json> CopiedFixture(const std::string& fixture,
                                                               const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  fs::copy(ModelsDir() + "/" + fixture, dir, fs::copy_options::recursive);
  std::ifstream in(dir / "config.json");
  return {dir, nlohmann::json::parse(in)};
}

// A CrossEncoder saved by sentence-transformers 5.4 or later (modules.json
// of one Transformer, its activation in config_sentence_transformers.json,
// which comes before config.json's keys) loads and scores with that
// activation; until 2026-12-04 the folder was refused for want of a Pooling
// module. A folder that says CrossEncoder over a checkpoint without a
// classifier is refused, not served as an embedding model.
TEST(ModelDirectoryTest, ACrossEncoderOfSentenceTransformers54Loads) {
  namespace fs = std::filesystem;
  const auto copied = CopiedFixture("hf_bert_cross_encoder", "cross_encoder_st54");
  const fs::path& dir = copied.first;
  nlohmann::json config = copied.second;
  // config.json as 4.x-5.3 left it: its key says Sigmoid.
  config["sentence_transformers"] = {{"activation_fn", "torch.nn.modules.activation.Sigmoid"}};
  std::ofstream(dir / "config.json") << config.dump();
  std::ofstream(dir / "modules.json") << R"([{"idx": 0, "name": "0", "path": "",
              "type": "sentence_transformers.base.modules.transformer.Transformer"}])";
  std::ofstream(dir / "sentence_bert_config.json")
      << R"({"transformer_task": "sequence-classification", "module_output_name": "scores"})";
  const auto load = [&dir](const std::string& activation_fn) {
    std::ofstream(dir / "config_sentence_transformers.json")
        << R"({"model_type": "CrossEncoder", "prompts": {"query": "", "document": ""},
               "default_prompt_name": null, "activation_fn": )"
        << activation_fn << "}";
    return server::LoadModelDirectory(dir.string());
  };
  auto bundle = load(R"("torch.nn.modules.linear.Identity")");
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  EXPECT_EQ(bundle->config.num_labels, 1);
  EXPECT_STREQ(HeadOutputName(bundle->config.head_output()), "logits");
  ASSERT_EQ(bundle->sentence_transformers_modules.size(), 1u);
  EXPECT_TRUE(bundle->config.serves_rerank(bundle->tokenizer != nullptr));
  bundle = load("null");  // config.json's key decides
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  EXPECT_STREQ(HeadOutputName(bundle->config.head_output()), "sigmoid");
  bundle = load(R"("torch.nn.modules.activation.Tanh")");
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  EXPECT_STREQ(HeadOutputName(bundle->config.head_output()), "tanh");
  bundle = load(R"("torch.nn.modules.activation.Softmax")");
  ASSERT_FALSE(bundle.ok());
  EXPECT_NE(bundle.status().message().find(
                "config_sentence_transformers.json: activation_fn "
                "\"torch.nn.modules.activation.Softmax\" is not one that encoderd applies"),
            std::string::npos)
      << bundle.status().message();
  // The tokenizer's model_max_length bounds the sequence (as
  // sentence-transformers' Transformer takes it).
  std::ofstream(dir / "tokenizer_config.json") << R"({"do_lower_case": true,
                                                       "model_max_length": 24})";
  bundle = load("null");
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  EXPECT_EQ(bundle->config.max_tokens, 24);

  // CrossEncoder's own default, not the pipeline's: the sigmoid of one
  // output even where config.json says regression ...
  config.erase("sentence_transformers");
  config["problem_type"] = "regression";
  std::ofstream(dir / "config.json") << config.dump();
  bundle = load("null");
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  EXPECT_STREQ(HeadOutputName(bundle->config.head_output()), "sigmoid");
  // ... and for a head of more outputs, their raw logits (the pipeline's
  // softmax in a plain folder), or the activation named, on each.
  const auto multi = CopiedFixture("hf_bert_legacy", "cross_encoder_st54_labels");
  for (const char* name : {"modules.json", "sentence_bert_config.json"})
    fs::copy_file(dir / name, multi.first / name, fs::copy_options::overwrite_existing);
  for (const auto& [activation, scores] :
       {std::pair<std::string, std::string>{"null", "logits"},
        {R"("torch.nn.modules.activation.Sigmoid")", "sigmoid"}}) {
    std::ofstream(multi.first / "config_sentence_transformers.json")
        << R"({"model_type": "CrossEncoder", "activation_fn": )" << activation << "}";
    auto labels = server::LoadModelDirectory(multi.first.string());
    ASSERT_TRUE(labels.ok()) << labels.status().ToString();
    ASSERT_GT(labels->config.num_labels, 1);
    EXPECT_EQ(HeadOutputName(labels->config.head_output()), scores) << activation;
  }

  // The same files over an embedding model's checkpoint.
  const auto embedder = CopiedFixture("hf_roberta_safetensors", "cross_encoder_st54_no_head");
  for (const char* name :
       {"modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"})
    fs::copy_file(dir / name, embedder.first / name, fs::copy_options::overwrite_existing);
  bundle = server::LoadModelDirectory(embedder.first.string());
  ASSERT_FALSE(bundle.ok());
  EXPECT_EQ(bundle.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bundle.status().message().find("has no sequence classifier to score with"),
            std::string::npos)
      << bundle.status().message();
}

// config.json's architectures says what the checkpoint's classifier is.
// Until 2026-12-04 it was not read: a BertForTokenClassification or
// BertForMultipleChoice with its pooler was served as a sequence classifier
// (one label per text from a per-token head), and without the pooler it was
// refused for a missing pooler; a RoBERTa token classifier's head was
// dropped without a word. Now a classifier whose architectures names
// another task's head is left out, saying why.
TEST(ModelDirectoryTest, AnotherTasksHeadIsNotServed) {
  namespace fs = std::filesystem;
  for (const char* fixture : {"hf_bert_legacy", "hf_xlmr_regression"}) {
    SCOPED_TRACE(fixture);
    auto [dir, config] = CopiedFixture(fixture, std::string("arch_") + fixture);
    const std::string type = config["architectures"][0].get<std::string>();
    const std::string base = type.substr(0, type.find("For"));
    for (const std::string& arch :
         {base + "ForSequenceClassification", std::string(), base + "ForTokenClassification",
          base + "ForMultipleChoice", base + "Model"}) {
      SCOPED_TRACE(arch.empty() ? "no architectures" : arch);
      if (arch.empty()) {
        config.erase("architectures");
      } else {
        config["architectures"] = {arch};
      }
      std::ofstream(dir / "config.json") << config.dump();
      auto bundle = server::LoadModelDirectory(dir.string());
      ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
      // A base class's name (a classifier saved with its base model's
      // config) still serves the head, as AutoModelForSequenceClassification
      // would load it.
      const bool served =
          arch.empty() || arch == base + "ForSequenceClassification" || arch == base + "Model";
      EXPECT_EQ(bundle->config.num_labels > 0, served);
      EXPECT_EQ(bundle->head_note.empty(), served) << bundle->head_note;
      if (!served) {
        EXPECT_NE(bundle->head_note.find("architectures names " + arch), std::string::npos)
            << bundle->head_note;
      }
    }
  }
}

// A cross-encoder's scores follow the activation its config.json names for
// sentence-transformers' CrossEncoder (the ms-marco models name Identity:
// raw logits); until 2026-12-04 every one-output head got a sigmoid.
TEST(ModelDirectoryTest, ACrossEncodersNamedActivationSetsItsScores) {
  // Named, not bound: a lambda may not capture a structured binding in C++17.
  const auto copied = CopiedFixture("hf_bert_cross_encoder", "cross_encoder_activation");
  const std::filesystem::path& dir = copied.first;
  const nlohmann::json& original = copied.second;
  const auto load = [&](const nlohmann::json& extra) {
    nlohmann::json config = original;
    config.update(extra);
    std::ofstream(dir / "config.json") << config.dump();
    return server::LoadModelDirectory(dir.string());
  };
  const std::string identity = "torch.nn.modules.linear.Identity";
  const std::string sigmoid = "torch.nn.modules.activation.Sigmoid";
  const std::string tanh = "torch.nn.modules.activation.Tanh";
  const struct {
    nlohmann::json extra;
    const char* scores;
  } cases[] = {
      {nlohmann::json::object(), "sigmoid"},
      {{{"sbert_ce_default_activation_function", nullptr}}, "sigmoid"},
      {{{"sbert_ce_default_activation_function", identity}}, "logits"},
      {{{"sbert_ce_default_activation_function", sigmoid}}, "sigmoid"},
      {{{"sbert_ce_default_activation_function", tanh}}, "tanh"},
      // sentence-transformers 4's key comes first.
      {{{"sentence_transformers", {{"activation_fn", identity}, {"version", "4.0.1"}}},
        {"sbert_ce_default_activation_function", sigmoid}},
       "logits"},
      {{{"sentence_transformers", {{"version", "4.0.1"}}},
        {"sbert_ce_default_activation_function", identity}},
       "logits"},
      {{{"sentence_transformers", {{"activation_fn", sigmoid}}}}, "sigmoid"},
      // Where the newer key is there, null, the older one is not read.
      {{{"sentence_transformers", {{"activation_fn", nullptr}}},
        {"sbert_ce_default_activation_function", identity}},
       "sigmoid"},
      // Any name sentence-transformers imports for the same class.
      {{{"sbert_ce_default_activation_function", "torch.nn.Identity"}}, "logits"},
      {{{"sbert_ce_default_activation_function", "torch.nn.Tanh"}}, "tanh"},
      // A regression head named Identity anyway.
      {{{"problem_type", "regression"}, {"sbert_ce_default_activation_function", identity}},
       "logits"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.extra.dump());
    auto bundle = load(c.extra);
    ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
    ASSERT_EQ(bundle->config.num_labels, 1);
    EXPECT_STREQ(HeadOutputName(bundle->config.head_output()), c.scores);
  }
  for (const auto& [extra, says] :
       {std::pair<nlohmann::json, std::string>{
            {{"sbert_ce_default_activation_function", "torch.nn.modules.activation.Softmax"}},
            "sbert_ce_default_activation_function \"torch.nn.modules.activation.Softmax\" is not "
            "one that encoderd applies"},
        {{{"sentence_transformers", {{"activation_fn", "my_module.Scale"}}}},
         "sentence_transformers.activation_fn \"my_module.Scale\" is not one"},
        {{{"sbert_ce_default_activation_function", "my_module.Identity"}},
         "sbert_ce_default_activation_function \"my_module.Identity\" is not one"},
        {{{"sbert_ce_default_activation_function", 1}},
         "sbert_ce_default_activation_function must be a string"}}) {
    auto bundle = load(extra);
    ASSERT_FALSE(bundle.ok()) << extra.dump();
    EXPECT_EQ(bundle.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bundle.status().message().find(says), std::string::npos) << bundle.status().message();
  }
  // A head of more outputs keeps the pipeline's softmax whatever the key says.
  auto [multi, multi_config] = CopiedFixture("hf_bert_legacy", "classifier_activation");
  multi_config["sbert_ce_default_activation_function"] = identity;
  std::ofstream(multi / "config.json") << multi_config.dump();
  auto classifier = server::LoadModelDirectory(multi.string());
  ASSERT_TRUE(classifier.ok()) << classifier.status().ToString();
  ASSERT_GT(classifier->config.num_labels, 1);
  EXPECT_STREQ(HeadOutputName(classifier->config.head_output()), "softmax");
}

// transformers' DistilBERT builds its LayerNorms with eps 1e-12 and never
// reads config.json's layer_norm_eps; encoderd read it (until 2026-12-04).
TEST(ModelDirectoryTest, DistilbertKeepsItsLayerNormEps) {
  auto [dir, config] = CopiedFixture("hf_distilbert_base", "distilbert_eps");
  config["layer_norm_eps"] = 1e-5;
  std::ofstream(dir / "config.json") << config.dump();
  auto bundle = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  EXPECT_FLOAT_EQ(bundle->config.layer_norm_eps, 1e-12f);
}

// A card fills in what config.json leaves out and may not contradict what
// it says: until 2026-12-04 a card's activation or layer_norm_eps replaced
// config.json's without a word (as num_heads never could); until 2026-12-07
// its norm_first ran the family's layers in the other order.
TEST(ModelDirectoryTest, ACardContradictingConfigJsonIsAnError) {
  const std::filesystem::path dir = CopiedFixture("hf_bert_legacy", "card_vs_config").first;
  const auto load = [&](const std::string& card) {
    std::ofstream(dir / "encoderd.yaml") << card;
    return server::LoadModelDirectory(dir.string());
  };
  for (const auto& [card, says] :
       {std::pair<std::string, std::string>{"activation: relu\n",
                                            "activation = relu contradicts config.json hidden_act"},
        {"layer_norm_eps: 1.0e-5\n",
         "layer_norm_eps = 1e-05 contradicts config.json layer_norm_eps = 1e-12"},
        {"norm_first: true\n",
         "norm_first = true contradicts family bert, whose layers are post-norm"}}) {
    auto bundle = load(card);
    ASSERT_FALSE(bundle.ok()) << card;
    EXPECT_EQ(bundle.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bundle.status().message().find(says), std::string::npos) << bundle.status().message();
  }
  auto agreeing = load("activation: gelu\nlayer_norm_eps: 1.0e-12\nnorm_first: false\n");
  EXPECT_TRUE(agreeing.ok()) << agreeing.status().ToString();
  const std::filesystem::path pre =
      CopiedFixture("hf_roberta_prelayernorm", "card_vs_prelayernorm").first;
  std::ofstream(pre / "encoderd.yaml") << "norm_first: false\n";
  auto post = server::LoadModelDirectory(pre.string());
  ASSERT_FALSE(post.ok());
  EXPECT_NE(post.status().message().find(
                "norm_first = false contradicts family roberta-prelayernorm, whose layers are "
                "pre-norm"),
            std::string::npos)
      << post.status().message();
  std::ofstream(pre / "encoderd.yaml") << "norm_first: true\n";
  auto agrees = server::LoadModelDirectory(pre.string());
  EXPECT_TRUE(agrees.ok()) << agrees.status().ToString();
}

// A fairseq checkpoint's args record the layers' and the head's activation
// (activation_fn, pooler_activation_fn); until 2026-12-04 encoderd ran gelu
// and tanh whatever they said.
TEST(ModelDirectoryTest, FairseqArgsSetTheActivations) {
  auto recorded = server::LoadModelDirectory(ModelsDir() + "/fairseq_xlmr_relu_args");
  ASSERT_TRUE(recorded.ok()) << recorded.status().ToString();
  EXPECT_EQ(recorded->config.activation, Activation::kRelu);
  EXPECT_EQ(recorded->config.head_activation, Activation::kRelu);
  auto defaults = server::LoadModelDirectory(ModelsDir() + "/fairseq_xlmr_legacy");
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->config.activation, Activation::kGelu);
  EXPECT_EQ(defaults->config.head_activation, Activation::kTanh);
}

// A config.json of a million nested brackets: nlohmann's dump() recursed
// once per level when the error message showed the value, and overflowed
// the stack. Refused before it is parsed, naming the file.
TEST(ModelDirectoryJsonTest, DeeplyNestedConfigIsRefused) {
  const std::filesystem::path path =
      std::filesystem::path(::testing::TempDir()) / "deep_config.json";
  {
    std::ofstream out(path);
    out << R"({"model_type": "bert", "vocab_size": )" << std::string(1000000, '[')
        << std::string(1000000, ']') << "}";
  }
  auto config = ReadHfConfig(path.string());
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find(path.string()), std::string::npos)
      << config.status().message();
  EXPECT_NE(config.status().message().find("nests deeper than 64 levels"), std::string::npos)
      << config.status().message();
}

// tokenizer_config.json beside a vocab.txt: strip_accents was read past
// (lower_case always stripped accents too), and tokenize_chinese_chars
// false and BertJapaneseTokenizer, which split words otherwise, were
// tokenized as BERT's. strip_accents is honoured now; the other two leave
// the folder without a tokenizer (token ids only), saying why.
TEST(ModelDirectoryTokenizerTest, TokenizerConfigBesideAVocabulary) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "bert_tokenizer_config";
  fs::remove_all(dir);
  fs::copy(ModelsDir() + "/hf_bert_legacy", dir);
  const auto load = [&](const std::string& tokenizer_config) {
    std::ofstream(dir / "tokenizer_config.json") << tokenizer_config;
    return server::LoadModelDirectory(dir.string());
  };
  const auto ids = [](const ModelBundle& bundle, const std::string& text) {
    auto e = bundle.tokenizer->Encode(text, 64, false);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? e->ids : std::vector<int32_t>{};
  };
  auto stripped = load(R"({"do_lower_case": true})");
  ASSERT_TRUE(stripped.ok()) << stripped.status().ToString();
  EXPECT_EQ(ids(*stripped, "Caf\xc3\xa9"), ids(*stripped, "cafe"));
  auto kept = load(R"({"do_lower_case": true, "strip_accents": false})");
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_NE(ids(*kept, "Caf\xc3\xa9"), ids(*kept, "cafe"));
  EXPECT_EQ(ids(*kept, "CAFE"), ids(*kept, "cafe"));
  EXPECT_NE(kept->tokenizer->Describe().find("uncased, accents kept"), std::string::npos)
      << kept->tokenizer->Describe();
  for (const char* config : {R"({"tokenize_chinese_chars": false})",
                             R"({"tokenizer_class": "BertJapaneseTokenizer"})"}) {
    auto none = load(config);
    ASSERT_TRUE(none.ok()) << none.status().ToString();
    EXPECT_EQ(none->tokenizer, nullptr) << config;
    EXPECT_NE(none->tokenizer_note.find("is not supported"), std::string::npos)
        << none->tokenizer_note;
  }
}

// The added tokens a folder declares beside its vocab.txt
// (tokenizer_config.json's added_tokens_decoder, or the older
// added_tokens.json) were read past: a text that wrote one was tokenized as
// text, where AutoTokenizer's fast class gives the token its id. They are
// matched now where encoderd matches them as the library does; otherwise
// the folder takes token ids only, saying why.
TEST(ModelDirectoryTokenizerTest, DeclaredAddedTokensBesideAVocabulary) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "bert_added_tokens";
  fs::remove_all(dir);
  fs::copy(ModelsDir() + "/hf_bert_legacy", dir);
  {
    // 930 tokens in vocab.txt, 932 rows in the embedding: room for two.
    std::ifstream in(dir / "vocab.txt");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    ASSERT_EQ(lines.size(), 932u);
    std::ofstream out(dir / "vocab.txt");
    for (size_t i = 0; i < 930; ++i) out << lines[i] << "\n";
  }
  const auto load = [&](const std::string& tokenizer_config, const std::string& added_tokens,
                        const std::string& special_tokens_map) {
    std::ofstream(dir / "tokenizer_config.json") << tokenizer_config;
    fs::remove(dir / "added_tokens.json");
    fs::remove(dir / "special_tokens_map.json");
    if (!added_tokens.empty()) std::ofstream(dir / "added_tokens.json") << added_tokens;
    if (!special_tokens_map.empty()) {
      std::ofstream(dir / "special_tokens_map.json") << special_tokens_map;
    }
    return server::LoadModelDirectory(dir.string());
  };
  const auto ids = [](const ModelBundle& bundle, const std::string& text) {
    auto e = bundle.tokenizer->Encode(text, 64, false);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? e->ids : std::vector<int32_t>{};
  };
  // The ids of "see", then `tokens`, then "now", between [CLS] and [SEP].
  const auto around = [&](const ModelBundle& bundle, std::vector<int32_t> tokens) {
    std::vector<int32_t> see = ids(bundle, "see"), now = ids(bundle, "now");
    std::vector<int32_t> out(see.begin(), see.end() - 1);
    out.insert(out.end(), tokens.begin(), tokens.end());
    out.insert(out.end(), now.begin() + 1, now.end());
    return out;
  };
  const std::string decoder = R"({"do_lower_case": true, "added_tokens_decoder": {
      "0": {"content": "[PAD]", "lstrip": false, "normalized": false, "rstrip": false,
            "single_word": false, "special": true},
      "930": {"content": "<Domain>", "lstrip": false, "normalized": false, "rstrip": false,
              "single_word": false, "special": false},
      "931": {"content": "[E1]", "lstrip": false, "normalized": false, "rstrip": true,
              "single_word": false, "special": true}}})";
  auto matched = load(decoder, "", "");
  ASSERT_TRUE(matched.ok()) << matched.status().ToString();
  ASSERT_NE(matched->tokenizer, nullptr) << matched->tokenizer_note;
  EXPECT_EQ(matched->tokenizer->vocab_size(), 932);
  EXPECT_EQ(ids(*matched, "see<Domain>[E1]  now"), around(*matched, {930, 931}));
  EXPECT_EQ(ids(*matched, "see [SEP] now"),
            around(*matched, {matched->tokenizer->special_tokens().eos}));
  // Not normalized: matched as written only.
  EXPECT_EQ(ids(*matched, "<domain>"), ids(*matched, "< domain >"));
  EXPECT_NE(matched->tokenizer->Describe().find("6 special and 1 other added token"),
            std::string::npos)
      << matched->tokenizer->Describe();

  // added_tokens.json: special where special_tokens_map.json says so.
  const std::string legacy = R"({"[E1]": 930, "[E2]": 931})";
  auto special =
      load(R"({"do_lower_case": true})", legacy,
           R"({"cls_token": "[CLS]", "additional_special_tokens": ["[E1]", {"content": "[E2]"}]})");
  ASSERT_TRUE(special.ok()) << special.status().ToString();
  ASSERT_NE(special->tokenizer, nullptr) << special->tokenizer_note;
  EXPECT_EQ(ids(*special, "see[E2] [E1]now"), around(*special, {931, 930}));

  // Not special there: normalized, matched in the normalized (lower-cased)
  // text.
  auto normalized = load(R"({"do_lower_case": true})", legacy, "");
  ASSERT_TRUE(normalized.ok()) << normalized.status().ToString();
  ASSERT_NE(normalized->tokenizer, nullptr) << normalized->tokenizer_note;
  EXPECT_EQ(ids(*normalized, "see[e2] [E1]now"), around(*normalized, {931, 930}));

  // An additional special token of the vocabulary that no list adds.
  auto additional =
      load(R"({"do_lower_case": true, "additional_special_tokens": ["##zza"]})", "", "");
  ASSERT_TRUE(additional.ok()) << additional.status().ToString();
  ASSERT_NE(additional->tokenizer, nullptr) << additional->tokenizer_note;
  EXPECT_EQ(ids(*additional, "see##zzanow"), around(*additional, {929}));

  // Otherwise token ids only, naming the token and the file.
  for (
      const auto& [config, says] :
      {std::pair<std::string, std::string>{
           R"({"added_tokens_decoder": {"931": {"content": "[E1]", "special": true, "normalized": false}}})",
           R"(added token "[E1]" has id 931, where the tokenizers library numbers it 930)"},
       {R"({"added_tokens_decoder": {"930": {"content": "[E1]", "special": true, "single_word": true}}})",
        R"(added token "[E1]" is single_word)"},
       {R"({"added_tokens_decoder": {
                "930": {"content": "[E1]", "special": true}, "931": {"content": "[E2]", "special": true},
                "932": {"content": "[E3]", "special": true}}})",
        R"(added token "[E3]" has id 932, past the model's token embedding of 932 rows)"}}) {
    auto none = load(config, "", "");
    ASSERT_TRUE(none.ok()) << none.status().ToString();
    EXPECT_EQ(none->tokenizer, nullptr) << config;
    EXPECT_NE(none->tokenizer_note.find(says), std::string::npos) << none->tokenizer_note;
    EXPECT_NE(none->tokenizer_note.find("(the added tokens of tokenizer_config.json)"),
              std::string::npos)
        << none->tokenizer_note;
  }
  // A damaged entry names the file and the entry.
  auto damaged = load(R"({"added_tokens_decoder": {"x": {"content": "[E1]"}}})", "", "");
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(
      damaged.status().message().find("added_tokens_decoder[\"x\"]: the key is not a token id"),
      std::string::npos)
      << damaged.status().message();
}

// Beside a sentencepiece.bpe.model, tokenizer_config.json's
// added_tokens_decoder lists XLM-R's own specials, which load as before; a
// token other than those is not reproduced there, and the folder takes
// token ids only, saying so.
TEST(ModelDirectoryTokenizerTest, DeclaredAddedTokensBesideASentencepieceModel) {
  const auto [dir, config] = CopiedFixture("hf_xlmr_regression", "xlmr_added_tokens");
  const auto load = [&dir = dir](const std::string& extra) {
    std::ofstream(dir / "tokenizer_config.json") << R"({"added_tokens_decoder": {
        "0": {"content": "<s>", "special": true, "normalized": false},
        "1": {"content": "<pad>", "special": true, "normalized": false},
        "2": {"content": "</s>", "special": true, "normalized": false},
        "3": {"content": "<unk>", "special": true, "normalized": false},
        "1001": {"content": "<mask>", "special": true, "lstrip": true, "normalized": false})"
                                                 << extra << "}}";
    return server::LoadModelDirectory(dir.string());
  };
  auto own = load("");
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  ASSERT_NE(own->tokenizer, nullptr) << own->tokenizer_note;
  auto other = load(R"(, "1002": {"content": "<ent>", "special": true, "normalized": false})");
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->tokenizer, nullptr);
  EXPECT_NE(
      other->tokenizer_note.find("the added token \"<ent>\" (id 1002) is not reproduced beside "
                                 "sentencepiece.bpe.model"),
      std::string::npos)
      << other->tokenizer_note;
}

// BERT-family settings that change what the layers compute were read past,
// so a relative_key model or a decoder ran as an absolute-position encoder
// and answered with wrong embeddings. They are refused, naming the key.
TEST(ModelDirectoryJsonTest, SettingsEncoderdDoesNotRunAreRefused) {
  const std::filesystem::path path =
      std::filesystem::path(::testing::TempDir()) / "settings_config.json";
  const auto read = [&](const std::string& extra) {
    std::ofstream(path) << R"({"model_type": "bert", "hidden_size": 64)" << extra << "}";
    return ReadHfConfig(path.string());
  };
  EXPECT_TRUE(read("").ok());
  EXPECT_TRUE(read(R"(, "position_embedding_type": "absolute", "is_decoder": false)").ok());
  EXPECT_TRUE(read(R"(, "position_embedding_type": null)").ok());
  for (const char* type : {"relative_key", "relative_key_query"}) {
    auto config = read(std::string(R"(, "position_embedding_type": ")") + type + "\"");
    ASSERT_FALSE(config.ok()) << type;
    EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(config.status().message().find(path.string() + ": position_embedding_type \"" + type +
                                             "\" is not supported"),
              std::string::npos)
        << config.status().message();
  }
  auto decoder = read(R"(, "is_decoder": true)");
  ASSERT_FALSE(decoder.ok());
  EXPECT_NE(decoder.status().message().find("is_decoder is true"), std::string::npos)
      << decoder.status().message();
  EXPECT_FALSE(read(R"(, "is_decoder": "yes")").ok());
}

}  // namespace
}  // namespace encoderd
