// encoderd.yaml parsing, and what a card changes when a directory loads.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "engine/model/model_directory.h"
#include "engine/text/byte_bpe_tokenizer.h"
#include "engine/text/hf_tokenizer_json.h"
#include "engine/text/sentencepiece_tokenizer.h"
#include "engine/text/text_pair.h"
#include "engine/text/wordpiece_tokenizer.h"
#include "server/config/model_card_yaml.h"
#include "tests/unit/model_fixtures.h"
#include "tests/unit/tokenizer_tiny_models.h"

namespace encoderd {
namespace {

namespace fs = std::filesystem;
using server::ParseModelCard;

TEST(ModelCardYaml, ParsesEveryKey) {
  auto card = ParseModelCard(R"(
family: transformer-encoder
checkpoint: weights/model.pt
state_dict_key: model
classification_head: mnli
num_heads: 8
layer_norm_eps: 1.0e-6
activation: gelu
norm_first: true
max_tokens: 256
pad_token_id: 3
position_rule: from_zero
labels: [a, b]
pooling: mean
head_activation: relu
tokenizer: {type: sentencepiece, file: spm.model, id_offset: 0, bos_id: 5, eos_id: 6, pad_id: 3, unk_id: 7}
weights:
  token_embedding: emb
  position_embedding: pos
  embedding_norm: emb_norm
  layers: enc.layers
  final_norm: enc.norm
  head_dense: cls.dense
  head_out: cls.out
)",
                             "card.yaml");
  ASSERT_TRUE(card.ok()) << card.status().ToString();
  EXPECT_EQ(card->family, ModelFamily::kTransformerEncoder);
  EXPECT_EQ(card->checkpoint, "weights/model.pt");
  EXPECT_EQ(card->state_dict_key, "model");
  EXPECT_EQ(card->classification_head, "mnli");
  EXPECT_EQ(card->num_heads, 8);
  EXPECT_FLOAT_EQ(*card->layer_norm_eps, 1e-6f);
  EXPECT_EQ(card->activation, Activation::kGelu);
  EXPECT_EQ(card->norm_first, true);
  EXPECT_EQ(card->max_tokens, 256);
  EXPECT_EQ(card->pad_token_id, 3);
  EXPECT_EQ(card->mask_pad_keys, std::nullopt);
  EXPECT_EQ(card->position_rule, PositionRule::kFromZero);
  EXPECT_EQ(card->labels, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(card->pooling, Pooling::kMean);
  EXPECT_EQ(card->head_activation, Activation::kRelu);
  ASSERT_TRUE(card->tokenizer.has_value());
  EXPECT_EQ(card->tokenizer->kind, TokenizerKind::kSentencePiece);
  EXPECT_EQ(card->tokenizer->file, "spm.model");
  EXPECT_EQ(card->tokenizer->id_offset, 0);
  EXPECT_EQ(card->tokenizer->bos, 5);
  EXPECT_EQ(card->tokenizer->eos, 6);
  EXPECT_EQ(card->tokenizer->pad, 3);
  EXPECT_EQ(card->tokenizer->unk, 7);
  EXPECT_EQ(card->weights.token_embedding, "emb");
  EXPECT_EQ(card->weights.position_embedding, "pos");
  EXPECT_EQ(card->weights.embedding_norm, "emb_norm");
  EXPECT_EQ(card->weights.layers, "enc.layers");
  EXPECT_EQ(card->weights.final_norm, "enc.norm");
  EXPECT_EQ(card->weights.head_dense, "cls.dense");
  EXPECT_EQ(card->weights.head_out, "cls.out");
}

TEST(ModelCardYaml, ByteLevelBpeTokenizer) {
  auto card = ParseModelCard(
      "tokenizer:\n  type: byte-level-bpe\n  file: encoder.json\n  merges_file: vocab.bpe\n"
      "  add_prefix_space: true\n  fairseq_dict: dict.txt\n",
      "card.yaml");
  ASSERT_TRUE(card.ok()) << card.status().ToString();
  ASSERT_TRUE(card->tokenizer.has_value());
  EXPECT_EQ(card->tokenizer->kind, TokenizerKind::kByteLevelBpe);
  EXPECT_EQ(card->tokenizer->file, "encoder.json");
  EXPECT_EQ(card->tokenizer->merges_file, "vocab.bpe");
  EXPECT_EQ(card->tokenizer->add_prefix_space, true);
  EXPECT_EQ(card->tokenizer->fairseq_dict, "dict.txt");
}

TEST(ModelCardYaml, TokenizerJson) {
  auto card =
      ParseModelCard("tokenizer: {type: tokenizer-json, file: tok/tokenizer.json}\n", "card.yaml");
  ASSERT_TRUE(card.ok()) << card.status().ToString();
  ASSERT_TRUE(card->tokenizer.has_value());
  EXPECT_EQ(card->tokenizer->kind, TokenizerKind::kTokenizerJson);
  EXPECT_EQ(card->tokenizer->file, "tok/tokenizer.json");
}

TEST(ModelCardYaml, EmptyCardIsAllDefaults) {
  auto card = ParseModelCard("# nothing\n", "card.yaml");
  ASSERT_TRUE(card.ok());
  EXPECT_FALSE(card->family.has_value());
  EXPECT_FALSE(card->num_heads.has_value());
}

void ExpectError(const std::string& yaml, const std::string& where, const std::string& what) {
  auto card = ParseModelCard(yaml, "card.yaml");
  ASSERT_FALSE(card.ok()) << yaml;
  EXPECT_EQ(card.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(card.status().message().find(where), std::string::npos) << card.status().message();
  EXPECT_NE(card.status().message().find(what), std::string::npos) << card.status().message();
}

// Until 2026-12-04 a repeated key replaced the first (num_heads: 12 became
// 4 below) and a second labels list was appended to the first.
TEST(ModelCardYaml, AKeyGivenTwiceIsAnError) {
  ExpectError("num_heads: 12\nfamily: bert\nnum_heads: 4\n", "card.yaml:3: num_heads",
              "given twice");
  ExpectError("labels: [a, b]\nlabels: [c]\n", "card.yaml:2: labels", "given twice");
  ExpectError("tokenizer:\n  type: wordpiece\n  file: vocab.txt\n  file: other.txt\n",
              "card.yaml:4: tokenizer.file", "given twice");
  ExpectError("weights:\n  layers: a\n  layers: b\n", "card.yaml:3: weights.layers", "given twice");
}

TEST(ModelCardYaml, BadKeysAndValuesNameTheKeyAndLine) {
  ExpectError("family: bert\nnum_head: 4\n", "card.yaml:2: num_head", "not a known key");
  ExpectError("num_heads: four\n", "card.yaml:1: num_heads", "integer");
  ExpectError("num_heads: 0\n", "card.yaml:1: num_heads", "at least 1");
  ExpectError("family: gpt2\n", "card.yaml:1: family", "gpt2");
  ExpectError("\nactivation: swish\n", "card.yaml:2: activation", "swish");
  ExpectError("norm_first: maybe\n", "card.yaml:1: norm_first", "true or false");
  ExpectError("mask_pad_keys: 1.5\n", "card.yaml:1: mask_pad_keys", "true or false");
  ExpectError("layer_norm_eps: -1\n", "card.yaml:1: layer_norm_eps", "positive");
  ExpectError("pooling: median\n", "card.yaml:1: pooling", "median");
  ExpectError("labels: a\n", "card.yaml:1: labels", "list");
  ExpectError("tokenizer:\n  type: bpe\n  file: x\n", "card.yaml:2: tokenizer.type", "bpe");
  ExpectError("tokenizer:\n  file: x\n  casing: no\n", "card.yaml:3: tokenizer.casing",
              "not a known key");
  ExpectError("tokenizer:\n  file: x\n", "card.yaml:2: tokenizer", "type");
  ExpectError("weights:\n  layer: enc\n", "card.yaml:2: weights.layer", "not a known key");
  ExpectError("- a\n- b\n", "card.yaml", "mapping");
  ExpectError("family: [bert\n", "card.yaml:", "");
}

// A copy of a fixture directory the test may change.
fs::path CopyFixture(const std::string& name, const std::string& test) {
  const fs::path dst = fs::temp_directory_path() / ("encoderd_model_card_test_" + test);
  fs::remove_all(dst);
  fs::copy(testing::ModelsDir() + "/" + name, dst, fs::copy_options::recursive);
  return dst;
}

void WriteFile(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

TEST(ModelCardLoad, CardOverridesHuggingFaceDefaults) {
  const fs::path dir = CopyFixture("hf_bert_legacy", "overrides");
  WriteFile(dir / "encoderd.yaml", "pooling: mean\nmax_tokens: 128\nlabels: [x, y, z]\n");
  auto bundle = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  EXPECT_EQ(bundle->config.default_pooling, Pooling::kMean);
  EXPECT_EQ(bundle->config.max_tokens, 128);
  EXPECT_EQ(bundle->config.labels, (std::vector<std::string>{"x", "y", "z"}));
  fs::remove_all(dir);
}

// mask_pad_keys: a card turns the family's default (torchtext-roberta and
// fairseq-roberta mask pad keys) on or off; not beside MPNet's relative
// attention bias or DeBERTa's disentangled attention, which take the
// scores' one bias.
TEST(ModelCardLoad, MaskPadKeysOverridesTheFamily) {
  for (const auto& [fixture, card, masks] :
       {std::tuple<std::string, std::string, bool>{"hf_roberta_safetensors", "", false},
        {"hf_roberta_safetensors", "mask_pad_keys: true\n", true},
        {"torchtext_xlmr_legacy", "", true},
        {"fairseq_xlmr_base", "", true},
        {"fairseq_xlmr_base", "mask_pad_keys: false\n", false}}) {
    SCOPED_TRACE(fixture + " " + card);
    const fs::path dir = CopyFixture(fixture, "mask_pad_keys");
    std::ifstream in(dir / "encoderd.yaml");
    const std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!card.empty()) WriteFile(dir / "encoderd.yaml", kept + card);
    auto bundle = server::LoadModelDirectory(dir.string());
    ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
    EXPECT_EQ(bundle->config.mask_pad_keys, masks);
    // fairseq's zeroed pad embeddings go with its masked pad keys.
    EXPECT_EQ(bundle->config.zero_pad_embeddings, fixture == "fairseq_xlmr_base" && masks);
    fs::remove_all(dir);
  }
  const fs::path dir = CopyFixture("hf_mpnet_base", "mask_pad_keys_mpnet");
  WriteFile(dir / "encoderd.yaml", "mask_pad_keys: true\n");
  auto mpnet = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(mpnet.ok());
  EXPECT_NE(mpnet.status().message().find("mask_pad_keys beside a relative attention bias"),
            std::string::npos)
      << mpnet.status().message();
  fs::remove_all(dir);
}

// A BERT folder whose tokenizer_config.json says nothing of casing (or that
// has none), and a card that does not say either, lower-case as the
// vocabulary says, whatever the folder is called: here the opposite.
TEST(ModelCardLoad, WordPieceCasingFromTheVocabulary) {
  const std::string text = "The Cat sat in Paris";
  const struct {
    const char* fixture;
    const char* folder;
    bool uncased;  // as the fixture's tokenizer_config.json says
  } cases[] = {{"hf_bert_gamma_beta", "bert-base-uncased", false},
               {"hf_bert_legacy", "bert-base-cased", true}};
  for (const auto& [fixture, folder, uncased] : cases) {
    SCOPED_TRACE(fixture);
    auto stated = server::LoadModelDirectory(testing::ModelsDir() + "/" + fixture);
    ASSERT_TRUE(stated.ok()) << stated.status().ToString();
    ASSERT_NE(stated->tokenizer, nullptr);
    ASSERT_EQ(stated->tokenizer->Describe().find("uncased") != std::string::npos, uncased);
    const auto expected = stated->tokenizer->Encode(text, 64, false);
    ASSERT_TRUE(expected.ok());
    const fs::path dir = CopyFixture(fixture, folder);
    for (const char* config : {static_cast<const char*>("{}"), static_cast<const char*>(nullptr),
                               static_cast<const char*>("card")}) {
      SCOPED_TRACE(config ? config : "no tokenizer_config.json");
      fs::remove(dir / "tokenizer_config.json");
      fs::remove(dir / "encoderd.yaml");
      if (config && std::string(config) == "card") {
        WriteFile(dir / "encoderd.yaml", "tokenizer: {type: wordpiece, file: vocab.txt}\n");
      } else if (config) {
        WriteFile(dir / "tokenizer_config.json", config);
      }
      auto bundle = server::LoadModelDirectory(dir.string());
      ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
      ASSERT_NE(bundle->tokenizer, nullptr);
      const std::string description = bundle->tokenizer->Describe();
      EXPECT_EQ(description.find("uncased") != std::string::npos, uncased) << description;
      EXPECT_NE(description.find("from its vocabulary"), std::string::npos) << description;
      const auto actual = bundle->tokenizer->Encode(text, 64, false);
      ASSERT_TRUE(actual.ok());
      EXPECT_EQ(actual->ids, expected->ids);
    }
    fs::remove_all(dir);
  }
}

// A checkpoint save_pretrained sharded (the fixture: 3 safetensors files
// and model.safetensors.index.json) loads as the one file would; an index
// that does not match its shards names what is wrong.
TEST(ShardedCheckpoint, LoadsAndNamesWhatIsWrong) {
  const std::string fixture = "hf_bert_cross_encoder";
  auto whole = server::LoadModelDirectory(testing::ModelsDir() + "/" + fixture);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->checkpoint_files, 3);
  EXPECT_EQ(whole->checkpoint_path,
            testing::ModelsDir() + "/" + fixture + "/model.safetensors.index.json");
  const std::string shard1 = "model-00001-of-00003.safetensors";
  const std::string shard2 = "model-00002-of-00003.safetensors";
  const auto load_with = [&](const std::string& test,
                             const std::function<void(const fs::path&)>& edit) {
    const fs::path dir = CopyFixture(fixture, "sharded_" + test);
    edit(dir);
    auto bundle = server::LoadModelDirectory(dir.string());
    fs::remove_all(dir);
    return bundle.ok() ? std::string() : bundle.status().message();
  };
  const auto edit_index = [](const fs::path& dir,
                             const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json index;
    std::ifstream(dir / "model.safetensors.index.json") >> index;
    edit(index);
    WriteFile(dir / "model.safetensors.index.json", index.dump());
  };
  EXPECT_EQ(load_with("as_saved", [](const fs::path&) {}), "");
  const std::string missing =
      load_with("missing_shard", [&](const fs::path& d) { fs::remove(d / shard2); });
  EXPECT_NE(missing.find("model.safetensors.index.json: "), std::string::npos) << missing;
  EXPECT_NE(missing.find(shard2), std::string::npos) << missing;
  EXPECT_NE(load_with("in_both",
                      [&](const fs::path& d) {
                        fs::copy_file(d / shard1, d / shard2, fs::copy_options::overwrite_existing);
                      })
                .find("is in both " + shard1 + " and " + shard2),
            std::string::npos);
  EXPECT_NE(load_with("wrong_shard",
                      [&](const fs::path& d) {
                        edit_index(d, [&](nlohmann::json& index) {
                          for (auto& [tensor, shard] : index["weight_map"].items()) {
                            if (shard == shard1) {
                              shard = shard2;
                              break;
                            }
                          }
                        });
                      })
                .find("which does not hold it"),
            std::string::npos);
  EXPECT_NE(load_with("outside",
                      [&](const fs::path& d) {
                        edit_index(d, [](nlohmann::json& index) {
                          index["weight_map"].begin().value() = "../model.safetensors";
                        });
                      })
                .find("not a file of the folder"),
            std::string::npos);
  EXPECT_NE(load_with("no_map",
                      [&](const fs::path& d) {
                        edit_index(d, [](nlohmann::json& index) { index.erase("weight_map"); });
                      })
                .find("model.safetensors.index.json: no weight_map"),
            std::string::npos);
  // A shard of another format (found by content, not by name).
  EXPECT_NE(load_with("mixed",
                      [&](const fs::path& d) {
                        fs::copy_file(fs::path(testing::ModelsDir()) / "hf_xlmr_regression" /
                                          "pytorch_model-00002-of-00003.bin",
                                      d / shard2, fs::copy_options::overwrite_existing);
                      })
                .find("the shard " + shard2 + " is torch-zip, " + shard1 + " safetensors"),
            std::string::npos);
  EXPECT_NE(load_with("not_a_name",
                      [&](const fs::path& d) {
                        edit_index(d, [](nlohmann::json& index) {
                          index["weight_map"].begin().value() = 7;
                        });
                      })
                .find("no file name"),
            std::string::npos);
  EXPECT_NE(load_with("state_dict_key",
                      [&](const fs::path& d) {
                        WriteFile(d / "encoderd.yaml", "state_dict_key: model\n");
                      })
                .find("state_dict_key does not apply to the sharded"),
            std::string::npos);
  // Named by a card, the index is read the same way.
  EXPECT_EQ(load_with("by_card",
                      [&](const fs::path& d) {
                        fs::rename(d / "model.safetensors.index.json", d / "weights.index.json");
                        WriteFile(d / "encoderd.yaml", "checkpoint: weights.index.json\n");
                      }),
            "");
}

// A Hugging Face RoBERTa folder: vocab.json + merges.txt, and
// tokenizer_config.json's add_prefix_space when it has one.
TEST(ModelCardLoad, RobertaFoldersGetByteLevelBpe) {
  const fs::path dir = CopyFixture("hf_roberta_safetensors", "roberta_bpe");
  auto bundle = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  ASSERT_NE(bundle->tokenizer, nullptr);
  EXPECT_EQ(bundle->tokenizer->Describe().find("prefix space"), std::string::npos);
  WriteFile(dir / "tokenizer_config.json", R"({"add_prefix_space": true})");
  bundle = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  EXPECT_NE(bundle->tokenizer->Describe().find("prefix space"), std::string::npos)
      << bundle->tokenizer->Describe();
  WriteFile(dir / "tokenizer_config.json", R"({"add_prefix_space": "yes"})");
  bundle = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(bundle.ok());
  EXPECT_NE(bundle.status().message().find("add_prefix_space must be true or false"),
            std::string::npos)
      << bundle.status().message();
  // Card keys of another kind are errors, not ignored.
  fs::remove(dir / "tokenizer_config.json");
  WriteFile(dir / "encoderd.yaml",
            "pooling: mean\ntokenizer:\n  type: byte-level-bpe\n  file: vocab.json\n"
            "  id_offset: 1\n");
  bundle = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(bundle.ok());
  EXPECT_NE(bundle.status().message().find("tokenizer.id_offset does not apply"), std::string::npos)
      << bundle.status().message();
  WriteFile(dir / "encoderd.yaml", "pooling: mean\n");
  // Damaged merges name the file and the line.
  WriteFile(dir / "merges.txt", "#version: 0.2\na b c\n");
  bundle = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(bundle.ok());
  EXPECT_NE(bundle.status().message().find("merges.txt line 2"), std::string::npos)
      << bundle.status().message();
  fs::remove_all(dir);
}

// A Hugging Face folder with only tokenizer.json (many ship no vocab.txt or
// vocab.json + merges.txt) gets the tokenizer its other files would give.
TEST(ModelCardLoad, FoldersWithOnlyTokenizerJson) {
  const fs::path tokenizers = fs::path(ENCODERD_FIXTURES_DIR) / "tokenizers" / "tokenizer_json";
  const std::string text = "Hello, world! Ça va? 東京 don't";
  const struct {
    const char* fixture;
    const char* removed[2];
    const char* json;
  } folders[] = {{"hf_bert_legacy", {"vocab.txt", "vocab.txt"}, "wordpiece_uncased.json"},
                 {"hf_roberta_safetensors", {"vocab.json", "merges.txt"}, "bytebpe.json"}};
  for (const auto& f : folders) {
    SCOPED_TRACE(f.fixture);
    auto with_files = server::LoadModelDirectory(testing::ModelsDir() + "/" + f.fixture);
    ASSERT_TRUE(with_files.ok()) << with_files.status().ToString();
    ASSERT_NE(with_files->tokenizer, nullptr);
    const fs::path dir = CopyFixture(f.fixture, "tokenizer_json");
    for (const char* name : f.removed) fs::remove(dir / name);
    auto without = server::LoadModelDirectory(dir.string());
    ASSERT_TRUE(without.ok()) << without.status().ToString();
    EXPECT_EQ(without->tokenizer, nullptr);
    fs::copy_file(tokenizers / f.json, dir / "tokenizer.json");
    auto with_json = server::LoadModelDirectory(dir.string());
    ASSERT_TRUE(with_json.ok()) << with_json.status().ToString();
    ASSERT_NE(with_json->tokenizer, nullptr);
    const auto expected = with_files->tokenizer->Encode(text, 64, false);
    const auto actual = with_json->tokenizer->Encode(text, 64, false);
    ASSERT_TRUE(expected.ok() && actual.ok());
    EXPECT_EQ(actual->ids, expected->ids);
    EXPECT_GT(actual->ids.size(), 8u);
    // Named by a card too; keys of the other kinds are errors.
    fs::rename(dir / "tokenizer.json", dir / "hf.json");
    WriteFile(dir / "encoderd.yaml", "tokenizer: {type: tokenizer-json, file: hf.json}\n");
    with_json = server::LoadModelDirectory(dir.string());
    ASSERT_TRUE(with_json.ok()) << with_json.status().ToString();
    ASSERT_NE(with_json->tokenizer, nullptr);
    WriteFile(dir / "encoderd.yaml",
              "tokenizer: {type: tokenizer-json, file: hf.json, add_prefix_space: true}\n");
    with_json = server::LoadModelDirectory(dir.string());
    ASSERT_FALSE(with_json.ok());
    EXPECT_NE(with_json.status().message().find(
                  "tokenizer.add_prefix_space does not apply to tokenizer-json"),
              std::string::npos)
        << with_json.status().message();
    // A damaged file names itself.
    WriteFile(dir / "encoderd.yaml", "tokenizer: {type: tokenizer-json, file: hf.json}\n");
    WriteFile(dir / "hf.json", "{\"model\": {\"type\": \"WordLevel\", \"vocab\": {}}}");
    with_json = server::LoadModelDirectory(dir.string());
    ASSERT_FALSE(with_json.ok());
    EXPECT_NE(with_json.status().message().find("hf.json: model.type is \"WordLevel\""),
              std::string::npos)
        << with_json.status().message();
    // Found by name, a pipeline encoderd does not read leaves the folder
    // without a tokenizer (it takes token ids), saying why; a damaged file
    // is an error.
    fs::remove(dir / "encoderd.yaml");
    fs::rename(dir / "hf.json", dir / "tokenizer.json");
    with_json = server::LoadModelDirectory(dir.string());
    ASSERT_TRUE(with_json.ok()) << with_json.status().ToString();
    EXPECT_EQ(with_json->tokenizer, nullptr);
    EXPECT_NE(with_json->tokenizer_note.find("tokenizer.json: model.type is \"WordLevel\""),
              std::string::npos)
        << with_json->tokenizer_note;
    WriteFile(dir / "tokenizer.json", "{\"model\": ");
    with_json = server::LoadModelDirectory(dir.string());
    ASSERT_FALSE(with_json.ok());
    EXPECT_NE(with_json.status().message().find("tokenizer.json: not valid JSON"),
              std::string::npos)
        << with_json.status().message();
    fs::remove_all(dir);
  }
}

// A Hugging Face folder's vocab.txt, found by name, is read as the fast
// class AutoTokenizer converts from it reads it (BertTokenizerFast: the
// tokenizers library's rules), as sentence-transformers and transformers'
// pipelines read the folder; a card naming it, as BertTokenizer reads it.
// The two part on a decomposed accent in a cased model (BertTokenizer
// composes it) and on U+2B820-U+2B91F (CJK to BertTokenizer only). Until
// 2026-12-05 the folder was read as BertTokenizer reads it.
TEST(ModelCardLoad, HfVocabTxtReadAsTheFastClassReadsIt) {
  const fs::path dir = CopyFixture("hf_bert_gamma_beta", "vocab_rules");  // cased
  const std::string text = "cafe\u0301 ext\U0002B820e Cafe\u0301";
  const auto with_rules = [&](BertRules rules) {
    WordPieceOptions options;
    options.lower_case = false;
    options.rules = rules;
    auto t = CreateWordPieceTokenizer((dir / "vocab.txt").string(), options);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    auto e = t.ok() ? (*t)->Encode(text, 64, false) : StatusOr<Encoding>(t.status());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? e->ids : std::vector<int32_t>{};
  };
  const std::vector<int32_t> fast = with_rules(BertRules::kTokenizers);
  const std::vector<int32_t> slow = with_rules(BertRules::kPython);
  ASSERT_NE(fast, slow);
  for (const bool card : {false, true}) {
    SCOPED_TRACE(card ? "a card names vocab.txt" : "found by name");
    if (card) {
      WriteFile(dir / "encoderd.yaml",
                "tokenizer: {type: wordpiece, file: vocab.txt, lower_case: false}\n");
    }
    auto bundle = server::LoadModelDirectory(dir.string());
    ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
    ASSERT_NE(bundle->tokenizer, nullptr);
    EXPECT_EQ(bundle->tokenizer->Describe().find("tokenizers library's rules") != std::string::npos,
              !card)
        << bundle->tokenizer->Describe();
    const auto ids = bundle->tokenizer->Encode(text, 64, false);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(ids->ids, card ? slow : fast);
    // The fast class matches its special tokens written in a text (one
    // [SEP] id between the words); a card's tokenizer reads them as text.
    const auto sep = bundle->tokenizer->Encode("query [SEP] passage", 64, false);
    ASSERT_TRUE(sep.ok()) << sep.status().ToString();
    const int32_t sep_id = bundle->tokenizer->special_tokens().eos;
    EXPECT_EQ(std::count(sep->ids.begin(), sep->ids.end(), sep_id), card ? 1 : 2);
  }
  fs::remove_all(dir);
}

// A folder's sentencepiece.bpe.model found by name is read as
// XLMRobertaTokenizer reads it: its special tokens written in a text are
// their ids (<mask> after the model's pieces, taking the spaces before
// it); named by a card, the file tokenizes them as text.
TEST(ModelCardLoad, XlmrSentencePieceMatchesItsClassSpecials) {
  const fs::path dir = CopyFixture("hf_xlmr_zip", "xlmr_specials");
  for (const bool card : {false, true}) {
    SCOPED_TRACE(card ? "a card names sentencepiece.bpe.model" : "found by name");
    if (card) {
      WriteFile(dir / "encoderd.yaml",
                "tokenizer: {type: sentencepiece, file: sentencepiece.bpe.model}\n");
    }
    auto bundle = server::LoadModelDirectory(dir.string());
    ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
    ASSERT_NE(bundle->tokenizer, nullptr);
    EXPECT_EQ(bundle->tokenizer->Describe().find("5 special tokens matched") != std::string::npos,
              !card)
        << bundle->tokenizer->Describe();
    // (This folder's model is BPE, whose fast class is another tokenizer:
    // sentencepiece normalizes its text either way.)
    EXPECT_EQ(bundle->tokenizer->Describe().find("a grapheme cluster at a time"), std::string::npos)
        << bundle->tokenizer->Describe();
    const auto e = bundle->tokenizer->Encode("Paris is the  <mask> of France</s> x", 64, false);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    const int32_t mask = static_cast<int32_t>(bundle->config.vocab_size) - 1;
    const int32_t eos = bundle->tokenizer->special_tokens().eos;
    EXPECT_EQ(std::count(e->ids.begin(), e->ids.end(), mask), card ? 0 : 1);
    EXPECT_EQ(std::count(e->ids.begin(), e->ids.end(), eos), card ? 1 : 2);
    if (!card) {
      // "Paris is the" and "<mask>" encode as the whole text does.
      const auto head = bundle->tokenizer->Encode("Paris is the", 64, false);
      ASSERT_TRUE(head.ok());
      ASSERT_GT(e->ids.size(), head->ids.size());
      EXPECT_TRUE(std::equal(head->ids.begin(), head->ids.end() - 1, e->ids.begin()));
      EXPECT_EQ(e->ids[head->ids.size() - 1], mask);
    }
  }
  fs::remove_all(dir);
}

// The hf_xlmr_zip fixture with the fixture's Unigram model (XLM-R's kind;
// the fixture's own is BPE) as its sentencepiece.bpe.model.
fs::path UnigramXlmrFolder(const std::string& test) {
  const fs::path dir = CopyFixture("hf_xlmr_zip", test);
  fs::copy_file(
      fs::path(ENCODERD_FIXTURES_DIR) / "tokenizers" / "spm" / "sentencepiece.unigram.model",
      dir / "sentencepiece.bpe.model", fs::copy_options::overwrite_existing);
  return dir;
}

// An XLM-R folder whose only tokenizer file is a Unigram tokenizer.json
// (what a fast tokenizer's save_pretrained leaves when it has no
// sentencepiece model to save) tokenizes as the sentencepiece model it
// came from would, and joins pairs RoBERTa's way.
TEST(ModelCardLoad, XlmrFolderWithOnlyAUnigramTokenizerJson) {
  const fs::path tokenizers = fs::path(ENCODERD_FIXTURES_DIR) / "tokenizers";
  const fs::path dir = UnigramXlmrFolder("unigram");
  auto with_model = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(with_model.ok()) << with_model.status().ToString();
  ASSERT_NE(with_model->tokenizer, nullptr);
  fs::remove(dir / "sentencepiece.bpe.model");
  fs::copy_file(tokenizers / "tokenizer_json" / "xlmr_unigram.json", dir / "tokenizer.json");
  auto with_json = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(with_json.ok()) << with_json.status().ToString();
  ASSERT_NE(with_json->tokenizer, nullptr) << with_json->tokenizer_note;
  EXPECT_EQ(with_json->tokenizer_path, (dir / "tokenizer.json").string());
  EXPECT_EQ(with_json->pair_template, PairTemplate::kRoberta);
  // (Spaces at a text's end are a "\u2581" token in the tokenizers
  // library's pipeline, which the sentencepiece model drops.)
  for (const char* text : {"Hello, world!", "ファイルを開けません", "  two  spaces  "}) {
    SCOPED_TRACE(text);
    const auto expected = with_model->tokenizer->Encode(text, 64, false);
    const auto actual = with_json->tokenizer->Encode(text, 64, false);
    ASSERT_TRUE(expected.ok() && actual.ok());
    std::vector<std::string> pieces = expected->pieces;
    if (std::string_view(text).back() == ' ') pieces.insert(pieces.end() - 1, "\u2581");
    EXPECT_EQ(actual->pieces, pieces);
    EXPECT_GT(actual->ids.size(), 3u);
  }
  // With both, tokenizer.json is read, as AutoTokenizer reads it; a damaged
  // one fails the load, naming it, rather than falling back.
  fs::copy_file(tokenizers / "spm" / "sentencepiece.unigram.model",
                dir / "sentencepiece.bpe.model");
  auto both = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  ASSERT_NE(both->tokenizer, nullptr);
  EXPECT_EQ(both->tokenizer_path, (dir / "tokenizer.json").string());
  const auto a = both->tokenizer->Encode("Hello, world!", 64, false);
  const auto b = with_model->tokenizer->Encode("Hello, world!", 64, false);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ids, b->ids);
  nlohmann::json file;
  std::ifstream(dir / "tokenizer.json") >> file;
  file["normalizer"]["normalizers"][0]["precompiled_charsmap"] = "AAAA";
  WriteFile(dir / "tokenizer.json", file.dump());
  auto damaged = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find(
                "tokenizer.json: normalizer.precompiled_charsmap is not a map"),
            std::string::npos)
      << damaged.status().message();
  fs::remove_all(dir);
}

