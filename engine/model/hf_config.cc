#include "engine/model/hf_config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/model/json_file.h"

namespace encoderd {
namespace {

using Json = nlohmann::json;

StatusOr<Json> ReadJsonObject(const std::string& path) {
  ASSIGN_OR_RETURN(Json json, ReadJsonFile(path));
  if (!json.is_object()) return InvalidArgument(path + ": expected a JSON object");
  return json;
}

Status ReadInt(const Json& json, const std::string& path, const char* key, int64_t min,
               std::optional<int64_t>* out) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return Status::Ok();
  if (!it->is_number_integer()) {
    return InvalidArgument(path + ": " + key + " must be an integer, got " + it->dump());
  }
  const int64_t value = it->get<int64_t>();
  if (value < min || value > (int64_t{1} << 40)) {
    return InvalidArgument(path + ": " + key + " = " + std::to_string(value) + " is out of range");
  }
  *out = value;
  return Status::Ok();
}

Status ReadLabels(const Json& json, const std::string& path, std::vector<std::string>* labels) {
  auto it = json.find("id2label");
  if (it == json.end() || it->is_null()) return Status::Ok();
  if (!it->is_object()) return InvalidArgument(path + ": id2label must be an object");
  std::map<int64_t, std::string> by_id;
  for (auto& [key, value] : it->items()) {
    char* end = nullptr;
    const long long id = std::strtoll(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < 0 || !value.is_string()) {
      return InvalidArgument(path + ": id2label entry \"" + key + "\" must map an id to a name");
    }
    by_id[id] = value.get<std::string>();
  }
  int64_t expected = 0;
  for (auto& [id, name] : by_id) {
    if (id != expected++) {
      return InvalidArgument(path + ": id2label ids must be 0.." +
                             std::to_string(by_id.size() - 1));
    }
    labels->push_back(name);
  }
  return Status::Ok();
}

// sentence-transformers' CrossEncoder reads config.json's
// sentence_transformers.activation_fn where the key is there (a null value:
// its default, and the older key unread) and otherwise
// sbert_ce_default_activation_function (a null value counts as absent).
Status ReadCrossEncoderActivation(const Json& json, const std::string& path, HfConfig* config) {
  if (auto st = json.find("sentence_transformers"); st != json.end() && st->is_object()) {
    if (auto fn = st->find("activation_fn"); fn != st->end()) {
      if (fn->is_null()) return Status::Ok();
      if (!fn->is_string()) {
        return InvalidArgument(path + ": sentence_transformers.activation_fn must be a string");
      }
      config->cross_encoder_activation = fn->get<std::string>();
      config->cross_encoder_activation_from = path + ": sentence_transformers.activation_fn";
      return Status::Ok();
    }
  }
  if (auto fn = json.find("sbert_ce_default_activation_function");
      fn != json.end() && !fn->is_null()) {
    if (!fn->is_string()) {
      return InvalidArgument(path + ": sbert_ce_default_activation_function must be a string");
    }
    config->cross_encoder_activation = fn->get<std::string>();
    config->cross_encoder_activation_from = path + ": sbert_ce_default_activation_function";
  }
  return Status::Ok();
}

// A DeBERTa list key: a JSON list of names as they are, or one "a|b" string
// lower-cased and split, each name trimmed (as DebertaV2Config and
// DisentangledSelfAttention read them).
Status ReadNameList(const Json& json, const std::string& path, const char* key,
                    std::vector<std::string>* out) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return Status::Ok();
  std::vector<std::string> names;
  if (it->is_string()) {
    std::string text = it->get<std::string>();
    for (char& ch : text) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    size_t start = 0;
    while (start <= text.size()) {
      const size_t bar = std::min(text.find('|', start), text.size());
      names.push_back(text.substr(start, bar - start));
      start = bar + 1;
    }
  } else if (it->is_array()) {
    for (const Json& name : *it) {
      if (!name.is_string())
        return InvalidArgument(path + ": " + key + " must be a list of names, got " + it->dump());
      names.push_back(name.get<std::string>());
    }
  } else {
    return InvalidArgument(path + ": " + key + " must be a list of names or a string, got " +
                           it->dump());
  }
  for (std::string& name : names) {
    const size_t first = name.find_first_not_of(" \t\n\r");
    name = first == std::string::npos
               ? ""
               : name.substr(first, name.find_last_not_of(" \t\n\r") + 1 - first);
  }
  *out = std::move(names);
  return Status::Ok();
}

