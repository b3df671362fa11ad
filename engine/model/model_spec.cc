#include "engine/model/model_spec.h"

#include <cmath>
#include <string>

namespace encoderd {
namespace {

template <typename Enum, size_t N>
std::optional<Enum> ParseByName(const std::string& name, const Enum (&values)[N],
                                const char* (*to_name)(Enum)) {
  for (Enum value : values) {
    if (name == to_name(value)) return value;
  }
  return std::nullopt;
}

Status Bad(const std::string& field, const std::string& why) {
  return InvalidArgument("encoder config: " + field + " " + why);
}

}  // namespace

bool IsHuggingFaceFamily(ModelFamily family) {
  return family == ModelFamily::kBert || family == ModelFamily::kRoberta ||
         family == ModelFamily::kXlmRoberta || family == ModelFamily::kCamembert ||
         family == ModelFamily::kData2VecText || family == ModelFamily::kRobertaPreLayerNorm ||
         family == ModelFamily::kDistilbert || family == ModelFamily::kElectra ||
         family == ModelFamily::kMpnet || family == ModelFamily::kDeberta;
}

const char* HeadOutputName(HeadOutput output) {
  switch (output) {
    case HeadOutput::kSoftmax:
      return "softmax";
    case HeadOutput::kSigmoid:
      return "sigmoid";
    case HeadOutput::kLogits:
      return "logits";
    case HeadOutput::kTanh:
      return "tanh";
  }
  return "?";
}

std::optional<ProblemType> ParseProblemType(const std::string& name) {
  if (name == "single_label_classification") return ProblemType::kSingleLabel;
  if (name == "multi_label_classification") return ProblemType::kMultiLabel;
  if (name == "regression") return ProblemType::kRegression;
  return std::nullopt;
}

std::optional<PairTemplate> TextPairTemplate(ModelFamily family) {
  switch (family) {
    case ModelFamily::kBert:
    case ModelFamily::kDistilbert:
    case ModelFamily::kElectra:
    case ModelFamily::kDeberta:
      return PairTemplate::kBert;
    case ModelFamily::kRoberta:
    case ModelFamily::kXlmRoberta:
    case ModelFamily::kCamembert:
    case ModelFamily::kData2VecText:
    case ModelFamily::kRobertaPreLayerNorm:
    case ModelFamily::kMpnet:
    case ModelFamily::kTorchtextRoberta:
    case ModelFamily::kFairseqRoberta:
      return PairTemplate::kRoberta;
    case ModelFamily::kTransformerEncoder:
      return std::nullopt;
  }
  return std::nullopt;
}

const char* ModelFamilyName(ModelFamily family) {
  switch (family) {
    case ModelFamily::kBert:
      return "bert";
    case ModelFamily::kRoberta:
      return "roberta";
    case ModelFamily::kXlmRoberta:
      return "xlm-roberta";
    case ModelFamily::kCamembert:
      return "camembert";
    case ModelFamily::kData2VecText:
      return "data2vec-text";
    case ModelFamily::kRobertaPreLayerNorm:
      return "roberta-prelayernorm";
    case ModelFamily::kDistilbert:
      return "distilbert";
    case ModelFamily::kElectra:
      return "electra";
    case ModelFamily::kMpnet:
      return "mpnet";
    case ModelFamily::kDeberta:
      return "deberta-v2";
    case ModelFamily::kTorchtextRoberta:
      return "torchtext-roberta";
    case ModelFamily::kFairseqRoberta:
      return "fairseq-roberta";
    case ModelFamily::kTransformerEncoder:
      return "transformer-encoder";
  }
  return "unknown";
}

const char* ActivationName(Activation activation) {
  switch (activation) {
    case Activation::kGelu:
      return "gelu";
    case Activation::kRelu:
      return "relu";
    case Activation::kTanh:
      return "tanh";
  }
  return "unknown";
}

const char* PoolingName(Pooling pooling) {
  switch (pooling) {
    case Pooling::kCls:
      return "cls";
    case Pooling::kMean:
      return "mean";
    case Pooling::kMax:
      return "max";
    case Pooling::kMeanSqrtLen:
      return "mean_sqrt_len";
    case Pooling::kWeightedMean:
      return "weighted_mean";
    case Pooling::kLastToken:
      return "last_token";
  }
  return "unknown";
}

const char* PositionRuleName(PositionRule rule) {
  switch (rule) {
    case PositionRule::kNone:
      return "none";
    case PositionRule::kFromZero:
      return "from_zero";
    case PositionRule::kAfterPaddingIdx:
      return "after_padding_idx";
  }
  return "unknown";
}

std::optional<ModelFamily> ParseModelFamily(const std::string& name) {
  static constexpr ModelFamily kAll[] = {ModelFamily::kBert,
                                         ModelFamily::kRoberta,
                                         ModelFamily::kXlmRoberta,
                                         ModelFamily::kCamembert,
                                         ModelFamily::kData2VecText,
                                         ModelFamily::kRobertaPreLayerNorm,
                                         ModelFamily::kDistilbert,
                                         ModelFamily::kElectra,
                                         ModelFamily::kMpnet,
                                         ModelFamily::kDeberta,
                                         ModelFamily::kTorchtextRoberta,
                                         ModelFamily::kFairseqRoberta,
                                         ModelFamily::kTransformerEncoder};
  return ParseByName(name, kAll, ModelFamilyName);
}

std::optional<Activation> ParseActivation(const std::string& name) {
  static constexpr Activation kAll[] = {Activation::kGelu, Activation::kRelu, Activation::kTanh};
  return ParseByName(name, kAll, ActivationName);
}

std::optional<Pooling> ParsePooling(const std::string& name) {
  return ParseByName(name, kAllPoolings, PoolingName);
}

std::optional<PositionRule> ParsePositionRule(const std::string& name) {
  static constexpr PositionRule kAll[] = {PositionRule::kNone, PositionRule::kFromZero,
                                          PositionRule::kAfterPaddingIdx};
  return ParseByName(name, kAll, PositionRuleName);
}

Status EncoderConfig::Validate() const {
  if (vocab_size <= 0) return Bad("vocab_size", "must be positive");
  if (hidden_size <= 0) return Bad("hidden_size", "must be positive");
  if (num_layers <= 0) return Bad("num_layers", "must be positive");
  if (embedding_size < 0) return Bad("embedding_size", "must not be negative");
  if (intermediate_size <= 0) return Bad("intermediate_size", "must be positive");
  if (num_heads <= 0) return Bad("num_heads", "must be positive");
  if (hidden_size % num_heads != 0) {
    return Bad("num_heads", "= " + std::to_string(num_heads) + " does not divide hidden_size " +
                                std::to_string(hidden_size));
  }
  if (!(layer_norm_eps > 0.0f) || !std::isfinite(layer_norm_eps)) {
    return Bad("layer_norm_eps", "must be a positive number");
  }
  // No encoder takes a million tokens at once; the bound keeps the sizes
  // made from max_tokens (the relative attention table below) in range.
  if (max_tokens <= 0 || max_tokens > kMaxTokensLimit) {
    return Bad("max_tokens", "= " + std::to_string(max_tokens) + " is not in [1, " +
                                 std::to_string(kMaxTokensLimit) + "]");
  }
  if (pad_token_id < 0 || pad_token_id >= vocab_size) {
    return Bad("pad_token_id", "= " + std::to_string(pad_token_id) +
                                   " is outside the vocabulary (" + std::to_string(vocab_size) +
                                   " tokens)");
  }
  // The largest position id a max_tokens-long sequence uses must be a row of the table.
  int64_t last_position = -1;
  if (position_rule == PositionRule::kFromZero) last_position = max_tokens - 1;
  if (position_rule == PositionRule::kAfterPaddingIdx) last_position = pad_token_id + max_tokens;
  if (position_rule != PositionRule::kNone && last_position >= max_positions) {
    return Bad("max_tokens", "= " + std::to_string(max_tokens) + " needs position " +
                                 std::to_string(last_position) + " but the position table has " +
                                 std::to_string(max_positions) + " rows");
  }
  int64_t width = hidden_size;
  for (size_t i = 0; i < pool_dense.size(); ++i) {
    if (pool_dense[i].in != width || pool_dense[i].out <= 0) {
      return Bad("pool_dense", std::to_string(i) + " maps " + std::to_string(pool_dense[i].in) +
                                   " to " + std::to_string(pool_dense[i].out) +
                                   " features but its input has " + std::to_string(width));
    }
    width = pool_dense[i].out;
  }
  if (default_dimensions != 0 && (default_dimensions < 1 || default_dimensions >= width)) {
    return Bad("default_dimensions", "= " + std::to_string(default_dimensions) +
                                         " is not 0 (all) or 1 to " + std::to_string(width - 1));
  }
  if (relative_attention_buckets < 0 || relative_attention_buckets % 4 != 0 ||
      relative_attention_buckets > 4096) {
    return Bad("relative_attention_buckets",
               "= " + std::to_string(relative_attention_buckets) +
                   " is not 0 or a positive multiple of 4 up to 4096");
  }
  if (relative_attention_buckets > 0 &&
      (relative_attention_max_distance <= relative_attention_buckets / 4 ||
       relative_attention_max_distance > (int64_t{1} << 20))) {
    return Bad("relative_attention_max_distance",
               "= " + std::to_string(relative_attention_max_distance) + " is not above " +
                   std::to_string(relative_attention_buckets / 4) + " and at most 2^20");
  }
  // The relative attention bias is kept as a table of heads x every
  // distance a max_tokens-long sequence has (BackendEncoder::LoadRelativeBias).
  if (relative_attention_buckets > 0 && num_heads > kMaxRelativeBiasValues / (2 * max_tokens - 1)) {
    return Bad("max_tokens", "= " + std::to_string(max_tokens) + " with " +
                                 std::to_string(num_heads) +
                                 " heads makes a relative attention table of more than " +
                                 std::to_string(kMaxRelativeBiasValues) + " values");
  }
  if (attention_span < 0 || attention_span > kMaxTokensLimit) {
    return Bad("attention_span", "= " + std::to_string(attention_span) + " is not in [0, " +
                                     std::to_string(kMaxTokensLimit) + "]");
  }
  if (attention_span > 0) {
    if (relative_attention_buckets > 0)
      return Bad("attention_span", "and relative_attention_buckets are both set");
    if (!content_to_position && !position_to_content)
      return Bad("attention_span", "is set with neither disentangled term");
    if (max_tokens > kMaxDisentangledTokens) {
      return Bad("max_tokens", "= " + std::to_string(max_tokens) + " is more than the " +
                                   std::to_string(kMaxDisentangledTokens) +
                                   " tokens disentangled attention takes");
    }
    if (position_buckets < 0 || position_buckets % 2 != 0 ||
        (position_buckets > 0 && position_buckets != attention_span)) {
      return Bad("position_buckets", "= " + std::to_string(position_buckets) +
                                         " is not 0 or an even attention_span (" +
                                         std::to_string(attention_span) + ")");
    }
    // The log scale divides by log((max_relative_positions - 1) / (buckets / 2)).
    if (position_buckets > 0 && (max_relative_positions <= position_buckets / 2 + 1 ||
                                 max_relative_positions > kMaxTokensLimit)) {
      return Bad("max_relative_positions", "= " + std::to_string(max_relative_positions) +
                                               " is not above " +
                                               std::to_string(position_buckets / 2 + 1) +
                                               " and at most " + std::to_string(kMaxTokensLimit));
    }
  }
  if (num_labels < 0) return Bad("num_labels", "must not be negative");
  if (static_cast<int64_t>(labels.size()) != num_labels) {
    return Bad("labels", "has " + std::to_string(labels.size()) + " names but the head has " +
                             std::to_string(num_labels) + " outputs");
  }
  for (int32_t id :
       {special_tokens.bos, special_tokens.eos, special_tokens.pad, special_tokens.unk}) {
    if (id < 0 || id >= vocab_size) {
      return Bad("special_tokens", "id " + std::to_string(id) + " is outside the vocabulary (" +
                                       std::to_string(vocab_size) + " tokens)");
    }
  }
  return Status::Ok();
}

int64_t RelativePositionBucket(int64_t relative, int64_t buckets, int64_t max_distance) {
  // relative_position_bucket: n = -(j - i); half the buckets for n < 0.
  const int64_t half = buckets / 2, max_exact = half / 2;
  const int64_t n = -relative;
  const int64_t base = n < 0 ? half : 0;
  const int64_t distance = n < 0 ? -n : n;
  if (distance < max_exact) return base + distance;
  // torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
  // * (num_buckets - max_exact), each step in float32, then truncated.
  const float log_ratio =
      std::log(static_cast<float>(distance) / static_cast<float>(max_exact)) /
      static_cast<float>(std::log(static_cast<double>(max_distance) / max_exact)) *
      static_cast<float>(half - max_exact);
  const int64_t large = max_exact + static_cast<int64_t>(log_ratio);
  return base + (large < half - 1 ? large : half - 1);
}

int64_t DisentangledColumn(int64_t relative, const EncoderConfig& c) {
  int64_t bucket = relative;
  const int64_t mid = c.position_buckets / 2;
  const int64_t distance = relative < 0 ? -relative : relative;
  if (c.position_buckets > 0 && distance > mid) {
    // torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid))
    // * (mid - 1)) + mid, each step in float32.
    const float scale =
        std::log(static_cast<float>(static_cast<double>(c.max_relative_positions - 1) / mid));
    const float steps = std::log(static_cast<float>(distance) / static_cast<float>(mid)) / scale *
                        static_cast<float>(mid - 1);
    const int64_t log_bucket = static_cast<int64_t>(std::ceil(steps)) + mid;
    bucket = relative < 0 ? -log_bucket : log_bucket;
  }
  const int64_t column = bucket + c.attention_span;
  return column < 0 ? 0 : column >= 2 * c.attention_span ? 2 * c.attention_span - 1 : column;
}

std::string LayerWeightName(int64_t layer, const std::string& suffix) {
  return "layers." + std::to_string(layer) + "." + suffix;
}

}  // namespace encoderd