// A CamemBERT folder (model_type camembert; camembert-base's files: its
// sentencepiece model and the tokenizer.json CamembertConverter writes of
// it) loads as a RoBERTa (EncoderParityTest runs it) and tokenizes with its
// own ids: <s> and </s> are the model's pieces, 5 and 6 here, not XLM-R's 0
// and 2 (the Python reference's ids, texts.json). Without the tokenizer.json
// its sentencepiece model is read as AutoTokenizer converts it
// (CamembertConverter: the same pipeline, trailing spaces stripped), and
// named by a card as CamembertTokenizer reads it: the model's pieces 3 past
// XLM-R's ids. A model whose first pieces are not <unk> <s> </s> is not
// read. Until 2026-12-07 model_type camembert was refused.
TEST(ModelCardLoad, CamembertFolderTokenizesWithItsOwnIds) {
  const fs::path dir = CopyFixture("hf_camembert_zip", "camembert");
  const auto texts =
      testing::ReadJsonFile(testing::ModelsDir() + "/hf_camembert_zip.reference/texts.json");
  const auto expect_ids = [&texts](const Tokenizer& tokenizer, const char* key) {
    SCOPED_TRACE(key);
    ASSERT_EQ(texts["texts"].size(), texts[key].size());
    for (size_t i = 0; i < texts["texts"].size(); ++i) {
      const std::string text = texts["texts"][i].get<std::string>();
      SCOPED_TRACE(text);
      const auto encoded = tokenizer.Encode(text, 64, true);
      ASSERT_TRUE(encoded.ok()) << encoded.status().ToString();
      const auto want = texts[key][i].get<std::vector<int32_t>>();
      EXPECT_EQ(encoded->ids, want);
      EXPECT_EQ(want.front(), 5);
      EXPECT_EQ(want.back(), 6);
    }
  };
  auto model = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(model->config.family, ModelFamily::kCamembert);
  ASSERT_NE(model->tokenizer, nullptr) << model->tokenizer_note;
  EXPECT_EQ(model->tokenizer_path, (dir / "tokenizer.json").string());
  EXPECT_EQ(model->pair_template, PairTemplate::kRoberta);
  expect_ids(*model->tokenizer, "ids");

  fs::remove(dir / "tokenizer.json");
  auto converted = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(converted.ok()) << converted.status().ToString();
  ASSERT_NE(converted->tokenizer, nullptr) << converted->tokenizer_note;
  EXPECT_EQ(converted->tokenizer_path, (dir / "sentencepiece.bpe.model").string());
  EXPECT_EQ(converted->pair_template, PairTemplate::kRoberta);
  EXPECT_NE(converted->tokenizer->Describe().find("tokenizers library's Unigram"),
            std::string::npos)
      << converted->tokenizer->Describe();
  expect_ids(*converted->tokenizer, "ids_converted");

  WriteFile(dir / "encoderd.yaml",
            "tokenizer: {type: sentencepiece, file: sentencepiece.bpe.model}\n");
  auto named = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  ASSERT_NE(named->tokenizer, nullptr) << named->tokenizer_note;
  // The same model read with XLM-R's ids (offset 1, <s> 0, </s> 2).
  auto as_xlmr = CreateSentencePieceTokenizer((dir / "sentencepiece.bpe.model").string(), {});
  ASSERT_TRUE(as_xlmr.ok()) << as_xlmr.status().ToString();
  // (Sentencepiece's own <unk>, for the characters the model lacks, is 3
  // in both.)
  const char* text = "Bonjour tout le monde \u30d5\u30a1\u30a4\u30eb";
  const auto camembert = named->tokenizer->Encode(text, 64, true);
  const auto xlmr = (*as_xlmr)->Encode(text, 64, true);
  ASSERT_TRUE(camembert.ok() && xlmr.ok());
  ASSERT_EQ(camembert->ids.size(), xlmr->ids.size());
  ASSERT_GT(xlmr->ids.size(), 2u);
  EXPECT_EQ(camembert->ids.front(), 5);
  EXPECT_EQ(camembert->ids.back(), 6);
  EXPECT_NE(std::find(xlmr->ids.begin(), xlmr->ids.end(), 3), xlmr->ids.end());
  for (size_t i = 1; i + 1 < xlmr->ids.size(); ++i) {
    EXPECT_EQ(camembert->ids[i], xlmr->ids[i] == 3 ? 3 : xlmr->ids[i] + 3);
  }
  // A card's key replaces one of CamembertTokenizer's ids, not all of them.
  WriteFile(dir / "encoderd.yaml",
            "tokenizer: {type: sentencepiece, file: sentencepiece.bpe.model, id_offset: 4}\n");
  auto offset_only = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(offset_only.ok()) << offset_only.status().ToString();
  ASSERT_NE(offset_only->tokenizer, nullptr) << offset_only->tokenizer_note;
  const auto same = offset_only->tokenizer->Encode(text, 64, true);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->ids, camembert->ids);
  WriteFile(dir / "encoderd.yaml",
            "tokenizer: {type: sentencepiece, file: sentencepiece.bpe.model}\n");

  // A damaged model fails the load, as an XLM-R folder's does.
  WriteFile(dir / "sentencepiece.bpe.model", "");
  fs::remove(dir / "encoderd.yaml");
  auto empty = server::LoadModelDirectory(dir.string());
  EXPECT_FALSE(empty.ok());
  WriteFile(dir / "encoderd.yaml",
            "tokenizer: {type: sentencepiece, file: sentencepiece.bpe.model}\n");
  // A model whose pieces start otherwise (DeBERTa's [PAD] [CLS] [SEP] [UNK]).
  fs::copy_file(fs::path(ENCODERD_FIXTURES_DIR) / "tokenizers" / "spm" / "deberta.model",
                dir / "sentencepiece.bpe.model", fs::copy_options::overwrite_existing);
  auto other_card = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(other_card.ok());
  EXPECT_NE(other_card.status().message().find("first pieces are not <unk> <s> </s>"),
            std::string::npos)
      << other_card.status().message();
  fs::remove(dir / "encoderd.yaml");
  auto other = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->tokenizer, nullptr);
  EXPECT_NE(other->tokenizer_note.find("first pieces are not <unk> <s> </s>"), std::string::npos)
      << other->tokenizer_note;
  // The note names the folder's added tokens only where one of them is why
  // (until 2026-12-07 it named them after any reason).
  WriteFile(dir / "tokenizer_config.json",
            R"({"added_tokens_decoder": {"5": {"content": "<s>", "special": true}}})");
  auto declared = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(declared.ok()) << declared.status().ToString();
  EXPECT_EQ(declared->tokenizer, nullptr);
  EXPECT_NE(declared->tokenizer_note.find("first pieces are not <unk> <s> </s>"), std::string::npos)
      << declared->tokenizer_note;
  EXPECT_EQ(declared->tokenizer_note.find("added tokens"), std::string::npos)
      << declared->tokenizer_note;
  fs::remove_all(dir);
}

