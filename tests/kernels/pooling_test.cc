#include "kernels/pooling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/activations.h"
#include "kernels/cpu_context.h"
#include "tests/kernels/kernel_test_util.h"

namespace encoderd::kernels {
namespace {

using testing::CuSeqlens;
using testing::RandomVector;
using testing::ScaledMaxError;

TEST(PoolingTest, ClsAndMeanMatchReference) {
  CpuContext ctx;
  const int64_t hidden = 40;
  const auto cu = CuSeqlens({1, 2, 7, 512, 3});
  const int64_t batch = 5, tokens = cu.back();
  const auto h = RandomVector(tokens * hidden, 1);
  std::vector<float> cls(batch * hidden), mean(batch * hidden);
  Pool(ctx, DType::kFloat32, h.data(), cu.data(), nullptr, batch, hidden, Pooling::kCls,
       cls.data());
  Pool(ctx, DType::kFloat32, h.data(), cu.data(), nullptr, batch, hidden, Pooling::kMean,
       mean.data());
  std::vector<double> want_cls(batch * hidden), want_mean(batch * hidden);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < hidden; ++i) {
      want_cls[b * hidden + i] = h[cu[b] * hidden + i];
      double sum = 0;
      for (int64_t t = cu[b]; t < cu[b + 1]; ++t) sum += h[t * hidden + i];
      want_mean[b * hidden + i] = sum / (cu[b + 1] - cu[b]);
    }
  }
  EXPECT_EQ(ScaledMaxError(cls, want_cls), 0.0);
  EXPECT_LT(ScaledMaxError(mean, want_mean), 1e-5);

  L2NormalizeRows(mean.data(), batch, hidden);
  for (int64_t b = 0; b < batch; ++b) {
    double norm = 0;
    for (int64_t i = 0; i < hidden; ++i)
      norm += double{mean[b * hidden + i]} * mean[b * hidden + i];
    EXPECT_NEAR(std::sqrt(norm), 1.0, 1e-5);
  }
  std::vector<float> zeros(hidden, 0.f);
  L2NormalizeRows(zeros.data(), 1, hidden);  // norm clamped by eps: stays zero, no NaN
  EXPECT_EQ(zeros[0], 0.f);
}

// sentence-transformers' Pooling modes, written out over each sequence:
// over all of its tokens, and from a pool_start on (include_prompt = false:
// the reducing modes leave the tokens before it out, a token keeps its
// weight t + 1, and a start past the last token is clamped to it).
TEST(PoolingTest, EveryModeMatchesReference) {
  CpuContext ctx(2);
  const int64_t hidden = 24;
  const auto cu = CuSeqlens({1, 2, 7, 300, 3});
  const int64_t batch = 5, tokens = cu.back();
  const auto h = RandomVector(tokens * hidden, 3);
  const std::vector<int32_t> starts = {4, 1, 3, 100, 5};
  for (const int32_t* pool_start : {static_cast<const int32_t*>(nullptr), starts.data()}) {
    for (Pooling mode : kAllPoolings) {
      SCOPED_TRACE(::testing::Message() << "mode " << static_cast<int>(mode) << ", "
                                        << (pool_start ? "from pool_start" : "every token"));
      std::vector<float> got(batch * hidden);
      Pool(ctx, DType::kFloat32, h.data(), cu.data(), pool_start, batch, hidden, mode, got.data());
      std::vector<double> want(batch * hidden);
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t len = cu[b + 1] - cu[b];
        const int64_t first = pool_start ? std::min<int64_t>(pool_start[b], len - 1) : 0;
        for (int64_t i = 0; i < hidden; ++i) {
          const auto at = [&](int64_t t) { return double{h[(cu[b] + t) * hidden + i]}; };
          double v = 0, weights = 0, best = at(first);
          for (int64_t t = first; t < len; ++t) {
            const double w = mode == Pooling::kWeightedMean ? t + 1 : 1;
            v += w * at(t);
            weights += w;
            best = std::max(best, at(t));
          }
          switch (mode) {
            case Pooling::kCls:
              v = at(0);
              break;
            case Pooling::kLastToken:
              v = at(len - 1);
              break;
            case Pooling::kMax:
              v = best;
              break;
            case Pooling::kMeanSqrtLen:
              v /= std::sqrt(static_cast<double>(len - first));
              break;
            case Pooling::kMean:
            case Pooling::kWeightedMean:
              v /= weights;
              break;
          }
          want[b * hidden + i] = v;
        }
      }
      EXPECT_LT(ScaledMaxError(got, want), 1e-5);
    }
  }
}

TEST(PoolingTest, RejectsEmptySequencesAndBadCuSeqlens) {
  CpuContext ctx;
  std::vector<float> h(4 * 8), out(2 * 8);
  const auto empty = CuSeqlens({4, 0});
  EXPECT_THROW(
      Pool(ctx, DType::kFloat32, h.data(), empty.data(), nullptr, 2, 8, Pooling::kMean, out.data()),
      std::invalid_argument);
  const std::vector<int32_t> bad = {0, 5, 4};
  EXPECT_THROW(
      Pool(ctx, DType::kFloat32, h.data(), bad.data(), nullptr, 2, 8, Pooling::kCls, out.data()),
      std::invalid_argument);
  EXPECT_THROW(
      Pool(ctx, DType::kFloat32, h.data(), nullptr, nullptr, 2, 8, Pooling::kCls, out.data()),
      std::invalid_argument);
}

TEST(ActivationsTest, MatchStandardFunctions) {
  const auto x = RandomVector(257, 3, -6.f, 6.f);
  auto t = x, r = x, g = x;
  TanhInPlace(t.data(), 257);
  ReluInPlace(r.data(), 257);
  GeluInPlace(g.data(), 257);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(t[i], std::tanh(double{x[i]}), 1e-6);
    EXPECT_EQ(r[i], x[i] > 0 ? x[i] : 0.f);
    EXPECT_NEAR(g[i], 0.5 * x[i] * (1 + std::erf(x[i] / std::sqrt(2.0))), 1e-5);
  }
  auto s = RandomVector(3 * 5, 4, -50.f, 50.f);
  const auto orig = s;
  SoftmaxRows(s.data(), 3, 5);
  for (int r = 0; r < 3; ++r) {
    double max = -1e300, sum = 0;
    for (int i = 0; i < 5; ++i) max = std::max(max, double{orig[r * 5 + i]});
    for (int i = 0; i < 5; ++i) sum += std::exp(orig[r * 5 + i] - max);
    for (int i = 0; i < 5; ++i)
      EXPECT_NEAR(s[r * 5 + i], std::exp(orig[r * 5 + i] - max) / sum, 1e-6);
  }
  EXPECT_THROW(SoftmaxRows(s.data(), 1, 0), std::invalid_argument);
  EXPECT_THROW(TanhInPlace(nullptr, 3), std::invalid_argument);
}

}  // namespace
}  // namespace encoderd::kernels
