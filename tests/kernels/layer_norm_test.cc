#include "kernels/layer_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/bf16_convert.h"
#include "kernels/cpu/layer_norm_cpu.h"
#include "kernels/cpu_context.h"
#include "kernels/cpu_features.h"
#include "tests/kernels/kernel_test_util.h"

namespace encoderd::kernels {
namespace {

using testing::RandomVector;
using testing::ScaledMaxError;

std::vector<double> Reference(const std::vector<float>& x, const std::vector<float>* residual,
                              const std::vector<float>& gamma, const std::vector<float>& beta,
                              int64_t rows, int64_t n, double eps) {
  std::vector<double> out(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> s(n);
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) {
      s[i] = x[r * n + i] + (residual ? (*residual)[r * n + i] : 0.0);
      mean += s[i] / n;
    }
    for (int64_t i = 0; i < n; ++i) var += (s[i] - mean) * (s[i] - mean) / n;
    for (int64_t i = 0; i < n; ++i) {
      out[r * n + i] = (s[i] - mean) / std::sqrt(var + eps) * (gamma.empty() ? 1.0 : gamma[i]) +
                       (beta.empty() ? 0.0 : beta[i]);
    }
  }
  return out;
}

// Each version of the row kernel the CPU can run matches the reference
// (a row of 777: 48 vectors of 16 and a tail), and the one in use is the one
// GetCpuFeatures() names, to the bit: ctest runs this binary with
// ENCODERD_CPU_DISABLE turning AVX-512, then AVX2, off. The versions'
// sums round differently, so the bits tell them apart; with the
// compiler's target_clones, which asked the CPU itself, those runs got the
// AVX-512 version's bits.
TEST(LayerNormTest, TheRowKernelInUseIsTheOneTheFeaturesAllow) {
  const int64_t n = 777;
  const auto x = RandomVector(n, 5, 10.f, 12.f), res = RandomVector(n, 6);
  const auto gamma = RandomVector(n, 7), beta = RandomVector(n, 8);
  const auto run = [&](LayerNormRowIsa isa) {
    std::vector<float> out(n);
    AddLayerNormRowWith(isa, x.data(), res.data(), gamma.data(), beta.data(), n, 1e-5f, out.data());
    return out;
  };
  std::vector<float> in_use(n);
  AddLayerNormRow(x.data(), res.data(), gamma.data(), beta.data(), n, 1e-5f, in_use.data());
  const CpuFeatures& cpu = GetCpuFeatures();
  const LayerNormRowIsa expected = LayerNormRowIsaInUse();
  EXPECT_EQ(expected, cpu.avx512f
                          ? LayerNormRowIsa::kAvx512
                          : (cpu.avx2 ? LayerNormRowIsa::kAvx2 : LayerNormRowIsa::kGeneric));
  EXPECT_EQ(std::memcmp(in_use.data(), run(expected).data(), n * sizeof(float)), 0);
  const std::vector<double> want = Reference(x, &res, gamma, beta, 1, n, 1e-5);
  const std::vector<float> generic = run(LayerNormRowIsa::kGeneric);
  EXPECT_LT(ScaledMaxError(generic, want), 1e-4);
  if (cpu.avx2) {
    EXPECT_LT(ScaledMaxError(run(LayerNormRowIsa::kAvx2), want), 1e-4);
  }
  // The row tells the versions apart (on the CPU itself, whatever this run
  // turned off), or the bit comparison above proves nothing about which one
  // ran.
  const auto differ = [&](LayerNormRowIsa a, LayerNormRowIsa b) {
    return std::memcmp(run(a).data(), run(b).data(), n * sizeof(float)) != 0;
  };
  if (__builtin_cpu_supports("avx2")) {
    EXPECT_TRUE(differ(LayerNormRowIsa::kAvx2, LayerNormRowIsa::kGeneric));
  }
  if (__builtin_cpu_supports("avx512f")) {
    EXPECT_LT(ScaledMaxError(run(LayerNormRowIsa::kAvx512), want), 1e-4);
    EXPECT_TRUE(differ(LayerNormRowIsa::kAvx512, LayerNormRowIsa::kGeneric));
    EXPECT_TRUE(differ(LayerNormRowIsa::kAvx512, LayerNormRowIsa::kAvx2));
  }
}

TEST(LayerNormTest, AddLayerNormMatchesReference) {
  CpuContext ctx;
  for (int64_t n : {1, 7, 768}) {
    for (int64_t rows : {1, 5, 300}) {
      // A large common offset tests the two-pass variance.
      const auto x = RandomVector(rows * n, 1, 10.f, 12.f), res = RandomVector(rows * n, 2);
      const auto gamma = RandomVector(n, 3), beta = RandomVector(n, 4);
      std::vector<float> out(rows * n);
      AddLayerNorm(ctx, DType::kFloat32, x.data(), res.data(), gamma.data(), beta.data(), rows, n,
                   1e-5f, out.data());
      EXPECT_LT(ScaledMaxError(out, Reference(x, &res, gamma, beta, rows, n, 1e-5)), 1e-4)
          << rows << "x" << n;
      std::vector<float> plain(rows * n);
      LayerNorm(ctx, DType::kFloat32, x.data(), gamma.data(), beta.data(), rows, n, 1e-12f,
                plain.data());
      EXPECT_LT(ScaledMaxError(plain, Reference(x, nullptr, gamma, beta, rows, n, 1e-12)), 1e-4);
    }
  }
}

TEST(LayerNormTest, InPlaceAndNoAffine) {
  CpuContext ctx;
  const int64_t rows = 9, n = 33;
  auto x = RandomVector(rows * n, 5);
  auto res = RandomVector(rows * n, 6);
  const auto want = Reference(x, &res, {}, {}, rows, n, 1e-5);
  AddLayerNorm(ctx, DType::kFloat32, x.data(), res.data(), nullptr, nullptr, rows, n, 1e-5f,
               res.data());
  EXPECT_LT(ScaledMaxError(res, want), 1e-4);
}

// The bf16 copy is the fp32 output rounded (kernels/cpu/bf16_convert.h's
// rounding), bit for bit, and the fp32 output is the same as without it,
// in place too (the post-norm layers' case).
TEST(LayerNormTest, Bf16CopyIsTheOutputRounded) {
  for (const int threads : {1, 2}) {
    CpuContext ctx(threads);
    for (int64_t rows : {1, 300}) {
      const int64_t n = 768;
      const auto x = RandomVector(rows * n, 7, -3.f, 3.f), res = RandomVector(rows * n, 8);
      const auto gamma = RandomVector(n, 9), beta = RandomVector(n, 10);
      std::vector<float> want(rows * n);
      AddLayerNorm(ctx, DType::kFloat32, x.data(), res.data(), gamma.data(), beta.data(), rows, n,
                   1e-5f, want.data());
      std::vector<uint16_t> want16(rows * n);
      ConvertFloatToBFloat16(want.data(), want16.data(), rows * n);
      std::vector<float> out = x;
      std::vector<uint16_t> out16(rows * n, 0xffff);
      AddLayerNorm(ctx, DType::kFloat32, out.data(), res.data(), gamma.data(), beta.data(), rows, n,
                   1e-5f, out.data(), out16.data());
      EXPECT_EQ(out, want) << rows;
      EXPECT_EQ(out16, want16) << rows;
      // The copy alone (no float32 output): the same bits.
      std::vector<uint16_t> only16(rows * n, 0xffff);
      AddLayerNorm(ctx, DType::kFloat32, x.data(), res.data(), gamma.data(), beta.data(), rows, n,
                   1e-5f, nullptr, only16.data());
      EXPECT_EQ(only16, want16) << rows;
    }
  }
}

TEST(LayerNormTest, RejectsBadShapes) {
  CpuContext ctx;
  std::vector<float> x(8);
  EXPECT_THROW(LayerNorm(ctx, DType::kFloat32, x.data(), nullptr, nullptr, 1, 0, 1e-5f, x.data()),
               std::invalid_argument);
  EXPECT_THROW(LayerNorm(ctx, DType::kFloat32, x.data(), nullptr, nullptr, -1, 8, 1e-5f, x.data()),
               std::invalid_argument);
  EXPECT_THROW(LayerNorm(ctx, DType::kFloat32, x.data(), nullptr, nullptr, 1, 8, -1.f, x.data()),
               std::invalid_argument);
  EXPECT_THROW(LayerNorm(ctx, DType::kFloat32, nullptr, nullptr, nullptr, 1, 8, 1e-5f, x.data()),
               std::invalid_argument);
  // No output at all.
  EXPECT_THROW(LayerNorm(ctx, DType::kFloat32, x.data(), nullptr, nullptr, 1, 8, 1e-5f, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace encoderd::kernels
