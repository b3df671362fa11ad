#include "engine/model/sentence_transformers.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "engine/model/json_file.h"
#include "engine/model/model_spec.h"

namespace encoderd {
namespace {

using Json = nlohmann::json;

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// A module's optional JSON file: nullopt when the folder has none.
StatusOr<std::optional<Json>> ReadOptionalObject(const std::string& path) {
  if (!Exists(path)) return std::optional<Json>();
  ASSIGN_OR_RETURN(Json json, ReadJsonFile(path));
  if (!json.is_object()) return InvalidArgument(path + ": expected a JSON object");
  return std::optional<Json>(std::move(json));
}

// A sequence length key of `json` (the file at `path`): nullopt when absent,
// null, or past any length (transformers' "no limit", int(1e30), and the
// like); a positive whole number otherwise, written as an integer or not.
StatusOr<std::optional<int64_t>> OptionalLength(const Json& json, const std::string& path,
                                                const char* key) {
  const auto it = json.find(key);
  if (it == json.end() || it->is_null()) return std::optional<int64_t>();
  constexpr double kNoLimit = 4.6e18;  // beyond any sequence, within int64_t
  if (it->is_number()) {
    const double value = it->get<double>();
    if (value >= kNoLimit) return std::optional<int64_t>();
    if (value >= 1 && value == std::floor(value))
      return std::optional<int64_t>(static_cast<int64_t>(value));
  }
  return InvalidArgument(path + ": " + key + " must be a positive integer, got " + it->dump());
}

// A string key of `json` (the file at `path`): nullopt when absent or null.
StatusOr<std::optional<std::string>> OptionalString(const Json& json, const std::string& path,
                                                    const char* key) {
  const auto it = json.find(key);
  if (it == json.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) return InvalidArgument(path + ": " + key + " must be a string");
  return std::optional<std::string>(it->get<std::string>());
}

// The module's folder: "" or a relative path inside `dir` (no "..", not absolute).
StatusOr<std::string> ModuleDir(const std::string& dir, const std::string& modules_path,
                                const Json& module, size_t index) {
  const auto path = module.find("path");
  if (path == module.end() || !path->is_string()) {
    return InvalidArgument(modules_path + ": module " + std::to_string(index) +
                           " has no \"path\" string");
  }
  const std::string rel = path->get<std::string>();
  bool escapes = !rel.empty() && rel[0] == '/';
  for (const auto& part : std::filesystem::path(rel)) escapes = escapes || part == "..";
  if (escapes) {
    return InvalidArgument(modules_path + ": module " + std::to_string(index) + " path \"" + rel +
                           "\" leaves the model folder");
  }
  return rel.empty() ? dir : dir + "/" + rel;
}

// sentence-transformers 5.4+'s Pooling config: "pooling_mode", a mode's
// name or a list of them (concatenated), which replaces the pooling_mode_*
// flags (read, when both are there, as it reads them: the flags ignored).
StatusOr<Pooling> ReadPoolingModeName(const std::string& path, const Json& value) {
  const Json* mode = &value;
  if (value.is_array() && value.size() > 1) {
    return InvalidArgument(path + ": pooling_mode " + value.dump() +
                           " concatenates poolings, which is not supported");
  }
  if (value.is_array() && value.size() == 1) mode = &value[0];
  const std::pair<const char*, Pooling> names[] = {{"cls", Pooling::kCls},
                                                   {"max", Pooling::kMax},
                                                   {"mean", Pooling::kMean},
                                                   {"mean_sqrt_len_tokens", Pooling::kMeanSqrtLen},
                                                   {"weightedmean", Pooling::kWeightedMean},
                                                   {"lasttoken", Pooling::kLastToken}};
  if (mode->is_string()) {
    for (const auto& [name, pooling] : names)
      if (mode->get<std::string>() == name) return pooling;
  }
  return InvalidArgument(path + ": pooling_mode " + value.dump() +
                         " is not supported (cls, max, mean, mean_sqrt_len_tokens, "
                         "weightedmean or lasttoken)");
}

// The one pooling mode 1_Pooling/config.json turns on.
// Its include_prompt (true where absent or null) goes to *include_prompt.
StatusOr<Pooling> ReadPooling(const std::string& path, bool* include_prompt) {
  ASSIGN_OR_RETURN(Json json, ReadJsonFile(path));
  if (!json.is_object()) return InvalidArgument(path + ": expected a JSON object");
  *include_prompt = true;
  if (const auto it = json.find("include_prompt"); it != json.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return InvalidArgument(path + ": include_prompt must be true or false, got " + it->dump());
    }
    *include_prompt = it->get<bool>();
  }
  if (const auto mode = json.find("pooling_mode"); mode != json.end() && !mode->is_null()) {
    return ReadPoolingModeName(path, *mode);
  }
  struct Mode {
    const char* key;
    Pooling pooling;
  };
  const Mode modes[] = {{"pooling_mode_cls_token", Pooling::kCls},
                        {"pooling_mode_mean_tokens", Pooling::kMean},
                        {"pooling_mode_max_tokens", Pooling::kMax},
                        {"pooling_mode_mean_sqrt_len_tokens", Pooling::kMeanSqrtLen},
                        {"pooling_mode_weightedmean_tokens", Pooling::kWeightedMean},
                        {"pooling_mode_lasttoken", Pooling::kLastToken}};
  std::vector<const Mode*> on;
  for (const Mode& mode : modes) {
    const auto it = json.find(mode.key);
    if (it == json.end() || it->is_null()) continue;
    if (!it->is_boolean()) {
      return InvalidArgument(path + ": " + mode.key + " must be true or false, got " + it->dump());
    }
    if (it->get<bool>()) on.push_back(&mode);
  }
  // A mode of a later sentence-transformers release, turned on: refused
  // rather than silently pooled another way.
  for (const auto& [key, value] : json.items()) {
    const bool known = std::any_of(std::begin(modes), std::end(modes),
                                   [&key = key](const Mode& m) { return key == m.key; });
    if (!known && key.rfind("pooling_mode_", 0) == 0 && value.is_boolean() && value.get<bool>())
      return InvalidArgument(path + ": " + key + " is not supported");
  }
  // No mode at all: sentence-transformers' default, mean (5.4+ reads flags
  // that are all false so too).
  if (on.empty()) return Pooling::kMean;
  if (on.size() > 1) {
    return InvalidArgument(path + ": " + on[0]->key + " and " + on[1]->key +
                           " are both true (concatenated poolings are not supported)");
  }
  return on[0]->pooling;
}

// A Dense module's config.json: in_features, out_features, bias,
// activation_function (Tanh or Identity).
StatusOr<EncoderConfig::PoolDense> ReadDense(const std::string& path) {
  ASSIGN_OR_RETURN(Json json, ReadJsonFile(path));
  if (!json.is_object()) return InvalidArgument(path + ": expected a JSON object");
  EncoderConfig::PoolDense dense;
  for (auto [key, out] : {std::pair{"in_features", &dense.in}, {"out_features", &dense.out}}) {
    const auto it = json.find(key);
    if (it == json.end() || !it->is_number_integer() || it->get<int64_t>() < 1 ||
        it->get<int64_t>() > (int64_t{1} << 20)) {
      return InvalidArgument(path + ": " + key + " must be a positive integer");
    }
    *out = it->get<int64_t>();
  }
  if (const auto it = json.find("bias"); it != json.end() && !it->is_null()) {
    if (!it->is_boolean()) return InvalidArgument(path + ": bias must be true or false");
    dense.bias = it->get<bool>();
  }
  std::string activation = "torch.nn.modules.activation.Tanh";  // sentence-transformers' default
  if (const auto it = json.find("activation_function"); it != json.end() && !it->is_null()) {
    if (!it->is_string()) return InvalidArgument(path + ": activation_function must be a string");
    activation = it->get<std::string>();
  }
  // Where 5.4+ reads and writes: anything but the pooled sentence
  // embedding, or an output added back to it, is another model.
  ASSIGN_OR_RETURN(const std::optional<std::string> input,
                   OptionalString(json, path, "module_input_name"));
  ASSIGN_OR_RETURN(const std::optional<std::string> output,
                   OptionalString(json, path, "module_output_name"));
  for (const auto& name : {input, output}) {
    if (name && *name != "sentence_embedding") {
      return InvalidArgument(path + ": a Dense module over \"" + *name +
                             "\" is not supported (encoderd applies it to the pooled "
                             "sentence_embedding)");
    }
  }
  if (const auto it = json.find("use_residual");
      it != json.end() && !(it->is_boolean() && !it->get<bool>()) && !it->is_null()) {
    return InvalidArgument(path + ": use_residual " + it->dump() + " is not supported");
  }
  const std::string kind = activation.substr(activation.find_last_of('.') + 1);
  if (kind != "Tanh" && kind != "Identity") {
    return InvalidArgument(path + ": activation_function " + activation +
                           " is not supported (Tanh or Identity)");
  }
  dense.tanh = kind == "Tanh";
  return dense;
}

Status ReadSentenceBertConfig(const std::string& path, SentenceTransformersLayout* layout,
                              std::string* transformer_task) {
  ASSIGN_OR_RETURN(const std::optional<Json> json, ReadOptionalObject(path));
  if (!json) return Status::Ok();
  ASSIGN_OR_RETURN(layout->max_seq_length, OptionalLength(*json, path, "max_seq_length"));
  if (const auto it = json->find("do_lower_case");
      it != json->end() && it->is_boolean() && it->get<bool>()) {
    return InvalidArgument(path +
                           ": do_lower_case = true is not supported (lowercase the text "
                           "before sending it, or use an uncased tokenizer)");
  }
  // sentence-transformers 5.4+: which AutoModel class the Transformer loads.
  ASSIGN_OR_RETURN(const std::optional<std::string> task,
                   OptionalString(*json, path, "transformer_task"));
  if (task && *task != "feature-extraction" && *task != "sequence-classification") {
    return InvalidArgument(path + ": transformer_task \"" + *task +
                           "\" is not supported (feature-extraction or "
                           "sequence-classification)");
  }
  if (task) *transformer_task = *task;
  // What the Transformer would do other than its plain forward over text
  // (5.4+): not reproduced, so refused rather than answered otherwise.
  if (const auto it = json->find("processing_kwargs");
      it != json->end() && !it->is_null() && !(it->is_object() && it->empty())) {
    return InvalidArgument(path + ": processing_kwargs " + it->dump() + " is not supported");
  }
  // Only text, read by the model's forward into the task's output (5.4
  // adds a "message" entry, read through the tokenizer's chat template,
  // where the tokenizer has one).
  if (const auto it = json->find("modality_config"); it != json->end() && !it->is_null()) {
    const std::string output = task.value_or("feature-extraction") == "feature-extraction"
                                   ? "last_hidden_state"
                                   : "logits";
    const Json plain = {{"text", {{"method", "forward"}, {"method_output_name", output}}}};
    if (*it != plain) {
      return InvalidArgument(path + ": modality_config " + it->dump() + " is not supported (" +
                             plain.dump() + ")");
    }
  }
  for (const char* key : {"query_length", "document_length", "query_expansion"}) {
    if (const auto it = json->find(key); it != json->end() && !it->is_null())
      return InvalidArgument(path + ": " + key + " (a multi-vector model's) is not supported");
  }
  return Status::Ok();
}

// The keys of config_sentence_transformers.json that mean something only
// once the folder is known to be a SentenceTransformer or a CrossEncoder.
struct ClassKeys {
  std::optional<std::string> default_prompt_name;  // ResolvePrompts
  Json truncate_dim;                               // ReadTruncateDim; null where absent
};

// config_sentence_transformers.json: the model's class (model_type, written
// since sentence-transformers 5.0), a CrossEncoder's activation_fn (5.4+),
// the prompts and the name of the one every text gets by default (3.0+),
// a SentenceTransformer's truncate_dim (5.4+). `names_type`: whether it says
// the model_type.
Status ReadModelConfig(const std::string& path, SentenceTransformersLayout* layout,
                       bool* names_type, ClassKeys* later) {
  ASSIGN_OR_RETURN(const std::optional<Json> json, ReadOptionalObject(path));
  if (!json) return Status::Ok();
  ASSIGN_OR_RETURN(const std::optional<std::string> type,
                   OptionalString(*json, path, "model_type"));
  if (type && *type != "SentenceTransformer" && *type != "CrossEncoder") {
    return InvalidArgument(path + ": model_type \"" + *type +
                           "\" is not supported (SentenceTransformer or CrossEncoder)");
  }
  layout->cross_encoder = type == "CrossEncoder";
  *names_type = type.has_value();
  ASSIGN_OR_RETURN(const std::optional<std::string> activation,
                   OptionalString(*json, path, "activation_fn"));
  layout->activation_fn = activation.value_or("");
  // The prompts a request may name (prompt_name), null ones as "";
  // ResolvePrompts adds the defaults once the model's class is known.
  if (const auto prompts = json->find("prompts"); prompts != json->end() && !prompts->is_null()) {
    if (!prompts->is_object()) return InvalidArgument(path + ": prompts must be an object");
    for (const auto& [name, prompt] : prompts->items()) {
      if (!prompt.is_null() && !prompt.is_string()) {
        return InvalidArgument(path + ": prompts[\"" + name + "\"] must be a string");
      }
      const std::string text = prompt.is_string() ? prompt.get<std::string>() : "";
      if (text.find('\0') != std::string::npos) {
        return InvalidArgument(path + ": prompts[\"" + name + "\"] contains a NUL byte");
      }
      layout->prompts[name] = text;
    }
  }
  ASSIGN_OR_RETURN(later->default_prompt_name, OptionalString(*json, path, "default_prompt_name"));
  if (const auto it = json->find("truncate_dim"); it != json->end()) later->truncate_dim = *it;
  return Status::Ok();
}

// The size a SentenceTransformer's embeddings are cut to (5.4+; a
// CrossEncoder does not read the key): a positive integer, null for none.
Status ReadTruncateDim(const std::string& path, const Json& value,
                       SentenceTransformersLayout* layout) {
  if (value.is_null()) return Status::Ok();
  if (value.is_number_unsigned() && value.get<uint64_t>() >= 1) {
    layout->truncate_dim = static_cast<int64_t>(
        std::min<uint64_t>(value.get<uint64_t>(), std::numeric_limits<int64_t>::max()));
  } else if (value.is_number_integer() && value.get<int64_t>() >= 1) {
    layout->truncate_dim = value.get<int64_t>();
  } else {
    return InvalidArgument(path + ": truncate_dim must be a positive integer or null, got " +
                           value.dump());
  }
  return Status::Ok();
}

// The prompts once the folder is known to be a SentenceTransformer or a
// CrossEncoder: a SentenceTransformer (5.0+) starts from empty "query" and
// "document" prompts, a CrossEncoder from none, whether or not the folder
// has config_sentence_transformers.json; then the default prompt, which is
// put in front of every text whose request names no other prompt, as
// sentence-transformers does where the caller names none.
Status ResolvePrompts(const std::string& path, const std::optional<std::string>& default_name,
                      SentenceTransformersLayout* layout) {
  if (!layout->cross_encoder) {
    layout->prompts.emplace("query", "");
    layout->prompts.emplace("document", "");
  }
  if (!default_name) return Status::Ok();
  const auto prompt = layout->prompts.find(*default_name);
  if (prompt == layout->prompts.end()) {
    return InvalidArgument(path + ": default_prompt_name \"" + *default_name +
                           "\" is not a key of prompts");
  }
  layout->default_prompt_name = *default_name;
  layout->default_prompt = prompt->second;
  return Status::Ok();
}

// The limit sentence-transformers takes when sentence_bert_config.json
// gives none: the tokenizer's model_max_length (transformers' "no limit"
// value, 1e30, and larger numbers leave the position table's).
Status ReadTokenizerLimit(const std::string& path, SentenceTransformersLayout* layout) {
  ASSIGN_OR_RETURN(const std::optional<Json> json, ReadOptionalObject(path));
  if (!json) return Status::Ok();
  ASSIGN_OR_RETURN(layout->max_seq_length, OptionalLength(*json, path, "model_max_length"));
  return Status::Ok();
}

}  // namespace