Status ReadFlag(const Json& json, const std::string& path, const char* key,
                std::optional<bool>* out) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean())
    return InvalidArgument(path + ": " + key + " must be true or false, got " + it->dump());
  *out = it->get<bool>();
  return Status::Ok();
}

// DeBERTa-v2's keys (HfConfig).
Status ReadDebertaKeys(const Json& json, const std::string& path, HfConfig* config) {
  RETURN_IF_ERROR(ReadFlag(json, path, "relative_attention", &config->relative_attention));
  RETURN_IF_ERROR(ReadFlag(json, path, "position_biased_input", &config->position_biased_input));
  RETURN_IF_ERROR(ReadFlag(json, path, "share_att_key", &config->share_att_key));
  constexpr int64_t kAny = -(int64_t{1} << 40);
  RETURN_IF_ERROR(
      ReadInt(json, path, "max_relative_positions", kAny, &config->max_relative_positions));
  RETURN_IF_ERROR(ReadInt(json, path, "position_buckets", kAny, &config->position_buckets));
  RETURN_IF_ERROR(ReadInt(json, path, "conv_kernel_size", 0, &config->conv_kernel_size));
  RETURN_IF_ERROR(ReadInt(json, path, "attention_head_size", 1, &config->attention_head_size));
  RETURN_IF_ERROR(ReadInt(json, path, "pooler_hidden_size", 1, &config->pooler_hidden_size));
  RETURN_IF_ERROR(ReadNameList(json, path, "pos_att_type", &config->pos_att_type));
  RETURN_IF_ERROR(ReadNameList(json, path, "norm_rel_ebd", &config->norm_rel_ebd));
  if (auto act = json.find("pooler_hidden_act"); act != json.end() && !act->is_null()) {
    if (!act->is_string())
      return InvalidArgument(path + ": pooler_hidden_act must be a name, got " + act->dump());
    config->pooler_hidden_act = act->get<std::string>();
  }
  return Status::Ok();
}

}  // namespace

const HfKeys& HfKeysFor(ModelFamily family) {
  static constexpr HfKeys kHuggingFace = {"hidden_size", "num_hidden_layers", "num_attention_heads",
                                          "intermediate_size", "hidden_act"};
  static constexpr HfKeys kDistilbert = {"dim", "n_layers", "n_heads", "hidden_dim", "activation"};
  return family == ModelFamily::kDistilbert ? kDistilbert : kHuggingFace;
}