// A folder's sentencepiece.bpe.model is read by the class AutoTokenizer
// picks: tokenizer_config.json's tokenizer_class where it names
// CamembertTokenizer or XLMRobertaTokenizer (Fast or not), else the model
// type's. (Until 2026-12-07 the model type alone decided.)
TEST(ModelCardLoad, TokenizerClassPicksCamembertOrXlmrIds) {
  const fs::path dir = CopyFixture("hf_camembert_zip", "tokenizer_class");
  fs::remove(dir / "tokenizer.json");
  const auto texts =
      testing::ReadJsonFile(testing::ModelsDir() + "/hf_camembert_zip.reference/texts.json");
  const std::string text = texts["texts"][0].get<std::string>();
  const auto camembert_ids = texts["ids_converted"][0].get<std::vector<int32_t>>();
  const auto ids_of = [&dir, &text]() {
    auto model = server::LoadModelDirectory(dir.string());
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    if (!model.ok() || model->tokenizer == nullptr) return std::vector<int32_t>();
    auto encoded = model->tokenizer->Encode(text, 64, true);
    EXPECT_TRUE(encoded.ok());
    return encoded.ok() ? encoded->ids : std::vector<int32_t>();
  };
  EXPECT_EQ(ids_of(), camembert_ids);
  WriteFile(dir / "tokenizer_config.json", R"({"tokenizer_class": "XLMRobertaTokenizer"})");
  std::vector<int32_t> xlmr = ids_of();
  ASSERT_EQ(xlmr.size(), camembert_ids.size());
  EXPECT_EQ(xlmr.front(), 0);
  EXPECT_EQ(xlmr.back(), 2);

  nlohmann::json config = testing::ReadJsonFile((dir / "config.json").string());
  config["model_type"] = "roberta";
  WriteFile(dir / "config.json", config.dump());
  EXPECT_EQ(ids_of(), xlmr);
  WriteFile(dir / "tokenizer_config.json", R"({"tokenizer_class": "CamembertTokenizerFast"})");
  EXPECT_EQ(ids_of(), camembert_ids);
  fs::remove_all(dir);
}

