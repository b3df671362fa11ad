#include "engine/runtime/random_weights.h"

#include <random>

namespace encoderd {
namespace {

Tensor RandomTensor(std::mt19937& rng, std::vector<int64_t> shape, float mean, float stddev) {
  Tensor t = Tensor::Zeros(DType::kFloat32, std::move(shape));
  std::normal_distribution<float> dist(mean, stddev);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

}  // namespace

EncoderConfig BertBaseConfig() {
  EncoderConfig c;
  c.family = ModelFamily::kBert;
  c.vocab_size = 30522;
  c.hidden_size = 768;
  c.num_layers = 12;
  c.num_heads = 12;
  c.intermediate_size = 3072;
  c.max_positions = 512;
  c.max_tokens = 512;
  c.type_vocab_size = 2;
  c.layer_norm_eps = 1e-12f;
  c.activation = Activation::kGelu;
  c.position_rule = PositionRule::kFromZero;
  return c;
}

TensorMap RandomEncoderWeights(const EncoderConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t h = c.hidden_size, f = c.intermediate_size, e = c.embedding_width();
  TensorMap w;
  auto norm = [&](const std::string& prefix, int64_t width) {
    w[prefix + ".weight"] = RandomTensor(rng, {width}, 1.0f, 0.05f);
    w[prefix + ".bias"] = RandomTensor(rng, {width}, 0.0f, 0.05f);
  };
  auto linear = [&](const std::string& prefix, int64_t out, int64_t in) {
    w[prefix + ".weight"] = RandomTensor(rng, {out, in}, 0.0f, 0.02f);
    w[prefix + ".bias"] = RandomTensor(rng, {out}, 0.0f, 0.02f);
  };
  w["embeddings.word"] = RandomTensor(rng, {c.vocab_size, e}, 0.0f, 0.02f);
  if (c.position_rule != PositionRule::kNone) {
    w["embeddings.position"] = RandomTensor(rng, {c.max_positions, e}, 0.0f, 0.02f);
  }
  if (c.type_vocab_size > 0) {
    w["embeddings.token_type"] = RandomTensor(rng, {c.type_vocab_size, e}, 0.0f, 0.02f);
  }
  if (c.embedding_norm) norm("embeddings.norm", e);
  if (c.projects_embeddings()) linear("embeddings.project", h, e);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    linear(LayerWeightName(i, "attention.qkv"), 3 * h, h);
    linear(LayerWeightName(i, "attention.out"), h, h);
    linear(LayerWeightName(i, "ffn.in"), f, h);
    linear(LayerWeightName(i, "ffn.out"), h, f);
    norm(LayerWeightName(i, "norm1"), h);
    norm(LayerWeightName(i, "norm2"), h);
  }
  if (c.final_norm) norm("final_norm", h);
  if (c.attention_span > 0) {
    w["encoder.rel_embeddings"] =
        RandomTensor(rng, {2 * c.attention_span, h}, 0.0f, c.relative_norm ? 0.5f : 0.02f);
    if (c.relative_norm) norm("encoder.rel_norm", h);
  }
  if (c.relative_attention_buckets > 0) {
    w["encoder.relative_attention_bias"] =
        RandomTensor(rng, {c.relative_attention_buckets, c.num_heads}, 0.0f, 0.5f);
  }
  if (c.num_labels > 0) {
    linear("head.dense", h, h);
    linear("head.out", c.num_labels, h);
  }
  return w;
}

}  // namespace encoderd