bool ArchitecturesServeASequenceHead(const HfConfig& config) {
  const auto ends_with = [](const std::string& name, const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  bool other_task = false;
  for (const std::string& name : config.architectures) {
    if (ends_with(name, "ForSequenceClassification")) return true;
    other_task = other_task || ends_with(name, "ForTokenClassification") ||
                 ends_with(name, "ForMultipleChoice") || ends_with(name, "ForQuestionAnswering");
  }
  return !other_task;
}

StatusOr<HfConfig> ReadHfConfig(const std::string& path) {
  ASSIGN_OR_RETURN(Json json, ReadJsonObject(path));
  HfConfig config;
  auto type = json.find("model_type");
  if (type == json.end() || !type->is_string()) {
    return InvalidArgument(path +
                           ": model_type is missing (expected bert, roberta, xlm-roberta, "
                           "camembert, data2vec-text, roberta-prelayernorm, distilbert, electra, "
                           "mpnet or deberta-v2)");
  }
  config.model_type = type->get<std::string>();
  if (config.model_type == "bert") {
    config.family = ModelFamily::kBert;
  } else if (config.model_type == "roberta") {
    config.family = ModelFamily::kRoberta;
  } else if (config.model_type == "xlm-roberta") {
    config.family = ModelFamily::kXlmRoberta;
  } else if (config.model_type == "camembert") {
    config.family = ModelFamily::kCamembert;
  } else if (config.model_type == "data2vec-text") {
    config.family = ModelFamily::kData2VecText;
  } else if (config.model_type == "roberta-prelayernorm") {
    config.family = ModelFamily::kRobertaPreLayerNorm;
  } else if (config.model_type == "distilbert") {
    config.family = ModelFamily::kDistilbert;
  } else if (config.model_type == "electra") {
    config.family = ModelFamily::kElectra;
  } else if (config.model_type == "mpnet") {
    config.family = ModelFamily::kMpnet;
  } else if (config.model_type == "deberta-v2") {
    config.family = ModelFamily::kDeberta;
    RETURN_IF_ERROR(ReadDebertaKeys(json, path, &config));
  } else {
    return InvalidArgument(path + ": model_type \"" + config.model_type +
                           "\" is not supported (expected bert, roberta, xlm-roberta, camembert, "
                           "data2vec-text, roberta-prelayernorm, distilbert, electra, mpnet or "
                           "deberta-v2)");
  }
  const HfKeys& keys = HfKeysFor(config.family);
  RETURN_IF_ERROR(ReadInt(json, path, "vocab_size", 1, &config.vocab_size));
  RETURN_IF_ERROR(ReadInt(json, path, "embedding_size", 1, &config.embedding_size));
  RETURN_IF_ERROR(ReadInt(json, path, keys.hidden_size, 1, &config.hidden_size));
  RETURN_IF_ERROR(ReadInt(json, path, keys.num_hidden_layers, 1, &config.num_hidden_layers));
  RETURN_IF_ERROR(ReadInt(json, path, keys.num_attention_heads, 1, &config.num_attention_heads));
  RETURN_IF_ERROR(ReadInt(json, path, keys.intermediate_size, 1, &config.intermediate_size));
  RETURN_IF_ERROR(
      ReadInt(json, path, "max_position_embeddings", 1, &config.max_position_embeddings));
  RETURN_IF_ERROR(ReadInt(json, path, "type_vocab_size", 0, &config.type_vocab_size));
  RETURN_IF_ERROR(ReadInt(json, path, "relative_attention_num_buckets", 1,
                          &config.relative_attention_num_buckets));
  RETURN_IF_ERROR(ReadInt(json, path, "pad_token_id", 0, &config.pad_token_id));
  if (auto eps = json.find("layer_norm_eps"); eps != json.end() && !eps->is_null()) {
    if (!eps->is_number() || !(eps->get<double>() > 0.0)) {
      return InvalidArgument(path + ": layer_norm_eps must be a positive number, got " +
                             eps->dump());
    }
    config.layer_norm_eps = static_cast<float>(eps->get<double>());
  }
  if (auto act = json.find(keys.hidden_act); act != json.end() && !act->is_null()) {
    const std::string name = act->is_string() ? act->get<std::string>() : act->dump();
    // Only the exact (erf) GELU and ReLU; gelu_new / gelu_fast are tanh approximations.
    if (name != "gelu" && name != "relu") {
      return InvalidArgument(path + ": " + keys.hidden_act + " \"" + name +
                             "\" is not supported (expected gelu or relu)");
    }
    config.hidden_act = *ParseActivation(name);
  }
  // Settings of BERT's family that change what the layers compute, which
  // encoderd does not reproduce: refused, not ignored.
  if (auto type = json.find("position_embedding_type"); type != json.end() && !type->is_null()) {
    const std::string name = type->is_string() ? type->get<std::string>() : type->dump();
    if (name != "absolute") {
      return InvalidArgument(path + ": position_embedding_type \"" + name +
                             "\" is not supported (expected absolute: relative_key and "
                             "relative_key_query add distance embeddings to the attention scores)");
    }
  }
  if (auto decoder = json.find("is_decoder"); decoder != json.end() && !decoder->is_null()) {
    if (!decoder->is_boolean()) {
      return InvalidArgument(path + ": is_decoder must be true or false, got " + decoder->dump());
    }
    if (decoder->get<bool>()) {
      return InvalidArgument(path +
                             ": is_decoder is true: a decoder's attention is causal, which "
                             "encoderd does not run (it serves encoders)");
    }
  }
  RETURN_IF_ERROR(ReadLabels(json, path, &config.labels));
  if (auto arch = json.find("architectures"); arch != json.end() && !arch->is_null()) {
    if (!arch->is_array()) return InvalidArgument(path + ": architectures must be a list of names");
    for (const Json& name : *arch) {
      if (!name.is_string())
        return InvalidArgument(path + ": architectures must be a list of names");
      config.architectures.push_back(name.get<std::string>());
    }
  }
  if (auto problem = json.find("problem_type"); problem != json.end() && !problem->is_null()) {
    const std::string name = problem->is_string() ? problem->get<std::string>() : problem->dump();
    const std::optional<ProblemType> parsed = ParseProblemType(name);
    if (!parsed) {
      return InvalidArgument(path + ": problem_type \"" + name +
                             "\" is not one of single_label_classification, "
                             "multi_label_classification, regression");
    }
    config.problem_type = *parsed;
  }
  RETURN_IF_ERROR(ReadCrossEncoderActivation(json, path, &config));
  return config;
}

StatusOr<TokenizerConfig> ReadTokenizerConfig(const std::string& path) {
  ASSIGN_OR_RETURN(Json json, ReadJsonObject(path));
  TokenizerConfig config;
  const struct {
    const char* key;
    std::optional<bool>* value;
  } flags[] = {{"do_lower_case", &config.do_lower_case},
               {"strip_accents", &config.strip_accents},
               {"tokenize_chinese_chars", &config.tokenize_chinese_chars},
               {"add_prefix_space", &config.add_prefix_space},
               {"split_by_punct", &config.split_by_punct}};
  for (const auto& flag : flags) {
    auto it = json.find(flag.key);
    if (it == json.end() || it->is_null()) continue;
    if (!it->is_boolean()) {
      return InvalidArgument(path + ": " + flag.key + " must be true or false");
    }
    *flag.value = it->get<bool>();
  }
  if (auto it = json.find("tokenizer_class"); it != json.end() && !it->is_null()) {
    if (!it->is_string()) return InvalidArgument(path + ": tokenizer_class must be a string");
    config.tokenizer_class = it->get<std::string>();
  }
  return config;
}

namespace {

// A special token's content as tokenizer_config.json and
// special_tokens_map.json write it: a string, or an object with "content".
std::optional<std::string> SpecialContent(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object()) {
    const auto it = value.find("content");
    if (it != value.end() && it->is_string()) return it->get<std::string>();
  }
  return std::nullopt;
}

// The contents a tokenizer_config.json or special_tokens_map.json names
// special tokens.
void AddSpecialContents(const Json& json, std::set<std::string>* out) {
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    const auto it = json.find(key);
    if (it == json.end()) continue;
    if (std::optional<std::string> content = SpecialContent(*it)) out->insert(*content);
  }
  const auto it = json.find("additional_special_tokens");
  if (it == json.end() || !it->is_array()) return;
  for (const Json& token : *it) {
    if (std::optional<std::string> content = SpecialContent(token)) out->insert(*content);
  }
}