// An XLM-R folder whose tokenizer is its sentencepiece.bpe.model alone
// tokenizes as AutoTokenizer does, which converts the model into the fast
// class: as the tokenizer.json transformers' converter writes now (the
// fixture xlmr_unigram_strip.json: Precompiled, one grapheme cluster at a
// time, then trailing spaces stripped and runs made one), on the drawn
// texts of spaces, of grapheme clusters and of runs whose splits tie (the
// Python reference's ids). Until 2026-12-06 it normalized as sentencepiece
// does: 229 of the 303 texts of grapheme clusters gave other ids (the 400
// of spaces the same); and sentencepiece split its words: 266 of the 400
// texts of ties.
TEST(ModelCardLoad, XlmrSentencePieceFolderNormalizesAsTheFastClass) {
  const fs::path tokenizers = fs::path(ENCODERD_FIXTURES_DIR) / "tokenizers";
  const fs::path dir = UnigramXlmrFolder("fast_class");
  auto bundle = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  ASSERT_NE(bundle->tokenizer, nullptr) << bundle->tokenizer_note;
  EXPECT_EQ(bundle->tokenizer_path, (dir / "sentencepiece.bpe.model").string());
  EXPECT_NE(bundle->tokenizer->Describe().find("a grapheme cluster at a time"), std::string::npos)
      << bundle->tokenizer->Describe();
  for (const char* samples : {"grapheme_samples.json", "space_samples.json", "tie_samples.json"}) {
    SCOPED_TRACE(samples);
    nlohmann::json drawn;
    std::ifstream(tokenizers / samples) >> drawn;
    const auto& texts = drawn.at("texts");
    const auto& want = drawn.at("xlmr_unigram_strip");
    ASSERT_EQ(texts.size(), want.size());
    int differ = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto e = bundle->tokenizer->Encode(texts[i].get<std::string>(), 1024, false);
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      if (e->ids != want[i].get<std::vector<int32_t>>() && ++differ <= 3) {
        ADD_FAILURE() << "text " << i << ": " << texts[i].dump();
      }
    }
    EXPECT_EQ(differ, 0) << "of " << texts.size();
  }
  // Named by a card (fairseq's and torchtext's models, which run
  // sentencepiece itself), the model normalizes its text as sentencepiece does.
  WriteFile(dir / "encoderd.yaml",
            "tokenizer: {type: sentencepiece, file: sentencepiece.bpe.model}\n");
  auto named = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  ASSERT_NE(named->tokenizer, nullptr);
  EXPECT_EQ(named->tokenizer->Describe().find("a grapheme cluster at a time"), std::string::npos);
  const std::string nfd = "e\xcc\xa3\xcc\x82";  // U+1EC7 decomposed
  const auto slow = named->tokenizer->Encode(nfd, 64, false);
  const auto fast = bundle->tokenizer->Encode(nfd, 64, false);
  ASSERT_TRUE(slow.ok() && fast.ok());
  EXPECT_NE(slow->ids, fast->ids);
  fs::remove_all(dir);
}