StatusOr<std::optional<SentenceTransformersLayout>> ReadSentenceTransformers(
    const std::string& dir) {
  const std::string modules_path = dir + "/modules.json";
  if (!Exists(modules_path)) return std::optional<SentenceTransformersLayout>();
  ASSIGN_OR_RETURN(Json modules, ReadJsonFile(modules_path));
  if (!modules.is_array() || modules.empty()) {
    return InvalidArgument(modules_path + ": expected a non-empty JSON array of modules");
  }
  SentenceTransformersLayout layout;
  const std::string model_config = dir + "/config_sentence_transformers.json";
  bool names_type = false;
  ClassKeys class_keys;
  RETURN_IF_ERROR(ReadModelConfig(model_config, &layout, &names_type, &class_keys));
  std::string transformer_task;
  bool transformer = false;
  for (size_t i = 0; i < modules.size(); ++i) {
    const Json& module = modules[i];
    const auto type = module.is_object() ? module.find("type") : module.end();
    if (type == module.end() || !type->is_string()) {
      return InvalidArgument(modules_path + ": module " + std::to_string(i) +
                             " has no \"type\" string");
    }
    const std::string name = type->get<std::string>();
    ASSIGN_OR_RETURN(std::string module_dir, ModuleDir(dir, modules_path, module, i));
    const std::string where = module_dir == dir ? "the folder itself" : module_dir;
    const std::string kind = name.substr(name.find_last_of('.') + 1);
    const bool pooled = layout.pooling.has_value();
    if (kind == "Transformer" && !transformer) {
      transformer = true;
      layout.transformer_dir = module_dir;
      RETURN_IF_ERROR(ReadSentenceBertConfig(module_dir + "/sentence_bert_config.json", &layout,
                                             &transformer_task));
      if (!layout.max_seq_length) {
        RETURN_IF_ERROR(ReadTokenizerLimit(module_dir + "/tokenizer_config.json", &layout));
      }
      layout.modules.push_back("Transformer: weights, config.json and tokenizer in " + where);
    } else if (kind == "Pooling" && transformer && !pooled && !layout.normalize) {
      ASSIGN_OR_RETURN(layout.pooling,
                       ReadPooling(module_dir + "/config.json", &layout.include_prompt));
      layout.modules.push_back(std::string("Pooling: ") + PoolingName(*layout.pooling) +
                               (layout.include_prompt ? "" : ", the prompt's tokens left out") +
                               " (from " + module_dir + "/config.json)");
    } else if (kind == "Dense" && pooled && !layout.normalize) {
      ASSIGN_OR_RETURN(EncoderConfig::PoolDense dense, ReadDense(module_dir + "/config.json"));
      layout.dense.push_back({module_dir, dense});
      layout.modules.push_back("Dense: " + std::to_string(dense.in) + " -> " +
                               std::to_string(dense.out) + (dense.tanh ? ", tanh" : "") +
                               " (from " + module_dir + ")");
    } else if (kind == "Normalize" && pooled && !layout.normalize) {
      layout.normalize = true;
      layout.modules.push_back("Normalize: embeddings scaled to unit length");
    } else {
      return InvalidArgument(modules_path + ": module " + std::to_string(i) + " (" + name +
                             ", path " + where +
                             ") is not supported here: encoderd runs Transformer, then "
                             "Pooling, then optionally Dense modules and Normalize, or a "
                             "CrossEncoder's one Transformer");
    }
  }
  // A CrossEncoder of sentence-transformers 5.4+: one Transformer module
  // whose model is a sequence classifier (AutoModelForSequenceClassification).
  const bool classifier = transformer_task == "sequence-classification";
  if (layout.cross_encoder || classifier) {
    // (Without a model_type, sentence-transformers loads the folder with
    // whichever class the caller picks.)
    if (!layout.cross_encoder && names_type) {
      return InvalidArgument(model_config +
                             ": transformer_task \"sequence-classification\" "
                             "needs model_type \"CrossEncoder\"");
    }
    if (!classifier || modules.size() != 1) {
      return InvalidArgument(modules_path +
                             ": a CrossEncoder is served as one Transformer module with "
                             "transformer_task \"sequence-classification\" (a classifier "
                             "checkpoint); this one has " +
                             std::to_string(modules.size()) + " module(s) and transformer_task \"" +
                             (transformer_task.empty() ? "feature-extraction" : transformer_task) +
                             "\"");
    }
    layout.cross_encoder = true;
    layout.modules.back() += " (a CrossEncoder: the checkpoint's classifier gives the score" +
                             (layout.activation_fn.empty() ? std::string(")")
                                                           : ", then " + layout.activation_fn +
                                                                 " from " + model_config + ")");
  } else if (!transformer || !layout.pooling) {
    return InvalidArgument(modules_path + ": needs a Transformer and a Pooling module");
  }
  if (!layout.cross_encoder)
    RETURN_IF_ERROR(ReadTruncateDim(model_config, class_keys.truncate_dim, &layout));
  RETURN_IF_ERROR(ResolvePrompts(model_config, class_keys.default_prompt_name, &layout));
  return std::optional<SentenceTransformersLayout>(std::move(layout));
}

}  // namespace encoderd
