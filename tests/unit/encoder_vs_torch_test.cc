// The native encoder against PyTorch's own encoder kernels (LibTorch, same
// process, same weights) at BERT-base width, where the GEMMs reduce over
// K = 768 and 3072 (the fixture models are narrower) and sequences are ragged.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/runtime/encoder.h"
#include "engine/runtime/random_weights.h"
#ifdef ENCODERD_WITH_TORCH
#include "engine/torch/torch_encoder_baseline.h"
#endif

namespace encoderd {
namespace {

#ifdef ENCODERD_WITH_TORCH

struct Variant {
  const char* name;
  bool norm_first;
  Activation activation;
  PositionRule positions;
};

class EncoderVsTorchTest : public ::testing::TestWithParam<Variant> {};

// PyTorch's layers have no relative attention bias: the baseline refuses an
// MPNet-style config rather than time and compare another model.
TEST(EncoderVsTorchTest, RefusesARelativeAttentionBias) {
  EncoderConfig config = BertBaseConfig();
  config.num_layers = 1;
  config.relative_attention_buckets = 32;
  const TensorMap weights = RandomEncoderWeights(config, /*seed=*/7);
  auto torch = TorchEncoderBaseline::Create(config, weights, DType::kFloat32);
  ASSERT_FALSE(torch.ok());
  EXPECT_NE(torch.status().message().find("relative attention bias"), std::string::npos);
}

// Nor DeBERTa's disentangled attention: until 2026-12-05 `encoderd bench
// --engines pytorch` timed a DeBERTa model as BERT and reported encoderd
// 0.86 cosine from it.
TEST(EncoderVsTorchTest, RefusesDisentangledAttention) {
  EncoderConfig config = BertBaseConfig();
  config.family = ModelFamily::kDeberta;
  config.num_layers = 1;
  config.position_rule = PositionRule::kNone;
  config.max_positions = 0;
  config.type_vocab_size = 0;
  config.attention_span = config.position_buckets = 256;
  config.max_relative_positions = 512;
  config.content_to_position = config.position_to_content = true;
  const TensorMap weights = RandomEncoderWeights(config, /*seed=*/7);
  auto torch = TorchEncoderBaseline::Create(config, weights, DType::kFloat32);
  ASSERT_FALSE(torch.ok());
  EXPECT_NE(torch.status().message().find("no disentangled attention (deberta-v2)"),
            std::string::npos)
      << torch.status().message();
}

TEST_P(EncoderVsTorchTest, MatchesPyTorchNestedFastpath) {
  const Variant v = GetParam();
  EncoderConfig config = BertBaseConfig();
  config.num_layers = 2;
  config.norm_first = v.norm_first;
  config.final_norm = v.norm_first;
  config.activation = v.activation;
  config.position_rule = v.positions;
  config.pad_token_id = v.positions == PositionRule::kAfterPaddingIdx ? 1 : 0;
  config.max_positions = 514;
  config.type_vocab_size = 0;
  const TensorMap weights = RandomEncoderWeights(config, /*seed=*/7);

  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> token(3, static_cast<int32_t>(config.vocab_size - 1));
  std::vector<std::vector<int32_t>> sequences;
  PackedBatchBuilder builder(config.position_rule, static_cast<int32_t>(config.pad_token_id));
  for (int length : {1, 2, 7, 33, 130}) {
    std::vector<int32_t> ids(length);
    for (auto& id : ids) id = token(rng);
    ASSERT_TRUE(builder.Add(ids, {}, {}).ok());
    sequences.push_back(std::move(ids));
  }
  const PackedBatch batch = builder.Build();

  auto torch = TorchEncoderBaseline::Create(config, weights, DType::kFloat32);
  ASSERT_TRUE(torch.ok()) << torch.status().ToString();
  auto expected = (*torch)->Forward(TorchBaselineMode::kNestedFastpath, sequences);
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  const float* e = expected->data<float>();
  double scale = 1.0;
  for (int64_t i = 0; i < expected->numel(); ++i) scale = std::max(scale, std::fabs(1.0 * e[i]));

  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    EncoderOptions options;
    options.dtype = dtype;
    options.num_threads = 2;
    auto encoder = Encoder::Create(config, weights, options);
    ASSERT_TRUE(encoder.ok()) << encoder.status().ToString();
    auto hidden = (*encoder)->Forward(batch);
    ASSERT_TRUE(hidden.ok()) << hidden.status().ToString();
    const float* a = hidden->data<float>();
    const int64_t h = config.hidden_size;
    for (int64_t s = 0; s < batch.num_sequences(); ++s) {
      double max_err = 0, ab = 0, aa = 0, bb = 0;
      for (int64_t i = batch.cu_seqlens[s] * h; i < batch.cu_seqlens[s + 1] * h; ++i) {
        max_err = std::max(max_err, std::fabs(1.0 * a[i] - e[i]));
        ab += 1.0 * a[i] * e[i];
        aa += 1.0 * a[i] * a[i];
        bb += 1.0 * e[i] * e[i];
      }
      if (dtype == DType::kFloat32) {
        EXPECT_LE(max_err, 1e-4 * scale) << "sequence " << s;
      } else {
        EXPECT_GE(ab / std::sqrt(aa * bb), 0.999) << "bf16 sequence " << s;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, EncoderVsTorchTest,
                         ::testing::Values(Variant{"bert_postnorm_gelu", false, Activation::kGelu,
                                                   PositionRule::kFromZero},
                                           Variant{"roberta_prenorm_relu", true, Activation::kRelu,
                                                   PositionRule::kAfterPaddingIdx}),
                         [](const ::testing::TestParamInfo<Variant>& info) {
                           return std::string(info.param.name);
                         });

#endif  // ENCODERD_WITH_TORCH

}  // namespace
}  // namespace encoderd