// A folder's sentencepiece model with a piece <mask> of its own (spm_train's
// --user_defined_symbols; 3 of the fixture's 600 pieces) gives the text
// <mask> the id after the model's pieces (XLM-R's 601, CamemBERT's 604), as
// transformers does: its converters append <mask> all the same and the
// tokenizers library keeps a repeated token's last id (the Python
// reference's ids, mask_piece_samples.json, which the library gives too:
// check_tokenizer_json.py), also where the text reaches the model's pieces
// (a fullwidth <mask>, which the map normalizes). So does the tokenizer.json
// the converter writes of it, <mask> listed twice. Until 2026-12-07 the
// folder gave the model's piece's id (4, CamemBERT's 7) and the file was
// refused.
TEST(ModelCardLoad, SentencePieceMaskPieceTakesTheIdAfterThePieces) {
  const fs::path tokenizers = fs::path(ENCODERD_FIXTURES_DIR) / "tokenizers";
  nlohmann::json samples;
  std::ifstream(tokenizers / "mask_piece_samples.json") >> samples;
  const auto& texts = samples.at("texts");
  for (const auto& [fixture, layout, mask] :
       {std::tuple{"hf_xlmr_zip", "xlmr", 601}, std::tuple{"hf_camembert_zip", "camembert", 604}}) {
    SCOPED_TRACE(fixture);
    const auto& want = samples.at(layout);
    ASSERT_EQ(want.size(), texts.size());
    ASSERT_EQ(want[0].get<std::vector<int32_t>>()[8], mask);  // "Paris is the <mask>"
    const fs::path dir = CopyFixture(fixture, "mask_piece");
    fs::remove(dir / "tokenizer.json");
    fs::copy_file(tokenizers / "spm" / "sentencepiece.unigram_mask.model",
                  dir / "sentencepiece.bpe.model", fs::copy_options::overwrite_existing);
    auto from_model = server::LoadModelDirectory(dir.string());
    ASSERT_TRUE(from_model.ok()) << from_model.status().ToString();
    ASSERT_NE(from_model->tokenizer, nullptr) << from_model->tokenizer_note;
    fs::copy_file(tokenizers / "tokenizer_json" / (std::string(layout) + "_unigram_mask.json"),
                  dir / "tokenizer.json");
    auto from_json = server::LoadModelDirectory(dir.string());
    ASSERT_TRUE(from_json.ok()) << from_json.status().ToString();
    ASSERT_NE(from_json->tokenizer, nullptr) << from_json->tokenizer_note;
    EXPECT_EQ(from_json->tokenizer_path, (dir / "tokenizer.json").string());
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::string text = texts[i].get<std::string>();
      SCOPED_TRACE(text);
      for (const auto* bundle : {&*from_model, &*from_json}) {
        const auto encoded = bundle->tokenizer->Encode(text, 64, true);
        ASSERT_TRUE(encoded.ok()) << encoded.status().ToString();
        EXPECT_EQ(encoded->ids, want[i].get<std::vector<int32_t>>()) << bundle->tokenizer_path;
      }
    }
    fs::remove_all(dir);
  }
}

