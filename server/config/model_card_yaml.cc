#include "server/config/model_card_yaml.h"

#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <new>
#include <optional>
#include <set>

#include "core/file.h"
#include "engine/model/model_directory.h"

namespace encoderd::server {
namespace {

// Error context for one key: "encoderd.yaml:7: num_heads".
class Where {
 public:
  Where(const std::string& source, const std::string& key, const YAML::Node& node)
      : text_(source + ":" + std::to_string(node.Mark().line + 1) + ": " + key) {}
  Status Error(const std::string& what) const { return InvalidArgument(text_ + " " + what); }

 private:
  std::string text_;
};

// A key given twice in one mapping is an error, as in the server's config:
// until 2026-12-04 the second replaced the first (a second `labels` list was
// appended to it).
Status FirstTime(const std::string& key, const Where& where, std::set<std::string>* seen) {
  if (!seen->insert(key).second) return where.Error("is given twice");
  return Status::Ok();
}

Status ReadString(const YAML::Node& node, const Where& where, std::string* out) {
  if (!node.IsScalar()) return where.Error("must be a string");
  *out = node.Scalar();
  return Status::Ok();
}

template <typename Int>
Status ReadInt(const YAML::Node& node, const Where& where, int64_t min, std::optional<Int>* out) {
  Int value{};
  if (!node.IsScalar() || !YAML::convert<Int>::decode(node, value)) {
    return where.Error("must be an integer, got '" + (node.IsScalar() ? node.Scalar() : "?") + "'");
  }
  if (value < min) return where.Error("must be at least " + std::to_string(min));
  *out = value;
  return Status::Ok();
}

Status ReadBool(const YAML::Node& node, const Where& where, std::optional<bool>* out) {
  bool value = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
    return where.Error("must be true or false");
  }
  *out = value;
  return Status::Ok();
}

template <typename Enum>
Status ReadEnum(const YAML::Node& node, const Where& where,
                std::optional<Enum> (*parse)(const std::string&), const char* allowed,
                std::optional<Enum>* out) {
  std::string name;
  RETURN_IF_ERROR(ReadString(node, where, &name));
  *out = parse(name);
  if (!*out) return where.Error("'" + name + "' is not one of " + allowed);
  return Status::Ok();
}

Status ReadTokenizer(const YAML::Node& node, const std::string& source, TokenizerCard* card) {
  if (!node.IsMap()) return Where(source, "tokenizer", node).Error("must be a mapping");
  bool has_type = false;
  std::set<std::string> seen;
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    const YAML::Node& value = entry.second;
    const Where where(source, "tokenizer." + key, entry.first);
    RETURN_IF_ERROR(FirstTime(key, where, &seen));
    if (key == "type") {
      std::string type;
      RETURN_IF_ERROR(ReadString(value, where, &type));
      const TokenizerKind kinds[] = {TokenizerKind::kWordPiece, TokenizerKind::kSentencePiece,
                                     TokenizerKind::kByteLevelBpe, TokenizerKind::kTokenizerJson};
      const TokenizerKind* kind =
          std::find_if(std::begin(kinds), std::end(kinds),
                       [&](TokenizerKind k) { return type == TokenizerKindName(k); });
      if (kind == std::end(kinds)) {
        return where.Error("'" + type +
                           "' is not one of wordpiece, sentencepiece, byte-level-bpe, "
                           "tokenizer-json");
      }
      card->kind = *kind;
      has_type = true;
    } else if (key == "file") {
      RETURN_IF_ERROR(ReadString(value, where, &card->file));
    } else if (key == "merges_file") {
      RETURN_IF_ERROR(ReadString(value, where, &card->merges_file));
    } else if (key == "fairseq_dict") {
      RETURN_IF_ERROR(ReadString(value, where, &card->fairseq_dict));
      if (card->fairseq_dict.empty()) return where.Error("must name a file");
    } else if (key == "add_prefix_space") {
      RETURN_IF_ERROR(ReadBool(value, where, &card->add_prefix_space));
    } else if (key == "lower_case") {
      RETURN_IF_ERROR(ReadBool(value, where, &card->lower_case));
    } else if (key == "strip_accents") {
      RETURN_IF_ERROR(ReadBool(value, where, &card->strip_accents));
    } else if (key == "id_offset") {
      RETURN_IF_ERROR(ReadInt(value, where, 0, &card->id_offset));
    } else if (key == "bos_id") {
      RETURN_IF_ERROR(ReadInt(value, where, 0, &card->bos));
    } else if (key == "eos_id") {
      RETURN_IF_ERROR(ReadInt(value, where, 0, &card->eos));
    } else if (key == "pad_id") {
      RETURN_IF_ERROR(ReadInt(value, where, 0, &card->pad));
    } else if (key == "unk_id") {
      RETURN_IF_ERROR(ReadInt(value, where, 0, &card->unk));
    } else {
      return where.Error("is not a known key");
    }
  }
  const Where where(source, "tokenizer", node);
  if (!has_type)
    return where.Error("needs a type (wordpiece, sentencepiece, byte-level-bpe or tokenizer-json)");
  if (card->file.empty()) return where.Error("needs a file");
  return Status::Ok();
}

