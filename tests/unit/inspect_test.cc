// `encoderd inspect` on every fixture: text and --json describe the model.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "cli/encode_command.h"
#include "cli/inspect_command.h"
#include "server/config/config_loader.h"
#include "tests/unit/model_fixtures.h"

namespace encoderd {
namespace {

using testing::FixtureModelNames;
using testing::ModelsDir;

class InspectTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return ModelsDir() + "/" + GetParam(); }
  nlohmann::json expected() const {
    return testing::ReadJsonFile(ModelsDir() + "/" + GetParam() + ".reference/expected.json");
  }
};

TEST_P(InspectTest, JsonDescribesTheModel) {
  std::ostringstream out, err;
  ASSERT_EQ(server::RunInspectCommand({dir(), "--json"}, out, err), 0) << err.str();
  const nlohmann::json got = nlohmann::json::parse(out.str());
  const nlohmann::json want = expected();
  EXPECT_EQ(got["family"], want["family"]);
  EXPECT_EQ(got["config"]["num_layers"], want["num_layers"]);
  EXPECT_EQ(got["config"]["hidden_size"], want["hidden_size"]);
  EXPECT_EQ(got["config"]["num_heads"], want["num_heads"]);
  EXPECT_EQ(got["config"]["intermediate_size"], want["intermediate_size"]);
  EXPECT_EQ(got["config"]["num_labels"], want["num_labels"]);
  EXPECT_EQ(got["config"]["relative_attention_buckets"], want["family"] == "mpnet" ? 32 : 0);
  EXPECT_EQ(got["config"]["disentangled_attention"].is_null(), !want.value("disentangled", false));
  EXPECT_EQ(got["config"]["mask_pad_keys"],
            want["family"] == "torchtext-roberta" || want["family"] == "fairseq-roberta");
  EXPECT_EQ(got["config"]["zero_pad_embeddings"], want["family"] == "fairseq-roberta");
  EXPECT_EQ(got["checkpoint"]["format"], want["checkpoint_format"]);
  EXPECT_EQ(got["checkpoint"]["num_tensors"], want["num_tensors"]);
  EXPECT_EQ(got["checkpoint"]["num_parameters"], want["num_parameters"]);
  // The count is the sum of the listed tensors' element counts.
  int64_t numel = 0;
  for (const auto& tensor : got["checkpoint"]["tensors"]) {
    int64_t n = 1;
    for (const auto& d : tensor["shape"]) n *= d.get<int64_t>();
    numel += n;
  }
  EXPECT_EQ(numel, got["checkpoint"]["num_parameters"].get<int64_t>());
  EXPECT_EQ(got["checkpoint"]["tensors"].size(), want["num_tensors"].get<size_t>());
  ASSERT_TRUE(got["tokenizer"].is_object());
  EXPECT_EQ(got["tokenizer"]["description"].get<std::string>().rfind(
                want["tokenizer"].get<std::string>(), 0),
            0u);
}

TEST_P(InspectTest, TextDescribesTheModel) {
  std::ostringstream out, err;
  ASSERT_EQ(server::RunInspectCommand({dir()}, out, err), 0) << err.str();
  const std::string text = out.str();
  const nlohmann::json want = expected();
  auto has = [&](const std::string& s) {
    EXPECT_NE(text.find(s), std::string::npos) << "'" << s << "' not in:\n" << text;
  };
  has("family:          " + want["family"].get<std::string>() + "\n");
  has("layers:          " + std::to_string(want["num_layers"].get<int>()));
  const int64_t embedding_size = want.value("embedding_size", int64_t{0});
  has("hidden size:     " + std::to_string(want["hidden_size"].get<int>()) +
      (embedding_size ? " (embeddings " + std::to_string(embedding_size) + " wide, projected)"
                      : std::string()) +
      "\n");
  has("heads:           " + std::to_string(want["num_heads"].get<int>()));
  has("parameters:      " + std::to_string(want["num_parameters"].get<int64_t>()) + " in " +
      std::to_string(want["num_tensors"].get<int>()) + " tensors");
  has("(" + want["checkpoint_format"].get<std::string>() + ")");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, InspectTest, ::testing::ValuesIn(FixtureModelNames()));

// What inspect says about text pairs: the model's template, the token
// types the model reads, and whether Rerank serves it.
TEST(CommandHelpTest, HelpPrintsUsageAndSucceeds) {
  // `encode --help` and `inspect --help` were "unknown option --help", exit 2.
  for (const auto run : {&server::RunInspectCommand, &server::RunEncodeCommand}) {
    std::ostringstream out, err;
    EXPECT_EQ(run({"--help"}, out, err), 0) << err.str();
    EXPECT_EQ(out.str().rfind("usage: encoderd ", 0), 0u) << out.str();
    EXPECT_EQ(err.str(), "");
  }
}