// A text pair is joined as the tokenizer's own files join it, as
// transformers does: a WordPiece file in a RoBERTa folder (RoBERTa models
// trained with a BERT vocabulary, e.g. KLUE's) writes "[CLS] a [SEP] b
// [SEP]", whether tokenizer.json or vocab.txt; byte-level BPE keeps the
// family's "<s> a </s></s> b </s>". (Was: the tokenizer.json refused, the
// folder left without a tokenizer; vocab.txt paired RoBERTa's way, with a
// second [SEP] after the first text.) And tokenizer_config.json's
// do_lower_case applies over the file's, as in transformers.
TEST(ModelCardLoad, TokenizerJsonPairsAndLowerCasing) {
  const fs::path tokenizers = fs::path(ENCODERD_FIXTURES_DIR) / "tokenizers" / "tokenizer_json";
  fs::path dir = CopyFixture("hf_roberta_safetensors", "tokenizer_json_pairs");
  auto bundle = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  EXPECT_EQ(bundle->pair_template, PairTemplate::kRoberta);
  fs::remove(dir / "vocab.json");
  fs::remove(dir / "merges.txt");
  const auto pair_pieces = [](const ModelBundle& b) {
    auto pair = EncodePair(*b.tokenizer, *b.pair_template, "a", "b", 16, false);
    return pair.ok() ? pair->pieces : std::vector<std::string>{pair.status().message()};
  };
  const std::vector<std::string> bert_pair = {"[CLS]", "a", "[SEP]", "b", "[SEP]"};
  // The fixture's embedding has fewer rows than the file has tokens: its
  // first 800 only.
  nlohmann::json json = nlohmann::json::parse(
      testing::ReadTextFile((tokenizers / "wordpiece_uncased.json").string()));
  nlohmann::json& vocab = json["model"]["vocab"];
  for (auto it = vocab.begin(); it != vocab.end();) it = *it >= 800 ? vocab.erase(it) : ++it;
  WriteFile(dir / "tokenizer.json", json.dump());
  bundle = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  ASSERT_NE(bundle->tokenizer, nullptr) << bundle->tokenizer_note;
  EXPECT_EQ(bundle->tokenizer_note, "");
  EXPECT_EQ(bundle->pair_template, PairTemplate::kBert);
  EXPECT_EQ(pair_pieces(*bundle), bert_pair);
  fs::remove(dir / "tokenizer.json");
  std::string vocab_txt;
  for (const std::string& token : testing::TinyWordPieceVocab()) vocab_txt += token + "\n";
  WriteFile(dir / "vocab.txt", vocab_txt);
  bundle = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  ASSERT_NE(bundle->tokenizer, nullptr) << bundle->tokenizer_note;
  EXPECT_EQ(bundle->pair_template, PairTemplate::kBert);
  EXPECT_EQ(pair_pieces(*bundle), bert_pair);
  // RoBERTa's one token type: the second text's type 1 is not given to it
  // (ServedModel::AsModelReads).
  EXPECT_FALSE(bundle->config.reads_token_types());
  // Named by a card, a WordPiece vocabulary follows the family.
  WriteFile(dir / "encoderd.yaml", "tokenizer: {type: wordpiece, file: vocab.txt}\n");
  bundle = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  EXPECT_EQ(bundle->pair_template, PairTemplate::kRoberta);
  fs::remove_all(dir);

  // A BERT folder with XLM-R's sentencepiece vocabulary (multilingual BERT
  // models distilled from XLM-R ship one) joins pairs as XLMRobertaTokenizer
  // does, every token type 0. (Was: "<s> a </s> b </s>", types 0 then 1.)
  dir = CopyFixture("hf_bert_legacy", "sentencepiece_pairs");
  fs::remove(dir / "vocab.txt");
  WriteFile(dir / "sentencepiece.bpe.model", testing::TinySentencePieceModel());
  bundle = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  ASSERT_NE(bundle->tokenizer, nullptr) << bundle->tokenizer_note;
  EXPECT_EQ(bundle->pair_template, PairTemplate::kRoberta);
  auto pair = EncodePair(*bundle->tokenizer, *bundle->pair_template, "a", "b", 16, false);
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  // (The tiny model has no piece for "\u2581b".)
  EXPECT_EQ(pair->pieces,
            (std::vector<std::string>{"<s>", "\u2581a", "</s>", "</s>", "\u2581", "b", "</s>"}));
  EXPECT_EQ(pair->token_types, std::vector<int32_t>(7, 0));
  fs::remove_all(dir);

  dir = CopyFixture("hf_bert_legacy", "tokenizer_json_lower");
  fs::remove(dir / "vocab.txt");
  fs::copy_file(tokenizers / "wordpiece_uncased.json", dir / "tokenizer.json");
  const auto pieces = [&]() {
    auto b = server::LoadModelDirectory(dir.string());
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    if (!b.ok() || !b->tokenizer) return std::vector<std::string>();
    auto enc = b->tokenizer->Encode("Hello", 16, false);
    return enc.ok() ? enc->pieces : std::vector<std::string>();
  };
  WriteFile(dir / "tokenizer_config.json", R"({"do_lower_case": true})");
  const std::vector<std::string> lower = pieces();
  WriteFile(dir / "tokenizer_config.json", R"({"do_lower_case": false})");
  const std::vector<std::string> cased = pieces();
  ASSERT_GE(lower.size(), 3u);
  EXPECT_EQ(lower[1].substr(0, 1), "h");
  EXPECT_NE(cased, lower);  // "Hello" keeps its capital: [UNK] or other pieces
  fs::remove_all(dir);
}

// A folder with both a tokenizer.json and its slow tokenizer's files (most
// Hugging Face folders) is read as transformers' AutoTokenizer reads it: the
// tokenizer.json; its slow files only when its pipeline is one encoderd does
// not reproduce, saying so; a damaged tokenizer.json is an error, as it is in
// transformers. (Was: vocab.txt read whatever the tokenizer.json said.)
TEST(ModelCardLoad, FoldersWithBothReadTokenizerJsonFirst) {
  const fs::path tokenizers = fs::path(ENCODERD_FIXTURES_DIR) / "tokenizers" / "tokenizer_json";
  const fs::path dir = CopyFixture("hf_bert_legacy", "both_tokenizers");
  const auto load = [&]() {
    auto b = server::LoadModelDirectory(dir.string());
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b;
  };
  const auto ids = [](const ModelBundle& b) {
    if (!b.tokenizer) return std::vector<int32_t>{};
    auto enc = b.tokenizer->Encode("hello world", 16, false);
    return enc.ok() ? enc->ids : std::vector<int32_t>{};
  };
  auto bundle = load();
  ASSERT_TRUE(bundle.ok());
  const std::vector<int32_t> from_vocab_txt = ids(*bundle);
  ASSERT_GE(from_vocab_txt.size(), 4u);
  // The same vocabulary as a tokenizer.json, but with the ids of "h" and
  // "w" swapped, so that which file was read shows in the ids.
  nlohmann::json json = nlohmann::json::parse(
      testing::ReadTextFile((tokenizers / "wordpiece_uncased.json").string()));
  nlohmann::json& vocab = json["model"]["vocab"];
  ASSERT_TRUE(vocab.contains("h") && vocab.contains("w"));
  std::swap(vocab["h"], vocab["w"]);
  WriteFile(dir / "tokenizer.json", json.dump());
  bundle = load();
  ASSERT_TRUE(bundle.ok());
  EXPECT_EQ(bundle->tokenizer_path, (dir / "tokenizer.json").string());
  EXPECT_EQ(bundle->tokenizer_note, "");
  auto direct = CreateTokenizerFromHfJson((dir / "tokenizer.json").string());
  ASSERT_TRUE(direct.ok()) << direct.status().ToString();
  auto expected = direct->tokenizer->Encode("hello world", 16, false);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(ids(*bundle), expected->ids);
  EXPECT_NE(ids(*bundle), from_vocab_txt);
  // A pipeline encoderd does not reproduce: vocab.txt, as before, and why.
  WriteFile(dir / "tokenizer.json", R"({"model": {"type": "WordLevel", "vocab": {}}})");
  bundle = load();
  ASSERT_TRUE(bundle.ok());
  EXPECT_EQ(bundle->tokenizer_path, (dir / "vocab.txt").string());
  EXPECT_EQ(ids(*bundle), from_vocab_txt);
  EXPECT_EQ(bundle->pair_template, PairTemplate::kBert);
  EXPECT_NE(bundle->tokenizer_note.find("tokenizer.json: model.type is \"WordLevel\""),
            std::string::npos)
      << bundle->tokenizer_note;
  // A damaged one fails the load, naming it.
  WriteFile(dir / "tokenizer.json", "{\"model\": ");
  auto damaged = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find("tokenizer.json: not valid JSON"), std::string::npos)
      << damaged.status().message();
  fs::remove_all(dir);
}