Status ReadWeights(const YAML::Node& node, const std::string& source, WeightPrefixes* w) {
  if (!node.IsMap()) return Where(source, "weights", node).Error("must be a mapping");
  std::set<std::string> seen;
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    const Where where(source, "weights." + key, entry.first);
    RETURN_IF_ERROR(FirstTime(key, where, &seen));
    std::string* field = key == "token_embedding"      ? &w->token_embedding
                         : key == "position_embedding" ? &w->position_embedding
                         : key == "embedding_norm"     ? &w->embedding_norm
                         : key == "layers"             ? &w->layers
                         : key == "final_norm"         ? &w->final_norm
                         : key == "head_dense"         ? &w->head_dense
                         : key == "head_out"           ? &w->head_out
                                                       : nullptr;
    if (!field) return where.Error("is not a known key");
    RETURN_IF_ERROR(ReadString(entry.second, where, field));
  }
  return Status::Ok();
}

Status ReadEntry(const std::string& key, const YAML::Node& value, const Where& where,
                 const std::string& source, ModelCard* card) {
  if (key == "family") {
    return ReadEnum(
        value, where, ParseModelFamily,
        "bert, roberta, xlm-roberta, camembert, data2vec-text, roberta-prelayernorm, distilbert, "
        "electra, mpnet, deberta-v2, torchtext-roberta, fairseq-roberta, transformer-encoder",
        &card->family);
  }
  if (key == "checkpoint") return ReadString(value, where, &card->checkpoint);
  if (key == "state_dict_key") return ReadString(value, where, &card->state_dict_key);
  if (key == "classification_head") {
    RETURN_IF_ERROR(ReadString(value, where, &card->classification_head));
    if (card->classification_head.empty()) return where.Error("must name a head");
    return Status::Ok();
  }
  if (key == "tokenizer") {
    card->tokenizer.emplace();
    return ReadTokenizer(value, source, &*card->tokenizer);
  }
  if (key == "num_heads") return ReadInt(value, where, 1, &card->num_heads);
  if (key == "max_tokens") return ReadInt(value, where, 1, &card->max_tokens);
  if (key == "pad_token_id") return ReadInt(value, where, 0, &card->pad_token_id);
  if (key == "norm_first") return ReadBool(value, where, &card->norm_first);
  if (key == "mask_pad_keys") return ReadBool(value, where, &card->mask_pad_keys);
  if (key == "layer_norm_eps") {
    double eps = 0;
    if (!value.IsScalar() || !YAML::convert<double>::decode(value, eps) || !(eps > 0) || eps > 1) {
      return where.Error("must be a positive number below 1");
    }
    card->layer_norm_eps = static_cast<float>(eps);
    return Status::Ok();
  }
  if (key == "activation" || key == "head_activation") {
    return ReadEnum(value, where, ParseActivation, "gelu, relu, tanh",
                    key == "activation" ? &card->activation : &card->head_activation);
  }
  if (key == "position_rule") {
    return ReadEnum(value, where, ParsePositionRule, "none, from_zero, after_padding_idx",
                    &card->position_rule);
  }
  if (key == "pooling")
    return ReadEnum(value, where, ParsePooling,
                    "cls, mean, max, mean_sqrt_len, weighted_mean, last_token", &card->pooling);
  if (key == "labels") {
    if (!value.IsSequence()) return where.Error("must be a list of names");
    for (const auto& label : value) {
      if (!label.IsScalar()) return where.Error("must be a list of names");
      card->labels.push_back(label.Scalar());
    }
    return Status::Ok();
  }
  if (key == "weights") return ReadWeights(value, source, &card->weights);
  return where.Error("is not a known key");
}

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

StatusOr<ModelCard> ParseModelCard(const std::string& yaml_text, const std::string& source) {
  ModelCard card;
  card.source = source;
  try {
    const YAML::Node root = YAML::Load(yaml_text);
    if (root.IsNull()) return card;
    if (!root.IsMap()) return InvalidArgument(source + ": expected a mapping of keys to values");
    std::set<std::string> seen;
    for (const auto& entry : root) {
      if (!entry.first.IsScalar()) {
        return Where(source, "?", entry.first).Error("keys must be plain names");
      }
      const std::string key = entry.first.Scalar();
      const Where where(source, key, entry.first);
      RETURN_IF_ERROR(FirstTime(key, where, &seen));
      RETURN_IF_ERROR(ReadEntry(key, entry.second, where, source, &card));
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(source + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  return card;
}

StatusOr<ModelCard> ReadModelCard(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path, "model card"));
  return ParseModelCard(text, path);
}

StatusOr<ModelBundle> LoadModelDirectory(const std::string& dir) {
  const std::string card_path = dir + "/" + kModelCardFile;
  std::optional<ModelCard> card;
  if (IsFile(card_path)) {
    ASSIGN_OR_RETURN(card, ReadModelCard(card_path));
  }
  try {
    return LoadModelBundle(dir, card);
  } catch (const std::bad_alloc&) {  // a model too large for this memory
    return ResourceExhausted(dir + ": not enough memory to load the model");
  }
}

}  // namespace encoderd::server
