// A bf16 model on the CPU keeps in bf16 what only its bf16 matmuls read
// (BackendEncoder::BufferType): its outputs are those of the encoder with
// every activation buffer in fp32 (EncoderOptions::bf16_activations =
// false), bit for bit where the attention scale is a power of two, in
// post-norm and pre-norm layers, with projected embeddings, and where
// attention widens bf16 values (head_dim % 32 != 0). On a CPU without
// AVX512-BF16 (or with it turned off) both encoders take the fp32 buffers:
// the test is skipped there, where it could not fail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/runtime/encoder.h"
#include "engine/runtime/packed_batch.h"
#include "engine/runtime/random_weights.h"
#include "kernels/cpu_features.h"

namespace encoderd {
namespace {

struct Shape {
  const char* name;
  int64_t hidden, heads;
  bool norm_first;
  int64_t embedding_size;  // 0: the hidden size
};

EncoderConfig Config(const Shape& s) {
  EncoderConfig c = BertBaseConfig();
  c.vocab_size = 120;
  c.hidden_size = s.hidden;
  c.num_heads = s.heads;
  c.num_layers = 2;
  c.intermediate_size = 2 * s.hidden;
  c.max_positions = 80;
  c.max_tokens = 64;
  c.norm_first = s.norm_first;
  c.final_norm = s.norm_first;
  c.embedding_norm = !s.norm_first;
  if (s.embedding_size > 0) c.embedding_size = s.embedding_size;
  return c;
}

PackedBatch Batch(const EncoderConfig& c) {
  PackedBatchBuilder builder(c.position_rule, static_cast<int32_t>(c.pad_token_id));
  uint64_t request = 0;
  for (int len : {3, 40, 1, 17, 60}) {
    std::vector<int32_t> ids(len);
    for (int i = 0; i < len; ++i) ids[i] = static_cast<int32_t>((len * 7 + i * 13) % c.vocab_size);
    EXPECT_TRUE(builder.Add(ids, {}, {request++, 0}).ok());
  }
  return builder.Build();
}

// Up to 12 rows take the few-row kernels, more oneDNN's GEMMs.
PackedBatch FewRows(const EncoderConfig& c) {
  PackedBatchBuilder builder(c.position_rule, static_cast<int32_t>(c.pad_token_id));
  std::vector<int32_t> ids = {5, 9, 17, 33, 2, 71};
  EXPECT_TRUE(builder.Add(ids, {}, {0, 0}).ok());
  return builder.Build();
}

Tensor Hidden(const EncoderConfig& c, bool bf16_activations, const PackedBatch& batch) {
  EncoderOptions options;
  options.dtype = DType::kBFloat16;
  options.num_threads = 2;
  options.bf16_activations = bf16_activations;
  auto encoder = Encoder::Create(c, RandomEncoderWeights(c, 5), options);
  EXPECT_TRUE(encoder.ok()) << encoder.status().ToString();
  if (!encoder.ok()) return Tensor();
  auto hidden = (*encoder)->Forward(batch);
  EXPECT_TRUE(hidden.ok()) << hidden.status().ToString();
  return hidden.ok() ? *hidden : Tensor();
}

TEST(EncoderBf16ActivationsTest, SameOutputsAsFp32Buffers) {
  if (!kernels::GetCpuFeatures().avx512_bf16)
    GTEST_SKIP() << "no AVX512-BF16 in use: both encoders take the fp32 buffers";
  const Shape shapes[] = {
      {"post-norm, head_dim 64", 128, 2, false, 0},
      {"pre-norm, head_dim 64", 128, 2, true, 0},
      {"projected embeddings, head_dim 64", 128, 2, false, 64},
      {"head_dim 16 (attention widens)", 64, 4, false, 0},
      {"head_dim 32 (scale not a power of two)", 64, 2, false, 0},
  };
  for (const Shape& s : shapes) {
    SCOPED_TRACE(s.name);
    const EncoderConfig c = Config(s);
    for (const PackedBatch& batch : {Batch(c), FewRows(c)}) {
      const Tensor got = Hidden(c, true, batch), want = Hidden(c, false, batch);
      ASSERT_TRUE(got.defined() && want.defined());
      ASSERT_EQ(got.shape(), want.shape());
      const float scale = 1.f / std::sqrt(static_cast<float>(c.head_dim()));
      if (scale == std::ldexp(1.f, std::ilogb(scale))) {
        EXPECT_EQ(std::memcmp(got.data<float>(), want.data<float>(), want.nbytes()), 0);
        continue;
      }
      // q rounded once more: within bf16's rounding, per token.
      const int64_t h = c.hidden_size;
      for (int64_t t = 0; t < got.size(0); ++t) {
        double ab = 0, aa = 0, bb = 0;
        for (int64_t j = 0; j < h; ++j) {
          const double a = got.data<float>()[t * h + j], b = want.data<float>()[t * h + j];
          ab += a * b;
          aa += a * a;
          bb += b * b;
        }
        EXPECT_GT(ab / std::sqrt(aa * bb), 0.9999) << "token " << t;
      }
    }
  }
}

}  // namespace
}  // namespace encoderd