// Found by name, a tokenizer.json is read as the fast tokenizer class
// transformers' AutoTokenizer loads it with (tokenizer_config.json's
// tokenizer_class, else the model type's) reads it: BertTokenizerFast sets
// the normalizer from do_lower_case (default true), strip_accents (default:
// following it) and tokenize_chinese_chars; RobertaTokenizerFast sets
// ByteLevel's add_prefix_space (default false); PreTrainedTokenizerFast
// takes the file as it is. (Was: the file's own settings where
// tokenizer_config.json said none, whatever the class.)
TEST(ModelCardLoad, TokenizerJsonAsTransformersFastTokenizerClasses) {
  const fs::path tokenizers = fs::path(ENCODERD_FIXTURES_DIR) / "tokenizers" / "tokenizer_json";
  fs::path dir = CopyFixture("hf_bert_legacy", "tokenizer_json_classes");
  fs::remove(dir / "vocab.txt");
  nlohmann::json json = nlohmann::json::parse(
      testing::ReadTextFile((tokenizers / "wordpiece_uncased.json").string()));
  json["normalizer"]["lowercase"] = false;
  json["normalizer"]["strip_accents"] = nullptr;
  WriteFile(dir / "tokenizer.json", json.dump());
  const auto first_piece = [&](const std::string& text) {
    auto b = server::LoadModelDirectory(dir.string());
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    if (!b.ok()) return std::string("not loaded");
    if (!b->tokenizer) return "no tokenizer: " + b->tokenizer_note;
    auto enc = b->tokenizer->Encode(text, 16, false);
    return enc.ok() && enc->pieces.size() > 1 ? enc->pieces[1] : std::string("no pieces");
  };
  fs::remove(dir / "tokenizer_config.json");
  EXPECT_EQ(first_piece("Hello").substr(0, 1), "h");  // a BERT model: BertTokenizerFast
  WriteFile(dir / "tokenizer_config.json", R"({"model_max_length": 512})");
  EXPECT_EQ(first_piece("Hello").substr(0, 1), "h");
  WriteFile(dir / "tokenizer_config.json", R"({"do_lower_case": false})");
  const std::string cased = first_piece("Hello");
  EXPECT_NE(cased.substr(0, 1), "h") << cased;  // [UNK], or "H..." pieces
  WriteFile(dir / "tokenizer_config.json", R"({"tokenizer_class": "PreTrainedTokenizerFast"})");
  EXPECT_EQ(first_piece("Hello"), cased);
  WriteFile(dir / "tokenizer_config.json", R"({"tokenizer_class": "RobertaTokenizerFast"})");
  EXPECT_EQ(first_piece("Hello"), cased);
  WriteFile(dir / "tokenizer_config.json", R"({"tokenizer_class": "DistilBertTokenizer"})");
  EXPECT_EQ(first_piece("Hello").substr(0, 1), "h");
  // Lower-cased without stripping accents (until 2026-12-04 a normalizer
  // encoderd did not reproduce; the folder then had no tokenizer).
  WriteFile(dir / "tokenizer_config.json", R"({"do_lower_case": true, "strip_accents": false})");
  EXPECT_EQ(first_piece("Hello").substr(0, 1), "h");
  WriteFile(dir / "tokenizer_config.json", R"({"tokenizer_class": 3})");
  auto bad = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tokenizer_class must be a string"), std::string::npos)
      << bad.status().message();
  fs::remove_all(dir);

  // A RoBERTa model's byte-level BPE: add_prefix_space false unless
  // tokenizer_config.json says otherwise, whatever the file's (so too in
  // the families AutoTokenizer gives RobertaTokenizerFast).
  for (const char* fixture :
       {"hf_roberta_safetensors", "hf_data2vec_text", "hf_roberta_prelayernorm"}) {
    SCOPED_TRACE(fixture);
    dir = CopyFixture(fixture, "tokenizer_json_prefix");
    fs::remove(dir / "vocab.json");
    fs::remove(dir / "merges.txt");
    json = nlohmann::json::parse(testing::ReadTextFile((tokenizers / "bytebpe.json").string()));
    json["pre_tokenizer"]["add_prefix_space"] = true;
    WriteFile(dir / "tokenizer.json", json.dump());
    const std::string no_prefix = first_piece("hello");
    EXPECT_EQ(no_prefix.rfind("\u0120", 0), std::string::npos) << no_prefix;  // no "Ġ"
    WriteFile(dir / "tokenizer_config.json", R"({"add_prefix_space": true})");
    const std::string prefix = first_piece("hello");
    EXPECT_EQ(prefix.rfind("\u0120", 0), 0u) << prefix;
    WriteFile(dir / "tokenizer_config.json", R"({"tokenizer_class": "PreTrainedTokenizerFast"})");
    EXPECT_EQ(first_piece("hello"), prefix);
    fs::remove_all(dir);
  }
}

// fairseq / torchtext RoBERTa: GPT-2's encoder.json + vocab.bpe, numbered by
// fairseq's dict.txt, named by the card.
TEST(ModelCardLoad, TorchtextRobertaWithGpt2FilesAndAFairseqDictionary) {
  const fs::path dir = CopyFixture("torchtext_xlmr_legacy", "fairseq_bpe");
  const testing::TinyByteBpe tiny = testing::MakeTinyByteBpe(ByteLevelSpelling);
  WriteFile(dir / "encoder.json", tiny.gpt2_vocab_json);
  WriteFile(dir / "vocab.bpe", tiny.merges);
  const auto id_of = [&](const std::string& bytes) {
    const auto it = std::find(tiny.tokens.begin(), tiny.tokens.end(), ByteLevelSpelling(bytes));
    EXPECT_NE(it, tiny.tokens.end()) << bytes;
    return std::to_string(it - tiny.tokens.begin());
  };
  WriteFile(dir / "dict.txt", id_of("he") + " 9\n" + id_of("t") + " 8\n");
  WriteFile(dir / "encoderd.yaml",
            "family: torchtext-roberta\ncheckpoint: model.pt\nnum_heads: 4\npad_token_id: 1\n"
            "labels: [negative, neutral, positive]\ntokenizer:\n  type: byte-level-bpe\n"
            "  file: encoder.json\n  merges_file: vocab.bpe\n  fairseq_dict: dict.txt\n");
  auto bundle = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  ASSERT_NE(bundle->tokenizer, nullptr);
  const StatusOr<Encoding> enc = bundle->tokenizer->Encode("the x", 16, false);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(enc->ids, (std::vector<int32_t>{0, 5, 4, 3, 3, 2}));  // <s> t he <unk> <unk> </s>
  WriteFile(dir / "encoderd.yaml",
            "family: torchtext-roberta\ncheckpoint: model.pt\nnum_heads: 4\n"
            "tokenizer:\n  type: byte-level-bpe\n  file: encoder.json\n  fairseq_dict: ''\n");
  bundle = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(bundle.ok());
  EXPECT_NE(bundle.status().message().find("fairseq_dict must name a file"), std::string::npos)
      << bundle.status().message();
  fs::remove_all(dir);
}

