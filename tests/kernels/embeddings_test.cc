#include "kernels/embeddings.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "kernels/cpu_context.h"
#include "tests/kernels/kernel_test_util.h"

namespace encoderd::kernels {
namespace {

using testing::CuSeqlens;
using testing::RandomVector;
using testing::ScaledMaxError;

TEST(EmbeddingsTest, SumAndLayerNormMatchReference) {
  CpuContext ctx;
  const int64_t hidden = 48, vocab = 50, positions = 40, types = 2;
  const auto word = RandomVector(vocab * hidden, 1), pos = RandomVector(positions * hidden, 2);
  const auto type = RandomVector(types * hidden, 3);
  const auto gamma = RandomVector(hidden, 4), beta = RandomVector(hidden, 5);
  const auto cu = CuSeqlens({1, 2, 7, 31});
  const int64_t tokens = cu.back();
  std::vector<int32_t> ids(tokens), pos_ids(tokens), type_ids(tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    ids[t] = static_cast<int32_t>((t * 7 + 3) % vocab);
    type_ids[t] = static_cast<int32_t>(t % 2);
  }
  // RoBERTa's positions (padding_idx 1, no pad token): 2, 3, ... per sequence.
  for (size_t b = 0; b + 1 < cu.size(); ++b) {
    for (int32_t t = cu[b]; t < cu[b + 1]; ++t) pos_ids[t] = 2 + (t - cu[b]);
  }

  EmbeddingTables tables{word.data(), vocab, pos.data(), positions, type.data(), types, hidden};
  for (bool with_ln : {false, true}) {
    std::vector<float> out(tokens * hidden);
    EmbeddingLayerNorm(ctx, DType::kFloat32, tables, ids.data(), pos_ids.data(), type_ids.data(),
                       tokens, with_ln ? gamma.data() : nullptr, beta.data(), 1e-12f, out.data());
    std::vector<double> want(tokens * hidden);
    for (int64_t t = 0; t < tokens; ++t) {
      double mean = 0, var = 0;
      std::vector<double> s(hidden);
      for (int64_t i = 0; i < hidden; ++i) {
        s[i] = double{word[ids[t] * hidden + i]} + pos[pos_ids[t] * hidden + i] +
               type[type_ids[t] * hidden + i];
        mean += s[i] / hidden;
      }
      for (double v : s) var += (v - mean) * (v - mean) / hidden;
      for (int64_t i = 0; i < hidden; ++i) {
        want[t * hidden + i] =
            with_ln ? (s[i] - mean) / std::sqrt(var + 1e-12) * gamma[i] + beta[i] : s[i];
      }
    }
    EXPECT_LT(ScaledMaxError(out, want), 1e-4) << "with_ln=" << with_ln;
  }

  // Optional tables: word embeddings only, and missing type ids mean type 0.
  EmbeddingTables word_only{word.data(), vocab, nullptr, 0, nullptr, 0, hidden};
  std::vector<float> out(tokens * hidden);
  EmbeddingLayerNorm(ctx, DType::kFloat32, word_only, ids.data(), nullptr, nullptr, tokens, nullptr,
                     nullptr, 0.f, out.data());
  EXPECT_EQ(out[5 * hidden + 3], word[ids[5] * hidden + 3]);
  EmbeddingTables word_type{word.data(), vocab, nullptr, 0, type.data(), types, hidden};
  EmbeddingLayerNorm(ctx, DType::kFloat32, word_type, ids.data(), nullptr, nullptr, tokens, nullptr,
                     nullptr, 0.f, out.data());
  EXPECT_EQ(out[5 * hidden + 3], word[ids[5] * hidden + 3] + type[3]);
}

TEST(EmbeddingsTest, RejectsIdsOutsideTables) {
  CpuContext ctx;
  const auto word = RandomVector(4 * 8, 1), pos = RandomVector(3 * 8, 2);
  EmbeddingTables tables{word.data(), 4, pos.data(), 3, nullptr, 0, 8};
  std::vector<float> out(2 * 8);
  const std::vector<int32_t> ids = {1, 4}, neg = {-1, 0}, pos_ok = {0, 1}, pos_bad = {0, 3};
  EXPECT_THROW(EmbeddingLayerNorm(ctx, DType::kFloat32, tables, ids.data(), pos_ok.data(), nullptr,
                                  2, nullptr, nullptr, 0.f, out.data()),
               std::invalid_argument);
  EXPECT_THROW(EmbeddingLayerNorm(ctx, DType::kFloat32, tables, neg.data(), pos_ok.data(), nullptr,
                                  2, nullptr, nullptr, 0.f, out.data()),
               std::invalid_argument);
  EXPECT_THROW(EmbeddingLayerNorm(ctx, DType::kFloat32, tables, pos_ok.data(), pos_bad.data(),
                                  nullptr, 2, nullptr, nullptr, 0.f, out.data()),
               std::invalid_argument);
  EXPECT_THROW(EmbeddingLayerNorm(ctx, DType::kFloat32, tables, pos_ok.data(), nullptr, nullptr, 2,
                                  nullptr, nullptr, 0.f, out.data()),
               std::invalid_argument);  // position table but no position ids
}

}  // namespace
}  // namespace encoderd::kernels
