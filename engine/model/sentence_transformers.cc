#include "engine/model/sentence_transformers.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/model/json_file.h"
#include "engine/model/model_spec.h"

namespace encoderd {
namespace {

using Json = nlohmann::json;

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
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

// The one pooling mode 1_Pooling/config.json turns on.
StatusOr<Pooling> ReadPooling(const std::string& path) {
  ASSIGN_OR_RETURN(Json json, ReadJsonFile(path));
  if (!json.is_object()) return InvalidArgument(path + ": expected a JSON object");
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
  if (on.empty()) return InvalidArgument(path + ": no pooling_mode_* is true");
  if (on.size() > 1) {
    return InvalidArgument(path + ": " + on[0]->key + " and " + on[1]->key +
                           " are both true (concatenated poolings are not supported)");
  }
  const auto prompt = json.find("include_prompt");
  if (prompt != json.end() && prompt->is_boolean() && !prompt->get<bool>()) {
    return InvalidArgument(path + ": include_prompt = false is not supported");
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
  const std::string kind = activation.substr(activation.find_last_of('.') + 1);
  if (kind != "Tanh" && kind != "Identity") {
    return InvalidArgument(path + ": activation_function " + activation +
                           " is not supported (Tanh or Identity)");
  }
  dense.tanh = kind == "Tanh";
  return dense;
}

Status ReadSentenceBertConfig(const std::string& path, SentenceTransformersLayout* layout) {
  if (!Exists(path)) return Status::Ok();
  ASSIGN_OR_RETURN(Json json, ReadJsonFile(path));
  if (!json.is_object()) return InvalidArgument(path + ": expected a JSON object");
  if (const auto it = json.find("max_seq_length"); it != json.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1) {
      return InvalidArgument(path + ": max_seq_length must be a positive integer, got " +
                             it->dump());
    }
    layout->max_seq_length = it->get<int64_t>();
  }
  if (const auto it = json.find("do_lower_case");
      it != json.end() && it->is_boolean() && it->get<bool>()) {
    return InvalidArgument(path +
                           ": do_lower_case = true is not supported (lowercase the text "
                           "before sending it, or use an uncased tokenizer)");
  }
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
  bool transformer = false, pooling = false;
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
    if (kind == "Transformer" && !transformer && !pooling && !layout.normalize) {
      transformer = true;
      layout.transformer_dir = module_dir;
      RETURN_IF_ERROR(ReadSentenceBertConfig(module_dir + "/sentence_bert_config.json", &layout));
      layout.modules.push_back("Transformer: weights, config.json and tokenizer in " + where);
    } else if (kind == "Pooling" && transformer && !pooling && !layout.normalize) {
      pooling = true;
      ASSIGN_OR_RETURN(layout.pooling, ReadPooling(module_dir + "/config.json"));
      layout.modules.push_back(std::string("Pooling: ") + PoolingName(layout.pooling) + " (from " +
                               module_dir + "/config.json)");
    } else if (kind == "Dense" && pooling && !layout.normalize) {
      ASSIGN_OR_RETURN(EncoderConfig::PoolDense dense, ReadDense(module_dir + "/config.json"));
      layout.dense.push_back({module_dir, dense});
      layout.modules.push_back("Dense: " + std::to_string(dense.in) + " -> " +
                               std::to_string(dense.out) + (dense.tanh ? ", tanh" : "") +
                               " (from " + module_dir + ")");
    } else if (kind == "Normalize" && pooling && !layout.normalize) {
      layout.normalize = true;
      layout.modules.push_back("Normalize: embeddings scaled to unit length");
    } else {
      return InvalidArgument(modules_path + ": module " + std::to_string(i) + " (" + name +
                             ", path " + where +
                             ") is not supported here: encoderd runs Transformer, then "
                             "Pooling, then optionally Dense modules and Normalize");
    }
  }
  if (!transformer || !pooling) {
    return InvalidArgument(modules_path + ": needs a Transformer and a Pooling module");
  }
  return std::optional<SentenceTransformersLayout>(std::move(layout));
}

}  // namespace encoderd