// Each tokenizer key is read by one kind; on a card of any other kind it is
// an error, not silently ignored (a wordpiece card's bos_id or a
// sentencepiece card's lower_case once loaded as if absent).
TEST(ModelCardLoad, TokenizerKeysOfAnotherKindAreErrors) {
  const fs::path dir = CopyFixture("hf_bert_legacy", "tokenizer_keys");
  const std::string head = "tokenizer:\n  file: vocab.txt\n";
  const struct {
    const char* key;
    const char* line;
    const char* reader;
  } keys[] = {{"lower_case", "lower_case: true", "wordpiece"},
              {"strip_accents", "strip_accents: false", "wordpiece"},
              {"id_offset", "id_offset: 1", "sentencepiece"},
              {"{bos,eos,pad,unk}_id", "bos_id: 0", "sentencepiece"},
              {"{bos,eos,pad,unk}_id", "unk_id: 3", "sentencepiece"},
              {"merges_file", "merges_file: merges.txt", "byte-level-bpe"},
              {"fairseq_dict", "fairseq_dict: dict.txt", "byte-level-bpe"},
              {"add_prefix_space", "add_prefix_space: false", "byte-level-bpe"}};
  const char* kinds[] = {"wordpiece", "sentencepiece", "byte-level-bpe", "tokenizer-json"};
  int refused = 0;
  for (const auto& k : keys) {
    for (const char* kind : kinds) {
      if (std::string(kind) == k.reader) continue;
      SCOPED_TRACE(std::string(kind) + " with " + k.line);
      WriteFile(dir / "encoderd.yaml", head + "  type: " + kind + "\n  " + k.line + "\n");
      auto bundle = server::LoadModelDirectory(dir.string());
      ASSERT_FALSE(bundle.ok());
      EXPECT_EQ(bundle.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(
          bundle.status().message().find(std::string("tokenizer.") + k.key + " does not apply to " +
                                         kind + " (only " + k.reader + " reads it)"),
          std::string::npos)
          << bundle.status().message();
      ++refused;
    }
  }
  EXPECT_EQ(refused, 24);
  // The reading kind takes them: wordpiece's lower_case loads, and its
  // strip_accents reaches the tokenizer.
  WriteFile(dir / "encoderd.yaml", head + "  type: wordpiece\n  lower_case: true\n");
  auto bundle = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  ASSERT_NE(bundle->tokenizer, nullptr);
  EXPECT_EQ(bundle->tokenizer->Describe().find("accents"), std::string::npos);
  WriteFile(dir / "encoderd.yaml",
            head + "  type: wordpiece\n  lower_case: true\n  strip_accents: false\n");
  auto kept = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  ASSERT_NE(kept->tokenizer, nullptr);
  EXPECT_NE(kept->tokenizer->Describe().find("uncased, accents kept"), std::string::npos)
      << kept->tokenizer->Describe();
  fs::remove_all(dir);
}

// A fairseq checkpoint with several classification heads serves the one the
// card names; a name it lacks, or the key on another family, is an error.
TEST(ModelCardLoad, FairseqClassificationHeadByName) {
  const fs::path dir = CopyFixture("bad/fairseq_two_heads", "fairseq_heads");
  std::ifstream in(dir / "encoderd.yaml");
  const std::string base((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* head : {"nli", "sentiment"}) {
    SCOPED_TRACE(head);
    WriteFile(dir / "encoderd.yaml", base + "classification_head: " + head + "\n");
    auto bundle = server::LoadModelDirectory(dir.string());
    ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
    EXPECT_EQ(bundle->config.num_labels, 3);
    const std::string prefix = std::string("classification_heads.") + head + ".";
    for (const char* part : {"dense.weight", "dense.bias", "out_proj.weight", "out_proj.bias"}) {
      const std::string canonical = std::string(part).rfind("dense", 0) == 0
                                        ? "head.dense" + std::string(part).substr(5)
                                        : "head.out" + std::string(part).substr(8);
      EXPECT_EQ(bundle->weights.at(canonical).raw_data(),
                bundle->checkpoint_tensors.at(prefix + part).raw_data())
          << canonical;
    }
  }
  WriteFile(dir / "encoderd.yaml", base + "classification_head: mnli\n");
  auto bundle = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(bundle.ok());
  EXPECT_EQ(bundle.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bundle.status().message().find("no classification head 'mnli' (it has nli, sentiment)"),
            std::string::npos)
      << bundle.status().message();
  fs::remove_all(dir);
  const fs::path bert = CopyFixture("hf_bert_legacy", "head_on_bert");
  WriteFile(bert / "encoderd.yaml", "classification_head: nli\n");
  bundle = server::LoadModelDirectory(bert.string());
  ASSERT_FALSE(bundle.ok());
  EXPECT_NE(
      bundle.status().message().find("classification_head applies to family fairseq-roberta only"),
      std::string::npos)
      << bundle.status().message();
  fs::remove_all(bert);
}

TEST(ModelCardLoad, InconsistentCardsAreErrors) {
  const fs::path dir = CopyFixture("hf_bert_legacy", "inconsistent");
  WriteFile(dir / "encoderd.yaml", "num_heads: 8\n");
  auto heads = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(heads.ok());
  EXPECT_NE(heads.status().message().find("num_heads = 8"), std::string::npos)
      << heads.status().message();
  WriteFile(dir / "encoderd.yaml", "labels: [a, b]\n");
  auto labels = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(labels.ok());
  EXPECT_NE(labels.status().message().find("labels"), std::string::npos)
      << labels.status().message();
  WriteFile(dir / "encoderd.yaml", "max_tokens: 513\n");
  auto too_long = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("max_tokens = 513"), std::string::npos)
      << too_long.status().message();
  WriteFile(dir / "encoderd.yaml", "family: roberta\n");
  auto family = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(family.ok());
  EXPECT_NE(family.status().message().find("model_type"), std::string::npos)
      << family.status().message();
  fs::remove_all(dir);
}

// A fairseq checkpoint records its heads: its argparse args (fairseq 0.8 and
// 0.9, an argparse.Namespace whose attributes the loader keeps without
// running it), its omegaconf cfg (0.10: values in value nodes) or its cfg
// dict (0.12, the model section a Namespace). Its card then needs no
// num_heads (was: required), nor norm_first (the tensors say it); a card
// that says otherwise is an error naming both.
TEST(ModelCardLoad, FairseqCheckpointsGiveTheirHeads) {
  const auto without = [](const fs::path& dir, std::vector<std::string> keys) {
    std::ifstream in(dir / "encoderd.yaml");
    std::string card, line;
    while (std::getline(in, line)) {
      bool drop = false;
      for (const std::string& key : keys) drop = drop || line.rfind(key + ":", 0) == 0;
      if (!drop) card += line + "\n";
    }
    WriteFile(dir / "encoderd.yaml", card);
    return card;
  };
  for (const auto& [fixture, norm_first] :
       {std::pair<std::string, bool>{"fairseq_xlmr_legacy", false},  // args
        std::pair<std::string, bool>{"fairseq_xlmr_prenorm", true},  // cfg, omegaconf
        std::pair<std::string, bool>{"fairseq_xlmr_zip", false}}) {  // cfg, dict
    const fs::path dir = CopyFixture(fixture, "fairseq_recorded");
    auto with_card = server::LoadModelDirectory(dir.string());
    ASSERT_TRUE(with_card.ok()) << with_card.status().ToString();
    const std::string card = without(dir, {"num_heads", "norm_first"});
    EXPECT_EQ(card.find("num_heads"), std::string::npos) << card;
    auto bundle = server::LoadModelDirectory(dir.string());
    ASSERT_TRUE(bundle.ok()) << fixture << ": " << bundle.status().ToString();
    EXPECT_EQ(bundle->config.num_heads, with_card->config.num_heads) << fixture;
    EXPECT_EQ(bundle->config.num_heads, 4) << fixture;
    EXPECT_EQ(bundle->config.norm_first, norm_first) << fixture;
    EXPECT_EQ(bundle->weights.size(), with_card->weights.size()) << fixture;
    WriteFile(dir / "encoderd.yaml", card + "num_heads: 2\n");
    bundle = server::LoadModelDirectory(dir.string());
    ASSERT_FALSE(bundle.ok()) << fixture;
    EXPECT_NE(bundle.status().message().find(
                  "num_heads = 2 contradicts encoder_attention_heads = 4 recorded in"),
              std::string::npos)
        << bundle.status().message();
    fs::remove_all(dir);
  }
}

TEST(ModelCardLoad, CardOnlyFamiliesNeedHeadsAndPrefixes) {
  const fs::path dir = CopyFixture("generic_prenorm_relu", "prefixes");
  WriteFile(dir / "encoderd.yaml",
            "family: transformer-encoder\ncheckpoint: model.pt\nweights:\n"
            "  token_embedding: embedding\n  layers: encoder.layers\n");
  auto no_heads = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(no_heads.ok());
  EXPECT_NE(no_heads.status().message().find("num_heads is required"), std::string::npos)
      << no_heads.status().message();
  WriteFile(dir / "encoderd.yaml",
            "family: transformer-encoder\ncheckpoint: model.pt\nnum_heads: 4\nweights:\n"
            "  token_embedding: embedding\n");
  auto no_layers = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(no_layers.ok());
  EXPECT_NE(no_layers.status().message().find("weights.layers"), std::string::npos)
      << no_layers.status().message();
  WriteFile(dir / "encoderd.yaml",
            "family: transformer-encoder\ncheckpoint: model.pt\nnum_heads: 3\nweights:\n"
            "  token_embedding: embedding\n  layers: encoder.layers\n");
  auto bad_heads = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(bad_heads.ok());
  EXPECT_NE(bad_heads.status().message().find("num_heads = 3 does not divide hidden_size 64"),
            std::string::npos)
      << bad_heads.status().message();
  // Without a tokenizer entry the directory loads with none.
  WriteFile(dir / "encoderd.yaml",
            "family: transformer-encoder\ncheckpoint: model.pt\nnum_heads: 4\nweights:\n"
            "  token_embedding: embedding\n  layers: encoder.layers\n  final_norm: encoder.norm\n");
  auto plain = server::LoadModelDirectory(dir.string());
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->tokenizer, nullptr);
  EXPECT_EQ(plain->config.activation, Activation::kRelu);
  EXPECT_FALSE(plain->config.norm_first);
  fs::remove_all(dir);
}

TEST(ModelCardLoad, TorchtextWithoutCardIsAnError) {
  const fs::path dir = CopyFixture("torchtext_xlmr_legacy", "nocard");
  fs::remove(dir / "encoderd.yaml");
  auto bundle = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(bundle.ok());
  EXPECT_EQ(bundle.status().code(), StatusCode::kNotFound);
  fs::remove_all(dir);
}

TEST(ModelCardLoad, MissingCheckpointNamesTheCard) {
  const fs::path dir = CopyFixture("torchtext_xlmr_legacy", "nockpt");
  fs::remove(dir / "model.pt");
  auto bundle = server::LoadModelDirectory(dir.string());
  ASSERT_FALSE(bundle.ok());
  EXPECT_NE(bundle.status().message().find("encoderd.yaml: checkpoint 'model.pt'"),
            std::string::npos)
      << bundle.status().message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace encoderd