TEST(CommandHelpTest, ServeFlagsAreNotCutToTheirColumn) {
  // "--max-connection-age-grace-s Vtime calls in flight..." ran together,
  // and "--max-connections-per-address" lost its V.
  const std::string usage = server::ConfigFlagsUsage();
  EXPECT_NE(usage.find("--max-connections-per-address V"), std::string::npos) << usage;
  std::istringstream lines(usage);
  for (std::string line; std::getline(lines, line);) {
    const size_t v = line.find(" V");
    if (line.rfind("  --", 0) == 0 && v != std::string::npos && v + 2 < line.size()) {
      EXPECT_EQ(line[v + 2], ' ') << line;
    }
  }
}

TEST(InspectPairsTest, NamesTheTemplateAndRerank) {
  const std::pair<const char*, const char*> cases[] = {
      {"hf_bert_cross_encoder",
       "text pairs:      [CLS] a [SEP] b [SEP], token types 0 then 1; one-output head: a "
       "cross-encoder, served by Rerank\n"},
      {"hf_xlmr_zip", "text pairs:      <s> a </s></s> b </s>, every token type 0\n"},
      {"hf_data2vec_text", "text pairs:      <s> a </s></s> b </s>, every token type 0\n"},
      {"hf_roberta_prelayernorm", "text pairs:      <s> a </s></s> b </s>, every token type 0\n"},
      {"hf_distilbert_base", "text pairs:      [CLS] a [SEP] b [SEP], every token type 0\n"},
      // MPNet's vocab.txt, read by MPNetTokenizer, and its tokenizer.json.
      {"hf_mpnet_base", "text pairs:      <s> a </s></s> b </s>, every token type 0\n"},
      {"hf_mpnet_classifier", "text pairs:      <s> a </s></s> b </s>, every token type 0\n"},
      {"generic_postnorm_gelu", "text pairs:      none (the family defines no pair format)\n"},
      // DeBERTa's spm.model, read by DebertaV2Tokenizer; and its attention.
      {"hf_deberta_classifier", "text pairs:      [CLS] a [SEP] b [SEP], every token type 0\n"},
      {"hf_deberta_classifier",
       "positions:       0 (none), max tokens 512; disentangled attention (c2p, p2c) over 512 "
       "relative embeddings (256 log buckets reaching 512, LayerNorm'd)\n"},
      {"hf_deberta_base",
       "; disentangled attention (c2p, p2c) over 16 relative embeddings (8 log buckets reaching "
       "64)\n"},
  };
  for (const auto& [name, line] : cases) {
    std::ostringstream out, err;
    ASSERT_EQ(server::RunInspectCommand({testing::ModelsDir() + "/" + name}, out, err), 0)
        << err.str();
    EXPECT_NE(out.str().find(line), std::string::npos) << name << ":\n" << out.str();
  }
}

TEST(InspectCommand, ErrorsGoToStderrWithNonZeroExit) {
  std::ostringstream out, err;
  EXPECT_EQ(server::RunInspectCommand({ModelsDir() + "/bad/missing_key"}, out, err), 1);
  EXPECT_TRUE(out.str().empty());
  EXPECT_NE(err.str().find("encoder.layer.1.output.dense.weight"), std::string::npos);
  std::ostringstream out2, err2;
  EXPECT_EQ(server::RunInspectCommand({}, out2, err2), 2);
  EXPECT_NE(err2.str().find("usage"), std::string::npos);
  std::ostringstream out3, err3;
  EXPECT_EQ(server::RunInspectCommand({"a", "--yaml"}, out3, err3), 2);
}

// A model folder whose name is not UTF-8 (Latin-1 "modèle"): its path is in
// the JSON, and nlohmann's dump() threw on it, uncaught, and the command
// aborted. Each bad byte becomes U+FFFD.
TEST(InspectCommand, JsonOfAFolderNamedInLatin1) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "mod\xe8le";
  std::filesystem::remove_all(dir);
  std::filesystem::copy(ModelsDir() + "/hf_xlmr_zip", dir,
                        std::filesystem::copy_options::recursive);
  std::ostringstream out, err;
  ASSERT_EQ(server::RunInspectCommand({dir.string(), "--json"}, out, err), 0) << err.str();
  const nlohmann::json got = nlohmann::json::parse(out.str());
  EXPECT_EQ(got["family"], "xlm-roberta");
  EXPECT_NE(out.str().find("mod\xef\xbf\xbdle"), std::string::npos) << out.str().substr(0, 400);
  std::filesystem::remove_all(dir);
}

std::string RunBinary(const std::string& args, int* exit_code) {
  const std::string command = std::string(ENCODERD_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  *exit_code = pclose(pipe);
  return output;
}

TEST(InspectBinary, RunsAsASubcommand) {
  int code = -1;
  const std::string json = RunBinary("inspect " + ModelsDir() + "/hf_xlmr_zip --json", &code);
  ASSERT_EQ(code, 0) << json;
  const nlohmann::json got = nlohmann::json::parse(json);
  EXPECT_EQ(got["family"], "xlm-roberta");
  EXPECT_EQ(got["config"]["labels"], (nlohmann::json{"class_0", "class_1"}));
  const std::string error = RunBinary("inspect " + ModelsDir() + "/bad/wrong_shape", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(error.find("encoder.layer.0.intermediate.dense.weight"), std::string::npos) << error;
}

}  // namespace
}  // namespace encoderd