bool IsRegularFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

constexpr int64_t kMaxTokenId = (int64_t{1} << 30) - 1;

}  // namespace

StatusOr<std::vector<AddedToken>> ReadDeclaredAddedTokens(const std::string& dir,
                                                          std::string* declared_in) {
  declared_in->clear();
  std::vector<AddedToken> tokens;
  const std::string config_path = dir + "/tokenizer_config.json";
  Json config = Json::object(), special_tokens_map = Json::object();
  if (IsRegularFile(config_path)) {
    ASSIGN_OR_RETURN(config, ReadJsonObject(config_path));
  }
  if (const std::string map_path = dir + "/special_tokens_map.json"; IsRegularFile(map_path)) {
    ASSIGN_OR_RETURN(special_tokens_map, ReadJsonObject(map_path));
  }
  if (const auto decoder = config.find("added_tokens_decoder");
      decoder != config.end() && !decoder->is_null()) {
    if (!decoder->is_object()) {
      return InvalidArgument(config_path +
                             ": added_tokens_decoder must be an object of id -> token");
    }
    *declared_in = "tokenizer_config.json";
    for (const auto& item : decoder->items()) {
      // (Named, not bound: the lambda below captures them.)
      const std::string& key = item.key();
      const Json& entry = item.value();
      const std::string where =
          config_path + ": added_tokens_decoder[\"" + key.substr(0, 32) + "\"]";
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id > kMaxTokenId) {
        return InvalidArgument(where + ": the key is not a token id");
      }
      const auto content = entry.is_object() ? entry.find("content") : entry.end();
      if (!entry.is_object() || content == entry.end() || !content->is_string()) {
        return InvalidArgument(where + " is not a token with a \"content\" string");
      }
      AddedToken token{content->get<std::string>(), static_cast<int32_t>(id)};
      const auto flag = [&](const char* name, bool fallback, bool* out) -> Status {
        const auto it = entry.find(name);
        if (it == entry.end() || it->is_null()) {
          *out = fallback;
        } else if (it->is_boolean()) {
          *out = it->get<bool>();
        } else {
          return InvalidArgument(where + ": " + name + " must be true or false");
        }
        return Status::Ok();
      };
      RETURN_IF_ERROR(flag("special", false, &token.special));
      RETURN_IF_ERROR(flag("normalized", !token.special, &token.normalized));
      RETURN_IF_ERROR(flag("lstrip", false, &token.lstrip));
      RETURN_IF_ERROR(flag("rstrip", false, &token.rstrip));
      RETURN_IF_ERROR(flag("single_word", false, &token.single_word));
      tokens.push_back(std::move(token));
    }
  } else if (const std::string legacy_path = dir + "/added_tokens.json";
             IsRegularFile(legacy_path)) {
    ASSIGN_OR_RETURN(const Json legacy, ReadJsonObject(legacy_path));
    *declared_in = "added_tokens.json";
    std::set<std::string> specials;
    AddSpecialContents(config, &specials);
    AddSpecialContents(special_tokens_map, &specials);
    for (const auto& [content, id] : legacy.items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId) {
        return InvalidArgument(legacy_path + ": \"" + content.substr(0, 64) + "\" has the id " +
                               id.dump().substr(0, 32) + ", not a token id");
      }
      AddedToken token{content, id.get<int32_t>()};
      token.special = specials.count(content) > 0;
      token.normalized = !token.special;
      tokens.push_back(std::move(token));
    }
  }
  std::stable_sort(tokens.begin(), tokens.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  // Then the additional special tokens the fast class adds where they are
  // not added yet: the vocabulary's, not normalized.
  for (const Json* json : {&config, &special_tokens_map}) {
    const auto it = json->find("additional_special_tokens");
    if (it == json->end() || !it->is_array()) continue;
    for (const Json& value : *it) {
      if (std::optional<std::string> content = SpecialContent(value)) {
        AddedToken token{*content};
        token.normalized = false;
        tokens.push_back(std::move(token));
      }
    }
  }
  return tokens;
}

}  // namespace encoderd
