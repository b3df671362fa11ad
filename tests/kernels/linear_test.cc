#include "kernels/linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cpu/bf16_convert.h"
#include "kernels/cpu/few_rows_gemm_avx512.h"
#include "kernels/cpu/gelu_bf16_avx512.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu_context.h"
#include "kernels/cpu_features.h"
#include "tests/kernels/kernel_test_util.h"

namespace encoderd::kernels {
namespace {

using testing::Cosine;
using testing::EightLaneDot;
using testing::RandomVector;
using testing::ScaledMaxError;

std::vector<double> Reference(const std::vector<float>& x, const std::vector<float>& w,
                              const std::vector<float>& b, const std::vector<float>& residual,
                              int64_t m, int64_t n, int64_t k, Epilogue ep) {
  std::vector<double> y(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = b.empty() ? 0.0 : b[j];
      for (int64_t c = 0; c < k; ++c) acc += static_cast<double>(x[i * k + c]) * w[j * k + c];
      if (ep == Epilogue::kGelu) acc = 0.5 * acc * (1 + std::erf(acc / std::sqrt(2.0)));
      if (ep == Epilogue::kRelu) acc = std::max(acc, 0.0);
      if (ep == Epilogue::kResidual) acc += residual[i * n + j];
      y[i * n + j] = acc;
    }
  }
  return y;
}

// int8 quantization written out: weights per output row, symmetric, 127
// steps; inputs per row, asymmetric uint8 over the row's range widened to
// hold 0. Returns the dequantized values, whose fp32 product is what the
// int8 GEMM computes.
std::vector<float> QuantizedWeights(std::vector<float> w, int64_t n, int64_t k) {
  for (int64_t j = 0; j < n; ++j) {
    float amax = 0;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(w[j * k + c]));
    const float s = amax > 0 ? amax / 127.f : 1.f;
    for (int64_t c = 0; c < k; ++c) w[j * k + c] = std::nearbyint(w[j * k + c] / s) * s;
  }
  return w;
}

std::vector<float> QuantizedRows(std::vector<float> x, int64_t m, int64_t k) {
  for (int64_t i = 0; i < m; ++i) {
    float lo = 0, hi = 0;
    for (int64_t c = 0; c < k; ++c) {
      lo = std::min(lo, x[i * k + c]);
      hi = std::max(hi, x[i * k + c]);
    }
    if (!(hi > lo)) continue;
    const float s = (hi - lo) / 255.f, zero = std::nearbyint(-lo / s);
    for (int64_t c = 0; c < k; ++c) {
      const float q = std::clamp(std::nearbyint(x[i * k + c] * (1.f / s)) + zero, 0.f, 255.f);
      x[i * k + c] = (q - zero) * s;
    }
  }
  return x;
}

std::vector<float> RoundedToBFloat16(std::vector<float> v) {
  RoundToBFloat16(v.data(), v.data(), static_cast<int64_t>(v.size()));
  return v;
}

// bf16 GEMMs (a bf16 weight where the CPU has AVX512-BF16: bf16_values())
// take GELU of the pre-activation rounded to bf16, as PyTorch's bf16
// modules do. Against the exact pre-activations `pre`: for each value the
// smaller error against GELU of the two bf16 values around its
// pre-activation (the GEMM's fp32 sum may round to either), the largest of
// those over the largest |GELU| (as ScaledMaxError).
double ScaledMaxErrorOfGeluOfBf16(const std::vector<float>& got, const std::vector<double>& pre) {
  EXPECT_EQ(got.size(), pre.size());
  const auto gelu = [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); };
  const auto from_bits = [](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return static_cast<double>(f);
  };
  double scale = 1e-6, err = 0;
  for (size_t i = 0; i < pre.size(); ++i) {
    const float f = static_cast<float>(pre[i]);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    const double toward_zero = from_bits(bits & 0xffff0000u);
    const double away = from_bits((bits & 0xffff0000u) + 0x10000u);
    scale = std::max(scale, std::abs(gelu(pre[i])));
    err = std::max(err,
                   std::min(std::abs(got[i] - gelu(toward_zero)), std::abs(got[i] - gelu(away))));
  }
  return err / scale;
}

// The AVX-512 GeluErf (avx512_math.h: piecewise polynomials) against double
// erf: within 1.5e-7 x max(1, |GELU|) on every 257th float of [-12, 12] and
// on every bf16 value there (what the GELU over bf16 GEMMs' outputs sees);
// exactly 0 or x far out, NaN as NaN. Rounding to bf16 first is GELU of the
// rounded values, bit for bit. Odd counts take the masked tail.
TEST(LinearTest, GeluErfOnAvx512IsWithinItsBound) {
  const CpuFeatures& cpu = GetCpuFeatures();
  if (!(cpu.avx512f && cpu.avx512bw && cpu.avx512_bf16)) {
    GTEST_SKIP() << "runs where the CPU has AVX-512 and AVX512-BF16";
  }
  std::vector<float> x;
  const auto add = [&x](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    x.push_back(f);
  };
  const uint32_t twelve = 0x41400000u;  // 12.f
  for (const uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t b = 0; b <= twelve; b += 257) add(sign | b);
    for (uint32_t b = 0; b <= twelve; b += 0x10000u) add(sign | b);
  }
  std::vector<float> y = x;
  GeluF32Avx512(y.data(), static_cast<int64_t>(y.size()), /*round_to_bf16=*/false);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i], want = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    worst = std::max(worst, std::abs(y[i] - want) / std::max(1.0, std::abs(want)));
  }
  EXPECT_LT(worst, 1.5e-7);
  std::vector<float> far = {100.f, -100.f, 1e30f, -1e30f, INFINITY, NAN, 0.f};
  GeluF32Avx512(far.data(), static_cast<int64_t>(far.size()), false);
  EXPECT_EQ(far[0], 100.f);
  EXPECT_EQ(far[1], 0.f);
  EXPECT_EQ(far[2], 1e30f);
  EXPECT_EQ(far[3], 0.f);
  EXPECT_EQ(far[4], INFINITY);
  EXPECT_TRUE(std::isnan(far[5]));
  EXPECT_EQ(far[6], 0.f);
  // GELU of the bf16-rounded values, in fp32 and in bf16.
  const auto some = RandomVector(1001, 71, -6.f, 6.f);
  std::vector<float> of_rounded = some, rounded = RoundedToBFloat16(some);
  GeluF32Avx512(of_rounded.data(), 1001, /*round_to_bf16=*/true);
  GeluF32Avx512(rounded.data(), 1001, false);
  EXPECT_EQ(std::memcmp(of_rounded.data(), rounded.data(), rounded.size() * sizeof(float)), 0);
  std::vector<uint16_t> bits16(1001);
  ConvertFloatToBFloat16(some.data(), bits16.data(), 1001);
  GeluBf16Avx512(bits16.data(), 1001);
  std::vector<uint16_t> want16(1001);
  ConvertFloatToBFloat16(rounded.data(), want16.data(), 1001);
  EXPECT_EQ(bits16, want16);
}

// rows 600 = one 512-row chunk + 80 (granule multiple) + 8 (tail); 21 = 16 + 5;
// 3700 = 2048 + 1024 + 512 + 112 + 4 in fp32 and bf16, 7 x 512 + 116 in int8
// on the int8 kernels.
class LinearTest
    : public ::testing::TestWithParam<std::tuple<int64_t, std::pair<int64_t, int64_t>, Epilogue>> {
};

// The int8 kernels where the CPU has AVX512-VNNI or AVX2 + FMA (ctest
// kernels_without_bf16_vnni and kernels_avx2 run the AVX2 one on a VNNI
// CPU); elsewhere int8 runs on the fp32 GEMM.
bool Int8Kernels() {
  const CpuFeatures& cpu = GetCpuFeatures();
  return (cpu.avx512f && cpu.avx512bw && cpu.avx512_vnni) || (cpu.avx2 && cpu.fma);
}

TEST_P(LinearTest, MatchesDoubleReference) {
  const auto [m, nk, ep] = GetParam();
  const auto [n, k] = nk;
  CpuContext ctx;
  const auto x = RandomVector(m * k, 1), w = RandomVector(n * k, 2, -0.2f, 0.2f);
  const auto b = RandomVector(n, 3), residual = RandomVector(m * n, 4, -2.f, 2.f);
  const auto want = Reference(x, w, b, residual, m, n, k, ep);

  const auto packed = PackedWeight::Pack(ctx, w.data(), b.data(), n, k, DType::kFloat32);
  EXPECT_EQ(packed->out_features(), n);
  EXPECT_EQ(packed->in_features(), k);
  std::vector<float> y(m * n, NAN);
  Linear(ctx, DType::kFloat32, x.data(), m, *packed, ep, residual.data(), y.data());
  EXPECT_LT(ScaledMaxError(y, want), 1e-4);

  // bf16 weights: close to the fp32 reference, and equal (up to fp32
  // summation) to the reference over bf16-rounded operands.
  const auto packed16 = PackedWeight::Pack(ctx, w.data(), b.data(), n, k, DType::kBFloat16);
  std::vector<float> y16(m * n, NAN);
  Linear(ctx, DType::kFloat32, x.data(), m, *packed16, ep, residual.data(), y16.data());
  EXPECT_GE(Cosine(y16, want), 0.999);
  const auto want16 =
      Reference(RoundedToBFloat16(x), RoundedToBFloat16(w), b, residual, m, n, k, ep);
  if (ep == Epilogue::kGelu && packed16->bf16_values()) {
    const auto pre16 = Reference(RoundedToBFloat16(x), RoundedToBFloat16(w), b, residual, m, n, k,
                                 Epilogue::kNone);
    EXPECT_LT(ScaledMaxErrorOfGeluOfBf16(y16, pre16), 1e-5);
  } else {
    EXPECT_LT(ScaledMaxError(y16, want16), 1e-4);
  }

  // int8 weights: close to the fp32 reference, and equal (up to fp32
  // summation) to the reference over the quantized operands, on the int8
  // kernels (VNNI, AVX2) and on the fp32 GEMM (ENCODERD_CPU_DISABLE=avx2,
  // fma,avx512...: ctest kernels_cpu_fallback) alike.
  const auto packed8 = PackedWeight::Pack(ctx, w.data(), b.data(), n, k, DType::kInt8);
  EXPECT_EQ(packed8->type(), DType::kInt8);
  // The int8 kernels keep int8 weights, whose columns are padded to groups
  // of 64 (the fallback keeps them dequantized, as fp32).
  if (Int8Kernels() && n * k >= 4096) {
    EXPECT_LT(packed8->bytes(), n * k * sizeof(float) / 2);
  }
  std::vector<float> y8(m * n, NAN);
  Linear(ctx, DType::kFloat32, x.data(), m, *packed8, ep, residual.data(), y8.data());
  EXPECT_GE(Cosine(y8, want), 0.999);
  const auto want8 =
      Reference(QuantizedRows(x, m, k), QuantizedWeights(w, n, k), b, residual, m, n, k, ep);
  EXPECT_LT(ScaledMaxError(y8, want8), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearTest,
    ::testing::Combine(::testing::Values<int64_t>(1, 21, 600, 3700),
                       ::testing::Values(std::make_pair<int64_t, int64_t>(37, 19),
                                         std::make_pair<int64_t, int64_t>(96, 64),
                                         std::make_pair<int64_t, int64_t>(40, 768)),
                       ::testing::Values(Epilogue::kNone, Epilogue::kGelu, Epilogue::kRelu,
                                         Epilogue::kResidual)));

// int8 weights are quantized per output row with scale amax / 127; a row of
// values too small for that to be a normal float (here 1e-44, a subnormal:
// the scale rounded to 0, and 0 / 0 made NaN, converted to int8 undefined)
// gets scale 1 and quantizes to zeros, as an all-zero row does; a row
// holding an infinity gets scale 1 too, and NaN weights quantize to 0.
TEST(LinearTest, Int8RowScalesArePositiveAndFiniteForEveryRow) {
  CpuContext ctx;
  const int64_t n = 4, k = 40;
  std::vector<float> w = RandomVector(n * k, 61, -0.1f, 0.1f);
  for (int64_t i = 0; i < k; ++i) w[i] = (i % 2 ? -1 : 1) * 1e-44f;  // row 0: subnormals
  w[2 * k + 3] = INFINITY;                                           // row 2: an infinity
  w[3 * k + 5] = NAN;                                                // row 3: a NaN
  const std::vector<float> b = {0.5f, -0.25f, 0.125f, 1.f};
  const auto packed = PackedWeight::Pack(ctx, w.data(), b.data(), n, k, DType::kInt8);
  const auto& impl = static_cast<const CpuPackedWeight&>(packed->impl());
  ASSERT_GE(impl.weight_scale.size(), static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    EXPECT_TRUE(impl.weight_scale[r] >= 1e-38f && std::isfinite(impl.weight_scale[r])) << r;
  }
  EXPECT_EQ(impl.weight_scale[0], 1.f);
  EXPECT_EQ(impl.weight_scale[2], 1.f);
  const auto x = RandomVector(3 * k, 62);
  std::vector<float> y(3 * n, NAN);
  Linear(ctx, DType::kFloat32, x.data(), 3, *packed, Epilogue::kNone, nullptr, y.data());
  for (int64_t m = 0; m < 3; ++m) {
    EXPECT_NEAR(y[m * n], b[0], 1e-6) << m;  // the subnormal row: its bias
    for (int64_t r = 1; r < n; ++r) EXPECT_TRUE(std::isfinite(y[m * n + r])) << m << " " << r;
  }
}

// In place (residual == y), as the encoder layers call it. K > 512 makes
// oneDNN split the reduction, which once corrupted an aliased residual.
TEST(LinearTest, NoBiasAndResidualAliasingOutput) {
  CpuContext ctx;
  for (const int64_t k : {40, 768, 3072}) {
    for (const int64_t m : {13, 600}) {
      const int64_t n = 24;
      const auto x = RandomVector(m * k, 5), w = RandomVector(n * k, 6, -0.05f, 0.05f);
      auto y = RandomVector(m * n, 7);
      const auto want = Reference(x, w, {}, y, m, n, k, Epilogue::kResidual);
      const auto packed = PackedWeight::Pack(ctx, w.data(), nullptr, n, k, DType::kFloat32);
      auto y8 = y;
      Linear(ctx, DType::kFloat32, x.data(), m, *packed, Epilogue::kResidual, y.data(), y.data());
      EXPECT_LT(ScaledMaxError(y, want), 1e-4) << "k=" << k << " m=" << m;
      const auto packed8 = PackedWeight::Pack(ctx, w.data(), nullptr, n, k, DType::kInt8);
      const auto want8 = Reference(QuantizedRows(x, m, k), QuantizedWeights(w, n, k), {}, y8, m, n,
                                   k, Epilogue::kResidual);
      Linear(ctx, DType::kFloat32, x.data(), m, *packed8, Epilogue::kResidual, y8.data(),
             y8.data());
      EXPECT_LT(ScaledMaxError(y8, want8), 1e-4) << "int8 k=" << k << " m=" << m;
    }
  }
}

// oneDNN's GEMMs take rows in chunks of a bounded set of sizes
// (linear_cpu.cc, ChunkRows): a remainder of up to 128 rows is one chunk,
// one pass over the weight (before 2026-12-01, 100 rows were 96 + 4: two
// passes), and every row count from 1 to 2,200 leaves a weight with
// exactly kMaxPrimitivesPerEpilogue primitives for its one epilogue, each
// call's results those of the reference.
TEST(LinearTest, GemmChunksComeFromABoundedSetOfRowCounts) {
  CpuContext ctx;
  const int64_t n = 37, k = 19, most = 2200;
  const auto w = RandomVector(n * k, 51, -0.2f, 0.2f), b = RandomVector(n, 52);
  const auto x = RandomVector(most * k, 53);
  for (const DType type : {DType::kFloat32, DType::kBFloat16}) {
    const bool bf16 = type == DType::kBFloat16;
    const auto packed = PackedWeight::Pack(ctx, w.data(), b.data(), n, k, type);
    const auto& impl = static_cast<const CpuPackedWeight&>(packed->impl());
    std::vector<float> y(most * n);
    Linear(ctx, DType::kFloat32, x.data(), 100, *packed, Epilogue::kNone, nullptr, y.data());
    // None where the few-row kernel takes 100 rows (a bf16 weight widened
    // in registers on AVX-512).
    EXPECT_EQ(impl.primitives.size(), LinearRunsOnTeam(*packed, 100) ? 0u : 1u) << DTypeName(type);
    for (int64_t m = 1; m <= most; ++m) {
      Linear(ctx, DType::kFloat32, x.data(), m, *packed, Epilogue::kNone, nullptr, y.data());
      if (m == 50 || m == 128 || m == 130 || m == 511 || m == 600 || m == 2100) {
        const std::vector<float> xm(x.begin(), x.begin() + m * k);
        const auto want = bf16 ? Reference(RoundedToBFloat16(xm), RoundedToBFloat16(w), b, {}, m, n,
                                           k, Epilogue::kNone)
                               : Reference(xm, w, b, {}, m, n, k, Epilogue::kNone);
        const std::vector<float> got(y.begin(), y.begin() + m * n);
        EXPECT_LT(ScaledMaxError(got, want), 1e-4) << DTypeName(type) << " rows " << m;
      }
    }
    // A weight widened for the GEMMs (widened_for_gemm(): a bf16 weight
    // without AVX512-BF16) as well: until 2026-12-07 its threads' GEMMs
    // took at most 512 rows, 2 primitives fewer.
    EXPECT_EQ(impl.primitives.size(), static_cast<size_t>(kMaxPrimitivesPerEpilogue))
        << DTypeName(type);
  }
  // oneDNN's cache, which weights of one shape share, holds many such sets.
  if (std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") == nullptr &&
      std::getenv("DNNL_PRIMITIVE_CACHE_CAPACITY") == nullptr) {
    EXPECT_GE(dnnl::get_primitive_cache_capacity(), kOneDnnPrimitiveCacheEntries);
  }
}

// Up to kFewRowsMax rows run on the few-row kernels where the CPU has
// AVX-512 (and, for bf16 weights, AVX512-BF16 and an even k), and on AVX2 +
// FMA (ctest kernels_avx2 on an AVX-512 CPU, oneDNN held to AVX2; fp32
// weights there from kFewRowsF32Avx2MinBytes on, none of these): every row
// count (one tile of 1-6 rows by 64 columns, or 2-6 over chunks of steps; on
// AVX2 blocks of up to 2 rows by 4 columns),
// widths around the 16-lane blocks and 64-column groups (a last group of 1,
// 2, 8, 21, 24, 36 or 64 columns), odd and even inputs, 1 to 3 threads,
// every epilogue, the residual in place. 13 rows go to oneDNN, for
// comparison. Against the
// double reference over the operands the GEMM multiplies.
TEST(LinearTest, FewRowsMatchDoubleReference) {
  const CpuFeatures& cpu = GetCpuFeatures();
  for (const int threads : {1, 2, 3}) {
    CpuContext ctx(threads);
    for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 1}, {21, 5}, {64, 64}, {65, 66}, {100, 67}, {130, 129}, {200, 768}, {24, 3072}}) {
      const auto w = RandomVector(n * k, 41, -0.2f, 0.2f), b = RandomVector(n, 42);
      for (const DType type : {DType::kFloat32, DType::kBFloat16}) {
        const auto packed = PackedWeight::Pack(ctx, w.data(), b.data(), n, k, type);
        const bool bf16 = type == DType::kBFloat16;
        // oneDNN 2.6 packs every shape here in the layouts the kernels
        // read; another oneDNN may pick others for tiny ones.
        const bool expect_kernel =
            (cpu.avx512f && (!bf16 || !(cpu.avx512_bf16 && cpu.avx512bw) || k % 2 == 0)) ||
            (!cpu.avx512f && cpu.avx2 && cpu.fma && (bf16 || n * k * 4 >= kFewRowsF32Avx2MinBytes));
        if (n * k >= 4096) {
          EXPECT_EQ(static_cast<const CpuPackedWeight&>(packed->impl()).few_rows, expect_kernel)
              << "n " << n << " k " << k << " bf16 " << bf16;
        }
        for (int64_t m = 1; m <= kFewRowsMax + 1; ++m) {
          const auto x = RandomVector(m * k, 43 + m);
          const auto residual = RandomVector(m * n, 44, -2.f, 2.f);
          for (const Epilogue ep :
               {Epilogue::kNone, Epilogue::kGelu, Epilogue::kRelu, Epilogue::kResidual}) {
            const auto want = bf16 ? Reference(RoundedToBFloat16(x), RoundedToBFloat16(w), b,
                                               residual, m, n, k, ep)
                                   : Reference(x, w, b, residual, m, n, k, ep);
            std::vector<float> y =
                ep == Epilogue::kResidual ? residual : std::vector<float>(m * n, NAN);
            Linear(ctx, DType::kFloat32, x.data(), m, *packed, ep,
                   ep == Epilogue::kResidual ? y.data() : nullptr, y.data());
            const bool gelu_of_bf16 = ep == Epilogue::kGelu && packed->bf16_values();
            EXPECT_LT(gelu_of_bf16 ? ScaledMaxErrorOfGeluOfBf16(
                                         y, Reference(RoundedToBFloat16(x), RoundedToBFloat16(w), b,
                                                      residual, m, n, k, Epilogue::kNone))
                                   : ScaledMaxError(y, want),
                      1e-5)
                << "threads " << threads << " n " << n << " k " << k << " m " << m << " bf16 "
                << bf16 << " epilogue " << static_cast<int>(ep);
          }
        }
      }
    }
  }
}

// A bf16 weight [n, k] whose few rows run on a kernel that widens its bf16
// copy (the tests below): the same bf16-rounded values packed as fp32, and
// a bf16 weight of k + 1 inputs, whose few-row Linear (the same path, the
// same row stride for an odd k) leaves NaN just past each row's k inputs in
// the row scratch, which at an odd k the kernel must not multiply. The copy
// is the weight's only one where oneDNN's fp32 layout is one it is widened
// into (widened_for_gemm(): BA16a64b on AVX-512, ba on AVX2): its bytes
// are then the copy's and the bias's, half the fp32 weight's. Elsewhere
// oneDNN's fp32 weights are kept too, and overwritten here with NaN, so
// that only the copy can give a few rows finite results.
struct WidenedBf16 {
  std::vector<float> b, rounded_w;
  std::unique_ptr<PackedWeight> bf16, fp32, poison;

  // Leaves NaN past the inputs of m rows in the row scratch (at an odd k).
  void PoisonScratch(const CpuContext& ctx, int64_t m, int64_t k) const {
    if (k % 2 == 0) return;
    std::vector<float> x(m * (k + 1), 1.f), y(m * 64);
    for (int64_t i = 0; i < m; ++i) x[i * (k + 1) + k] = NAN;
    Linear(ctx, DType::kFloat32, x.data(), m, *poison, Epilogue::kNone, nullptr, y.data());
  }
};

void MakeWidenedBf16(const CpuContext& ctx, int64_t n, int64_t k, uint32_t seed, WidenedBf16* out) {
  const auto w = RandomVector(n * k, seed, -0.2f, 0.2f);
  out->b = RandomVector(n, seed + 1);
  out->rounded_w = RoundedToBFloat16(w);
  out->bf16 = PackedWeight::Pack(ctx, w.data(), out->b.data(), n, k, DType::kBFloat16);
  out->fp32 = PackedWeight::Pack(ctx, out->rounded_w.data(), out->b.data(), n, k, DType::kFloat32);
  auto& impl = static_cast<CpuPackedWeight&>(out->bf16->impl());
  ASSERT_TRUE(impl.few_rows_bf16 != nullptr) << "n " << n << " k " << k;
  ASSERT_TRUE(impl.few_rows);
  // The bf16 copy: k padded to 32, n to 64 (AVX-512's layout); k padded to
  // 16 (AVX2's).
  const size_t copy = static_cast<size_t>(GetCpuFeatures().avx512f
                                              ? FewRowsGroups(n) * 64 * FewRowsBf16Inputs(k) * 2
                                              : n * FewRowsBf16ColumnsInputs(k) * 2);
  EXPECT_EQ(impl.few_rows_bf16_bytes, static_cast<int64_t>(copy)) << "n " << n << " k " << k;
  const size_t fp32_weight =
      static_cast<const CpuPackedWeight&>(out->fp32->impl()).weight_desc.get_size();
  // oneDNN 2.6 packs fp32 weights as BA16a64b on AVX-512 (the fp32 few-row
  // layout, which the tests below assert).
  if (GetCpuFeatures().avx512f) {
    EXPECT_TRUE(impl.widened_for_gemm()) << "n " << n << " k " << k;
  }
  if (impl.widened_for_gemm()) {
    EXPECT_FALSE(impl.weight);
    EXPECT_EQ(out->bf16->bytes(), out->fp32->bytes() - fp32_weight + copy)
        << "n " << n << " k " << k;
  } else {
    EXPECT_EQ(out->bf16->bytes(), out->fp32->bytes() + copy) << "n " << n << " k " << k;
    std::fill_n(static_cast<float*>(impl.weight.get_data_handle()),
                impl.weight.get_desc().get_size() / sizeof(float), NAN);
  }
  const auto poison_w = RandomVector(64 * (k + 1), seed + 2);
  out->poison = PackedWeight::Pack(ctx, poison_w.data(), nullptr, 64, k + 1, DType::kBFloat16);
  ASSERT_TRUE(static_cast<const CpuPackedWeight&>(out->poison->impl()).few_rows);
}

const std::vector<std::pair<int64_t, int64_t>> kWidenedShapes = {
    {64, 64}, {65, 67}, {130, 129}, {200, 768}, {24, 3072}};

// bf16 weights on a CPU with AVX-512 but not AVX512-BF16 (here, or with
// ENCODERD_CPU_DISABLE=avx512_bf16: ctest kernels_without_bf16_vnni): a few
// rows read the bf16 copy (WidenedBf16), widened to fp32 in registers, and
// give what the fp32 kernel gives on the same bf16-rounded weights and
// inputs, bit for bit: up to kFewRowsMax rows in one call, and up to
// kFewRowsBf16AsF32MaxRows in blocks (37, 100 and 384 rows here), each row
// what the fp32 kernel gives it in a call of up to kFewRowsMax rows.
TEST(LinearTest, Bf16WeightsWithoutBf16InstructionsAreTheFp32KernelOnRoundedValues) {
  const CpuFeatures& cpu = GetCpuFeatures();
  if (!cpu.avx512f || cpu.avx512_bf16) {
    GTEST_SKIP() << "runs where the CPU has AVX-512 and no AVX512-BF16 (or it is disabled)";
  }
  for (const int threads : {1, 2}) {
    CpuContext ctx(threads);
    for (const auto& [n, k] : kWidenedShapes) {
      WidenedBf16 wb;
      MakeWidenedBf16(ctx, n, k, 51, &wb);
      if (HasFatalFailure()) return;
      ASSERT_TRUE(static_cast<const CpuPackedWeight&>(wb.fp32->impl()).few_rows)
          << "oneDNN packed the fp32 weight in a layout the fp32 kernel does not read";
      std::vector<int64_t> rows(kFewRowsMax);
      std::iota(rows.begin(), rows.end(), 1);
      for (const int64_t m : {kFewRowsMax + 1, int64_t{100}, kFewRowsBf16AsF32MaxRows}) {
        rows.push_back(m);
      }
      for (const int64_t m : rows) {
        const auto x = RandomVector(m * k, 53 + m);
        const auto rounded_x = RoundedToBFloat16(x);
        const auto residual = RandomVector(m * n, 54, -2.f, 2.f);
        for (const Epilogue ep :
             {Epilogue::kNone, Epilogue::kGelu, Epilogue::kRelu, Epilogue::kResidual}) {
          const bool res = ep == Epilogue::kResidual;
          std::vector<float> got = res ? residual : std::vector<float>(m * n, NAN);
          std::vector<float> want = got;
          wb.PoisonScratch(ctx, m, k);
          Linear(ctx, DType::kFloat32, x.data(), m, *wb.bf16, ep, res ? got.data() : nullptr,
                 got.data());
          // The fp32 kernel takes up to kFewRowsMax rows a call; each row's
          // sums are its own, whatever rows it comes with.
          for (int64_t r0 = 0; r0 < m; r0 += kFewRowsMax) {
            const int64_t r = std::min(kFewRowsMax, m - r0);
            Linear(ctx, DType::kFloat32, rounded_x.data() + r0 * k, r, *wb.fp32, ep,
                   res ? want.data() + r0 * n : nullptr, want.data() + r0 * n);
          }
          EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
              << "threads " << threads << " n " << n << " k " << k << " m " << m << " epilogue "
              << static_cast<int>(ep);
          if (res) {  // the residual in its own buffer
            std::vector<float> apart(m * n, NAN);
            Linear(ctx, DType::kFloat32, x.data(), m, *wb.bf16, ep, residual.data(), apart.data());
            EXPECT_EQ(std::memcmp(apart.data(), want.data(), want.size() * sizeof(float)), 0)
                << "threads " << threads << " n " << n << " k " << k << " m " << m;
          }
        }
      }
    }
  }
}

// A few rows of the weights [n, k] on AVX2 + FMA: each sum made as the
// kernel makes it over the operands as it takes them (x and w): in 8 lanes,
// FMA chains each, added in one order (EightLaneDot); then the bias. So the
// results are these written-out sums bit for bit, and so is the epilogue,
// but for GELU (a polynomial erf: within 2e-6). `before` runs before each
// call. fp32 weights up to kFewRowsF32Avx2MaxRows rows; bf16 ones
// (bf16_weights: w holds their values) up to kFewRowsMax in one call and
// more in blocks of up to kFewRowsMax.
void ExpectFmaChainsOnAvx2(const CpuContext& ctx, const PackedWeight& packed,
                           const std::vector<float>& w, const std::vector<float>& b, int64_t n,
                           int64_t k, uint32_t seed, bool bf16_weights,
                           const std::function<void(int64_t m)>& before) {
  std::vector<int64_t> rows(bf16_weights ? kFewRowsMax : kFewRowsF32Avx2MaxRows);
  std::iota(rows.begin(), rows.end(), 1);
  if (bf16_weights) {
    for (const int64_t m : {kFewRowsMax + 1, int64_t{100}, kFewRowsBf16AsF32Avx2MaxRows}) {
      rows.push_back(m);
    }
  }
  for (const int64_t m : rows) {
    auto x = RandomVector(m * k, seed + m);
    // (The kernel rounds them as well: bf16-rounded values stay as they are.)
    if (bf16_weights) x = RoundedToBFloat16(x);
    const auto residual = RandomVector(m * n, seed + 100, -2.f, 2.f);
    std::vector<float> sums(m * n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j)
        sums[i * n + j] = EightLaneDot(&x[i * k], &w[j * k], k) + b[j];
    }
    for (const Epilogue ep :
         {Epilogue::kNone, Epilogue::kGelu, Epilogue::kRelu, Epilogue::kResidual}) {
      const bool res = ep == Epilogue::kResidual;
      std::vector<float> got = res ? residual : std::vector<float>(m * n, NAN);
      before(m);
      Linear(ctx, DType::kFloat32, x.data(), m, packed, ep, res ? got.data() : nullptr, got.data());
      for (int64_t i = 0; i < m * n; ++i) {
        float want = sums[i];
        if (res) want += residual[i];
        if (ep == Epilogue::kRelu) want = want > 0.f ? want : 0.f;
        if (ep == Epilogue::kGelu) {
          const double gelu = 0.5 * want * (1 + std::erf(want / std::sqrt(2.0)));
          ASSERT_NEAR(got[i], gelu, 2e-6 * std::max(1.0, std::fabs(gelu)))
              << "threads " << ctx.num_threads() << " n " << n << " k " << k << " m " << m;
          continue;
        }
        ASSERT_EQ(got[i], want) << "threads " << ctx.num_threads() << " n " << n << " k " << k
                                << " m " << m << " epilogue " << static_cast<int>(ep) << " at "
                                << i;
      }
    }
  }
}

bool Avx2WithoutAvx512() {
  const CpuFeatures& cpu = GetCpuFeatures();
  return !cpu.avx512f && cpu.avx2 && cpu.fma;
}

// bf16 weights on a CPU with AVX2 and FMA but no AVX-512 (here, or with
// ENCODERD_CPU_DISABLE=avx512f,...: ctest kernels_avx2): a few rows read
// the bf16 copy (WidenedBf16), widened in registers: the fp32 kernel's
// sums (8 lanes of FMA chains) over the bf16-rounded operands, up to
// kFewRowsMax rows in one call and up to kFewRowsBf16AsF32Avx2MaxRows in
// blocks (37, 100 and 128 rows here). (Until 2026-12-08 one FMA chain in
// the order of the inputs, on another layout.)
TEST(LinearTest, Bf16WeightsOnAvx2AreFmaChainsOverRoundedValues) {
  if (!Avx2WithoutAvx512()) {
    GTEST_SKIP() << "runs where the CPU has AVX2 and FMA and no AVX-512 (or it is disabled)";
  }
  for (const int threads : {1, 2}) {
    CpuContext ctx(threads);
    for (const auto& [n, k] : kWidenedShapes) {
      WidenedBf16 wb;
      MakeWidenedBf16(ctx, n, k, 61, &wb);
      if (HasFatalFailure()) return;
      ExpectFmaChainsOnAvx2(ctx, *wb.bf16, wb.rounded_w, wb.b, n, k, 63, /*bf16_weights=*/true,
                            [&](int64_t m) { wb.PoisonScratch(ctx, m, k); });
      if (HasFatalFailure()) return;
    }
  }
}

// bf16 weights on a CPU with AVX-512 or AVX2 + FMA but not AVX512-BF16
// (here, or with ctest kernels_without_bf16_vnni and kernels_avx2): more
// rows than the few-row kernels take run on oneDNN's fp32 GEMMs over the
// bf16 copy widened at each call (widened_for_gemm(), the threads' shares
// of the column groups into one scratch): the GEMMs of the same
// bf16-rounded values packed as fp32, bit for bit (the same primitive on
// the same values; until 2026-12-07, when each thread ran its own share of
// the columns, only within fp32 summation on AVX2). On AVX2 the copy is
// widened into `ba`, the layout of fp32 weights there from
// kFewRowsF32Avx2MinBytes on (the last shape here); smaller fp32 weights
// are `ab`, whose primitive sums in another order: within fp32 summation
// (within 1e-5 of max(1, |result|)) there. Just over the few-row kernels' limit (129
// rows on AVX2, 385 on AVX-512: one chunk), 600 rows (512 + 88) and 2,100
// (2,048 + 52), at 1, 2 and 3 threads (more threads than a weight has
// column groups: the last widen nothing); the residual in place and apart.
TEST(LinearTest, Bf16WeightsWithoutBf16InstructionsRunOneDnnOnTheWidenedCopy) {
  const CpuFeatures& cpu = GetCpuFeatures();
  if (!(cpu.avx512f || (cpu.avx2 && cpu.fma)) || (cpu.avx512_bf16 && cpu.avx512bw)) {
    GTEST_SKIP() << "runs where the CPU has AVX-512 or AVX2 + FMA, and no AVX512-BF16 (or it is "
                    "disabled)";
  }
  std::vector<std::pair<int64_t, int64_t>> shapes = kWidenedShapes;
  shapes.emplace_back(512, 1024);  // 2 MiB in fp32
  if (!cpu.avx512f) {
    // One output (a reranker's head) or one input: oneDNN compares no stride
    // of a dimension of 1, so `ab` and `ba` compare equal there, and the
    // AVX2 copy must still be widened as its own layout.
    shapes.emplace_back(1, 768);
    shapes.emplace_back(64, 1);
  }
  for (const int threads : {1, 2, 3}) {
    CpuContext ctx(threads);
    for (const auto& [n, k] : shapes) {
      WidenedBf16 wb;
      MakeWidenedBf16(ctx, n, k, 71, &wb);
      if (HasFatalFailure()) return;
      const auto& impl = static_cast<const CpuPackedWeight&>(wb.bf16->impl());
      if (!impl.widened_for_gemm()) continue;  // its own fp32 weights, NaN now (MakeWidenedBf16)
      const bool same_layout =
          impl.weight_desc == static_cast<const CpuPackedWeight&>(wb.fp32->impl()).weight_desc;
      EXPECT_TRUE(same_layout || (!cpu.avx512f && n * k * 4 < kFewRowsF32Avx2MinBytes))
          << "n " << n << " k " << k;
      for (const int64_t m : {kFewRowsBf16AsF32Avx2MaxRows + 1, kFewRowsBf16AsF32MaxRows + 1,
                              int64_t{600}, int64_t{2100}}) {
        // Fewer rows run on the few-row kernels (the tests above).
        if (m <= (cpu.avx512f ? kFewRowsBf16AsF32MaxRows : kFewRowsBf16AsF32Avx2MaxRows)) continue;
        const auto x = RandomVector(m * k, 73 + m);
        const auto rounded_x = RoundedToBFloat16(x);
        const auto residual = RandomVector(m * n, 74, -2.f, 2.f);
        for (const Epilogue ep :
             {Epilogue::kNone, Epilogue::kGelu, Epilogue::kRelu, Epilogue::kResidual}) {
          const bool res = ep == Epilogue::kResidual;
          std::vector<float> got = res ? residual : std::vector<float>(m * n, NAN);
          std::vector<float> want = got;
          Linear(ctx, DType::kFloat32, x.data(), m, *wb.bf16, ep, res ? got.data() : nullptr,
                 got.data());
          Linear(ctx, DType::kFloat32, rounded_x.data(), m, *wb.fp32, ep,
                 res ? want.data() : nullptr, want.data());
          std::vector<float> apart(m * n, NAN);  // the residual in its own buffer
          if (res) {
            Linear(ctx, DType::kFloat32, x.data(), m, *wb.bf16, ep, residual.data(), apart.data());
          }
          for (const std::vector<float>* y : {&got, &apart}) {
            if (y == &apart && !res) continue;
            if (same_layout) {
              EXPECT_EQ(std::memcmp(y->data(), want.data(), want.size() * sizeof(float)), 0)
                  << "threads " << threads << " n " << n << " k " << k << " m " << m << " epilogue "
                  << static_cast<int>(ep);
              continue;
            }
            for (int64_t i = 0; i < m * n; ++i) {  // (2.6e-6 at most, on a Zen 1 EPYC)
              ASSERT_NEAR((*y)[i], want[i], 1e-5f * std::max(1.f, std::fabs(want[i])))
                  << "threads " << threads << " n " << n << " k " << k << " m " << m << " epilogue "
                  << static_cast<int>(ep) << " at " << i;
            }
          }
        }
      }
    }
  }
}

// fp32 weights on the same CPUs, from kFewRowsF32Avx2MinBytes on: packed
// as torch's [n][k] (oneDNN's `ba`), which the few-row kernel reads a block
// of 4 columns at a time, 8 inputs a step: FMA chains in 8 lanes added in
// one order (EightLaneDot), up to kFewRowsF32Avx2MaxRows rows. Threads'
// last blocks of 1-4 columns (widths 1005, 769, 1027, 24), inputs a
// multiple of 8 or not (the last step through masks). A weight just under
// the size stays on oneDNN.
TEST(LinearTest, F32WeightsOnAvx2AreFmaChains) {
  if (!Avx2WithoutAvx512()) {
    GTEST_SKIP() << "runs where the CPU has AVX2 and FMA and no AVX-512 (or it is disabled)";
  }
  CpuContext small_ctx(1);
  const auto small_w = RandomVector(512 * 1023, 70);
  const auto small =
      PackedWeight::Pack(small_ctx, small_w.data(), nullptr, 512, 1023, DType::kFloat32);
  EXPECT_FALSE(static_cast<const CpuPackedWeight&>(small->impl()).few_rows);
  for (const int threads : {1, 2}) {
    CpuContext ctx(threads);
    for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{
             {1005, 600}, {769, 769}, {1027, 613}, {24, 24000}}) {
      const auto w = RandomVector(n * k, 71, -0.2f, 0.2f), b = RandomVector(n, 72);
      const auto packed = PackedWeight::Pack(ctx, w.data(), b.data(), n, k, DType::kFloat32);
      ASSERT_TRUE(static_cast<const CpuPackedWeight&>(packed->impl()).few_rows)
          << "n " << n << " k " << k << ": oneDNN packed the weight in a layout the kernel does "
          << "not read";
      ExpectFmaChainsOnAvx2(ctx, *packed, w, b, n, k, 73, /*bf16_weights=*/false, [](int64_t) {});
      if (HasFatalFailure()) return;
    }
  }
}

// The int8 Linear on its kernels (VNNI, AVX2), written out: integer sums of the quantized
// operands, then the epilogue's fp32 operations in the kernel's order
// (kernels/cpu/int8_gemm_avx512.h). Without GELU the kernel must give these
// values exactly, whatever the shape, the threads and the split of rows and
// column groups between them; with GELU (a polynomial erf) within 2e-6.
struct Int8Reference {
  std::vector<float> y;  // before the activation
  std::vector<float> activated;
};

Int8Reference Int8Written(const std::vector<float>& x, const std::vector<float>& w,
                          const std::vector<float>& b, const std::vector<float>& residual,
                          int64_t m, int64_t n, int64_t k, Epilogue ep) {
  std::vector<int> qw(n * k);
  std::vector<float> ws(n), comp(n);
  for (int64_t j = 0; j < n; ++j) {
    float amax = 0;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(w[j * k + c]));
    ws[j] = amax > 0 ? amax / 127.f : 1.f;
    int64_t sum = 0;
    for (int64_t c = 0; c < k; ++c) {
      qw[j * k + c] =
          static_cast<int>(std::clamp(std::nearbyint(w[j * k + c] / ws[j]), -127.f, 127.f));
      sum += qw[j * k + c];
    }
    comp[j] = ws[j] * static_cast<float>(sum);
  }
  Int8Reference r{std::vector<float>(m * n), std::vector<float>(m * n)};
  std::vector<int> qx(k);
  for (int64_t i = 0; i < m; ++i) {
    float lo = 0, hi = 0;
    for (int64_t c = 0; c < k; ++c) {
      lo = std::min(lo, x[i * k + c]);
      hi = std::max(hi, x[i * k + c]);
    }
    float scale = (hi - lo) / 255.f, zero = 0;
    if (scale >= std::numeric_limits<float>::min()) {
      zero = std::clamp(std::nearbyint(-lo / scale), 0.f, 255.f);
    } else {
      scale = 1;
    }
    const float inv = 1.f / scale;
    for (int64_t c = 0; c < k; ++c) {
      qx[c] = static_cast<int>(std::clamp(std::nearbyint(x[i * k + c] * inv) + zero, 0.f, 255.f));
    }
    for (int64_t j = 0; j < n; ++j) {
      int64_t acc = 0;
      for (int64_t c = 0; c < k; ++c) acc += qx[c] * qw[j * k + c];
      float v = scale * (static_cast<float>(acc) * ws[j]);
      v = std::fma(-(scale * zero), comp[j], v);
      if (!b.empty()) v += b[j];
      if (ep == Epilogue::kResidual) v += residual[i * n + j];
      r.y[i * n + j] = v;
      r.activated[i * n + j] =
          ep == Epilogue::kRelu   ? std::max(v, 0.f)
          : ep == Epilogue::kGelu ? static_cast<float>(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))))
                                  : v;
    }
  }
  return r;
}

TEST(LinearTest, Int8KernelsAreTheQuantizedSumsExactly) {
  if (!Int8Kernels()) GTEST_SKIP() << "no AVX512-VNNI or AVX2 + FMA: int8 runs on the fp32 GEMM";
  // Widths around the 16-lane blocks and 64-column groups, inputs around the
  // steps of 4; rows around the VNNI kernel's 6-row tiles, the few-row
  // kernel's 1 to 6 tiles (up to kFewRowsMax rows) and the AVX2 one's
  // blocks of 4, and enough (100, 600) to split the rows of a group between
  // threads.
  for (const int threads : {1, 2, 3, 4}) {
    CpuContext ctx(threads);
    for (const int64_t n : {1, 15, 16, 17, 60, 63, 64, 65, 200}) {
      for (const int64_t k : {1, 2, 3, 5, 67, 768}) {
        if (k == 768 && n != 200) continue;
        const auto w = RandomVector(n * k, 31, -0.3f, 0.3f), b = RandomVector(n, 32);
        const auto packed = PackedWeight::Pack(ctx, w.data(), b.data(), n, k, DType::kInt8);
        for (const int64_t m :
             {0, 1, 2, 5, 6, 7, 8, 12, 13, 18, 19, 24, 25, 30, 31, 36, 37, 100, 600}) {
          const auto x = RandomVector(m * k, 33, -2.f, 3.f);
          const auto residual = RandomVector(m * n, 34);
          for (const Epilogue ep :
               {Epilogue::kNone, Epilogue::kRelu, Epilogue::kResidual, Epilogue::kGelu}) {
            const Int8Reference want = Int8Written(x, w, b, residual, m, n, k, ep);
            // In place for the residual, as the encoder layers call it.
            std::vector<float> y =
                ep == Epilogue::kResidual ? residual : std::vector<float>(m * n, NAN);
            Linear(ctx, DType::kFloat32, x.data(), m, *packed, ep,
                   ep == Epilogue::kResidual ? y.data() : nullptr, y.data());
            int64_t wrong = 0;
            for (int64_t i = 0; i < m * n; ++i) {
              const float got = y[i], expect = want.activated[i];
              const bool ok =
                  ep == Epilogue::kGelu
                      ? std::fabs(got - expect) <= 2e-6f * std::max(1.f, std::fabs(want.y[i]))
                      : got == expect;
              wrong += !ok;
            }
            EXPECT_EQ(wrong, 0) << "threads " << threads << " n " << n << " k " << k << " m " << m
                                << " epilogue " << static_cast<int>(ep);
          }
        }
      }
    }
  }
}

// FeedForward is Linear(x -> hidden, activation) then Linear(hidden -> y,
// residual) for every weight type. On AVX512-BF16 the bf16 pair is fused
// (the hidden rows stored in bf16) beyond the few-row kernels' rows, and
// must still give the two calls' result bit for bit; rows 1100 (1024 + 64 + 12 in fp32 and bf16, 2
// x 512
// + 76 in int8 on the int8 kernels) cross chunks, widths 40 and 100
// end in partial 16-lane blocks, and y aliases x as in a post-norm layer.
// ENCODERD_CPU_DISABLE=avx512_bf16,avx512_vnni runs the same over the
// fallbacks.
TEST(LinearTest, FeedForwardIsTwoLinearsBitForBit) {
  CpuContext ctx;
  const int64_t f = 100;
  const bool fused_bf16 = GetCpuFeatures().avx512_bf16;
  // h 39: a bf16 ffn.in of odd width stays on oneDNN at a few rows while
  // ffn.out (k = 100) takes the few-row kernel.
  for (const int64_t h : {40, 39}) {
    for (const DType type : {DType::kFloat32, DType::kBFloat16, DType::kInt8}) {
      for (const Epilogue act : {Epilogue::kGelu, Epilogue::kRelu, Epilogue::kNone}) {
        for (const int64_t m : {1, 21, 1100}) {
          const auto w_in = RandomVector(f * h, 11, -0.2f, 0.2f), b_in = RandomVector(f, 12);
          const auto w_out = RandomVector(h * f, 13, -0.1f, 0.1f), b_out = RandomVector(h, 14);
          const auto in = PackedWeight::Pack(ctx, w_in.data(), b_in.data(), f, h, type);
          const auto out = PackedWeight::Pack(ctx, w_out.data(), b_out.data(), h, f, type);
          const auto x = RandomVector(m * h, 15, -2.f, 2.f);

          std::vector<float> hidden(m * f, NAN), want = x;
          Linear(ctx, DType::kFloat32, x.data(), m, *in, act, nullptr, hidden.data());
          Linear(ctx, DType::kFloat32, hidden.data(), m, *out, Epilogue::kResidual, want.data(),
                 want.data());

          std::vector<float> y = x, scratch(m * f, NAN);
          FeedForward(ctx, DType::kFloat32, y.data(), m, *in, act, *out, scratch.data(), y.data());
          const std::string what = std::string(DTypeName(type)) + " h " + std::to_string(h) +
                                   " act " + std::to_string(static_cast<int>(act)) +
                                   " m=" + std::to_string(m);
          ASSERT_EQ(y.size(), want.size());
          EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0) << what;
          // The fused bf16 path stores the hidden activations as bf16 (a
          // float's worth holds two, so the second half stays untouched); the
          // others as fp32.
          const auto untouched = [&](size_t from) {
            return std::all_of(scratch.begin() + from, scratch.end(),
                               [](float v) { return std::isnan(v); });
          };
          const bool few_rows =
              m <= kFewRowsMax && (static_cast<const CpuPackedWeight&>(in->impl()).few_rows ||
                                   static_cast<const CpuPackedWeight&>(out->impl()).few_rows);
          if (type == DType::kBFloat16 && fused_bf16 && !few_rows) {
            EXPECT_FALSE(untouched(0)) << what;
            EXPECT_TRUE(untouched(scratch.size() / 2)) << what;
          } else {
            EXPECT_FALSE(std::isnan(scratch.back())) << what;
          }
          // Not aliased: y starts as a separate residual.
          std::vector<float> y2 = x;
          FeedForward(ctx, DType::kFloat32, x.data(), m, *in, act, *out, scratch.data(), y2.data());
          EXPECT_EQ(std::memcmp(y2.data(), want.data(), y2.size() * sizeof(float)), 0) << what;
          // Replacing y: the two Linears without the residual, every dtype
          // and path (fp32 and int8 kernels, the few-row ones, fused bf16).
          std::vector<float> alone(m * h, NAN), alone_want(m * h);
          Linear(ctx, DType::kFloat32, hidden.data(), m, *out, Epilogue::kNone, nullptr,
                 alone_want.data());
          FeedForward(ctx, DType::kFloat32, x.data(), m, *in, act, *out, DType::kFloat32,
                      scratch.data(), alone.data(), /*add_to_y=*/false);
          EXPECT_EQ(std::memcmp(alone.data(), alone_want.data(), alone.size() * sizeof(float)), 0)
              << what << " replacing y";
        }
      }
    }
  }
}

std::vector<uint16_t> Bf16Bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  ConvertFloatToBFloat16(v.data(), out.data(), static_cast<int64_t>(v.size()));
  return out;
}

// bf16 weights take a bf16 x as the float32 call takes the fp32 values it
// rounds (which it rounds to bf16 itself), and a bf16 y holds the float32
// call's output rounded, bit for bit: on oneDNN's bf16 GEMMs, the few-row
// kernels (m = 3), and without AVX512-BF16 (ctest runs this binary with
// ENCODERD_CPU_DISABLE too). FeedForward takes a bf16 x the same way.
TEST(LinearTest, Bf16InputsAndOutputsHoldTheFloat32CallsBits) {
  CpuContext ctx;
  const int64_t k = 64, n = 96, f = 128;
  const auto w = RandomVector(n * k, 61, -0.2f, 0.2f), b = RandomVector(n, 62);
  const auto w_in = RandomVector(f * k, 63, -0.2f, 0.2f), b_in = RandomVector(f, 64);
  const auto w_out = RandomVector(k * f, 65, -0.1f, 0.1f), b_out = RandomVector(k, 66);
  const auto weight = PackedWeight::Pack(ctx, w.data(), b.data(), n, k, DType::kBFloat16);
  const auto in = PackedWeight::Pack(ctx, w_in.data(), b_in.data(), f, k, DType::kBFloat16);
  const auto out = PackedWeight::Pack(ctx, w_out.data(), b_out.data(), k, f, DType::kBFloat16);
  for (const int64_t m : {3, 40, 700}) {
    const auto x = RandomVector(m * k, 67, -2.f, 2.f);
    const auto x16 = Bf16Bits(x);
    const std::string what = "m=" + std::to_string(m);
    for (const Epilogue ep : {Epilogue::kNone, Epilogue::kGelu}) {
      std::vector<float> want(m * n);
      Linear(ctx, DType::kFloat32, x.data(), m, *weight, ep, nullptr, want.data());
      const auto want16 = Bf16Bits(want);
      std::vector<float> y(m * n, NAN);
      Linear(ctx, DType::kBFloat16, x16.data(), m, *weight, ep, nullptr, DType::kFloat32, y.data());
      EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0) << what;
      for (const bool x_bf16 : {false, true}) {
        std::vector<uint16_t> y16(m * n, 0xffff);
        Linear(ctx, x_bf16 ? DType::kBFloat16 : DType::kFloat32,
               x_bf16 ? static_cast<const void*>(x16.data()) : x.data(), m, *weight, ep, nullptr,
               DType::kBFloat16, y16.data());
        EXPECT_EQ(y16, want16) << what << " x bf16 " << x_bf16;
      }
    }
    // The residual epilogue into fp32.
    const auto residual = RandomVector(m * n, 68);
    std::vector<float> want = residual, y = residual;
    Linear(ctx, DType::kFloat32, x.data(), m, *weight, Epilogue::kResidual, want.data(),
           want.data());
    Linear(ctx, DType::kBFloat16, x16.data(), m, *weight, Epilogue::kResidual, y.data(),
           DType::kFloat32, y.data());
    EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0) << what;
    // FeedForward: fused on AVX512-BF16 beyond the few rows, else two Linears.
    const auto start = RandomVector(m * k, 69);
    std::vector<float> ffn_want = start, ffn = start, hidden(m * f);
    FeedForward(ctx, DType::kFloat32, x.data(), m, *in, Epilogue::kGelu, *out, hidden.data(),
                ffn_want.data());
    FeedForward(ctx, DType::kBFloat16, x16.data(), m, *in, Epilogue::kGelu, *out, DType::kFloat32,
                hidden.data(), ffn.data());
    EXPECT_EQ(std::memcmp(ffn.data(), ffn_want.data(), ffn.size() * sizeof(float)), 0) << what;
    // Not added to y (a post-norm layer's norm adds the residual): y's
    // former contents unread, the sums those of an addition to zeros.
    for (const DType x_dtype : {DType::kFloat32, DType::kBFloat16}) {
      const void* xs =
          x_dtype == DType::kBFloat16 ? static_cast<const void*>(x16.data()) : x.data();
      std::vector<float> added(m * k, 0.f), replaced(m * k, NAN);
      FeedForward(ctx, x_dtype, xs, m, *in, Epilogue::kGelu, *out, DType::kFloat32, hidden.data(),
                  added.data());
      FeedForward(ctx, x_dtype, xs, m, *in, Epilogue::kGelu, *out, DType::kFloat32, hidden.data(),
                  replaced.data(), /*add_to_y=*/false);
      EXPECT_EQ(std::memcmp(replaced.data(), added.data(), added.size() * sizeof(float)), 0)
          << what << " " << DTypeName(x_dtype);
    }
  }
}

TEST(LinearTest, Bf16ValuesOnlyWithBf16Weights) {
  CpuContext ctx;
  const auto w = RandomVector(8 * 4, 8);
  const auto f32 = PackedWeight::Pack(ctx, w.data(), nullptr, 8, 4, DType::kFloat32);
  const auto i8 = PackedWeight::Pack(ctx, w.data(), nullptr, 8, 4, DType::kInt8);
  const auto bf16 = PackedWeight::Pack(ctx, w.data(), nullptr, 8, 4, DType::kBFloat16);
  std::vector<uint16_t> x(4), y16(8);
  std::vector<float> y(8);
  for (const PackedWeight* weight : {f32.get(), i8.get()}) {
    EXPECT_THROW(Linear(ctx, DType::kBFloat16, x.data(), 1, *weight, Epilogue::kNone, nullptr,
                        DType::kFloat32, y.data()),
                 std::invalid_argument);
    EXPECT_THROW(Linear(ctx, DType::kFloat32, y.data(), 1, *weight, Epilogue::kNone, nullptr,
                        DType::kBFloat16, y16.data()),
                 std::invalid_argument);
  }
  // A bf16 output takes no fp32 residual.
  EXPECT_THROW(Linear(ctx, DType::kBFloat16, x.data(), 1, *bf16, Epilogue::kResidual, y.data(),
                      DType::kBFloat16, y16.data()),
               std::invalid_argument);
  EXPECT_THROW(Linear(ctx, DType::kFloat16, x.data(), 1, *bf16, Epilogue::kNone, nullptr,
                      DType::kFloat32, y.data()),
               std::invalid_argument);
  Linear(ctx, DType::kBFloat16, x.data(), 1, *bf16, Epilogue::kNone, nullptr, DType::kBFloat16,
         y16.data());
}

TEST(LinearTest, FeedForwardRejectsBadArguments) {
  CpuContext ctx;
  const auto w = RandomVector(8 * 4, 8);
  const auto in = PackedWeight::Pack(ctx, w.data(), nullptr, 8, 4, DType::kFloat32);
  const auto out = PackedWeight::Pack(ctx, w.data(), nullptr, 4, 8, DType::kFloat32);
  std::vector<float> x(4), hidden(8), y(4);
  // Shapes that do not chain: 8 hidden features into a weight that takes 4.
  EXPECT_THROW(FeedForward(ctx, DType::kFloat32, x.data(), 1, *in, Epilogue::kGelu, *in,
                           hidden.data(), y.data()),
               std::invalid_argument);
  EXPECT_THROW(FeedForward(ctx, DType::kFloat32, x.data(), 1, *in, Epilogue::kResidual, *out,
                           hidden.data(), y.data()),
               std::invalid_argument);
  EXPECT_THROW(
      FeedForward(ctx, DType::kFloat32, x.data(), 1, *in, Epilogue::kGelu, *out, nullptr, y.data()),
      std::invalid_argument);
  // Replacing y, it cannot be x (the contract: no caller needs it); adding
  // to it, it can.
  std::vector<float> xy(4);
  EXPECT_THROW(FeedForward(ctx, DType::kFloat32, xy.data(), 1, *in, Epilogue::kGelu, *out,
                           DType::kFloat32, hidden.data(), xy.data(), /*add_to_y=*/false),
               std::invalid_argument);
  FeedForward(ctx, DType::kFloat32, xy.data(), 1, *in, Epilogue::kGelu, *out, DType::kFloat32,
              hidden.data(), xy.data(), /*add_to_y=*/true);
  EXPECT_THROW(FeedForward(ctx, DType::kFloat32, x.data(), 1, *in, Epilogue::kGelu, *out, y.data(),
                           y.data()),
               std::invalid_argument);
  EXPECT_THROW(FeedForward(ctx, DType::kFloat32, x.data(), 1, *in, Epilogue::kGelu, *out, x.data(),
                           y.data()),
               std::invalid_argument);
  EXPECT_THROW(FeedForward(ctx, DType::kFloat32, nullptr, 1, *in, Epilogue::kGelu, *out,
                           hidden.data(), y.data()),
               std::invalid_argument);
  EXPECT_THROW(FeedForward(ctx, DType::kFloat32, x.data(), -1, *in, Epilogue::kGelu, *out,
                           hidden.data(), y.data()),
               std::invalid_argument);
  // In place only when the input and output widths are equal: 4 in, 8 out.
  const auto wide = PackedWeight::Pack(ctx, w.data(), nullptr, 8, 4, DType::kFloat32);
  const auto w64 = RandomVector(8 * 8, 9);
  const auto out8 = PackedWeight::Pack(ctx, w64.data(), nullptr, 8, 8, DType::kFloat32);
  std::vector<float> inout(8);
  EXPECT_THROW(FeedForward(ctx, DType::kFloat32, inout.data(), 1, *wide, Epilogue::kGelu, *out8,
                           hidden.data(), inout.data()),
               std::invalid_argument);
  FeedForward(ctx, DType::kFloat32, nullptr, 0, *in, Epilogue::kGelu, *out, nullptr,
              nullptr);  // no-op
  FeedForward(ctx, DType::kFloat32, x.data(), 1, *in, Epilogue::kGelu, *out, hidden.data(),
              y.data());
}

// An int8 ffn.in with an fp32 ffn.out (int8_fp32_linears) runs as two
// Linears.
TEST(LinearTest, FeedForwardMixedInt8AndFp32IsTwoLinears) {
  CpuContext ctx;
  const int64_t h = 40, f = 100, m = 600;
  const auto w_in = RandomVector(f * h, 21, -0.2f, 0.2f),
             w_out = RandomVector(h * f, 22, -0.1f, 0.1f);
  const auto in = PackedWeight::Pack(ctx, w_in.data(), nullptr, f, h, DType::kInt8);
  const auto out = PackedWeight::Pack(ctx, w_out.data(), nullptr, h, f, DType::kFloat32);
  const auto x = RandomVector(m * h, 23);
  std::vector<float> hidden(m * f), want = x;
  Linear(ctx, DType::kFloat32, x.data(), m, *in, Epilogue::kGelu, nullptr, hidden.data());
  Linear(ctx, DType::kFloat32, hidden.data(), m, *out, Epilogue::kResidual, want.data(),
         want.data());
  std::vector<float> y = x, scratch(m * f, NAN);
  FeedForward(ctx, DType::kFloat32, y.data(), m, *in, Epilogue::kGelu, *out, scratch.data(),
              y.data());
  EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0);
  EXPECT_FALSE(std::isnan(scratch[0]));
}

TEST(LinearTest, RejectsBadArguments) {
  CpuContext ctx;
  const auto w = RandomVector(8 * 4, 8);
  EXPECT_THROW(PackedWeight::Pack(ctx, nullptr, nullptr, 8, 4, DType::kFloat32),
               std::invalid_argument);
  EXPECT_THROW(PackedWeight::Pack(ctx, w.data(), nullptr, 0, 4, DType::kFloat32),
               std::invalid_argument);
  EXPECT_THROW(PackedWeight::Pack(ctx, w.data(), nullptr, 8, -1, DType::kFloat32),
               std::invalid_argument);
  // The stored weight type is float32, bfloat16 or int8; anything else is refused.
  EXPECT_THROW(PackedWeight::Pack(ctx, w.data(), nullptr, 8, 4, DType::kFloat16),
               std::invalid_argument);
  const auto packed = PackedWeight::Pack(ctx, w.data(), nullptr, 8, 4, DType::kFloat32);
  std::vector<float> x(4), y(8);
  EXPECT_THROW(
      Linear(ctx, DType::kFloat32, x.data(), -1, *packed, Epilogue::kNone, nullptr, y.data()),
      std::invalid_argument);
  EXPECT_THROW(
      Linear(ctx, DType::kFloat32, x.data(), 1, *packed, Epilogue::kResidual, nullptr, y.data()),
      std::invalid_argument);
  EXPECT_THROW(
      Linear(ctx, DType::kFloat32, nullptr, 1, *packed, Epilogue::kNone, nullptr, y.data()),
      std::invalid_argument);
  EXPECT_THROW(
      Linear(ctx, DType::kFloat32, y.data(), 1, *packed, Epilogue::kNone, nullptr, y.data()),
      std::invalid_argument);
  Linear(ctx, DType::kFloat32, nullptr, 0, *packed, Epilogue::kNone, nullptr, nullptr);  // no-op
  // CPU activations are float32 whatever the weights: bf16 ones are refused,
  // by the one entry point every device shares.
  EXPECT_EQ(packed->device(), Device::kCpu);
  EXPECT_THROW(
      Linear(ctx, DType::kBFloat16, x.data(), 1, *packed, Epilogue::kNone, nullptr, y.data()),
      std::invalid_argument);
}

// A forward of a few rows runs as a team (CpuContext::RunAsTeam): the
// Linear layers that allow it give the same bits there, the others the
// same values on one thread.
TEST(LinearTeamTest, AFewRowsInATeamAreTheSameBits) {
  CpuContext ctx(2);
  const int64_t n = 768, k = 768, rows = 10;
  const auto w = RandomVector(n * k, 11, -0.05f, 0.05f), b = RandomVector(n, 12);
  const auto x = RandomVector(rows * k, 13);
  for (const DType type : {DType::kFloat32, DType::kBFloat16, DType::kInt8}) {
    SCOPED_TRACE(DTypeName(type));
    const auto packed = PackedWeight::Pack(ctx, w.data(), b.data(), n, k, type);
    std::vector<float> alone(rows * n), in_team(rows * n, -1.f);
    Linear(ctx, DType::kFloat32, x.data(), rows, *packed, Epilogue::kGelu, nullptr, alone.data());
    ctx.RunAsTeam([&] {
      Linear(ctx, DType::kFloat32, x.data(), rows, *packed, Epilogue::kGelu, nullptr,
             in_team.data());
    });
    if (LinearRunsOnTeam(*packed, rows)) {
      EXPECT_EQ(alone, in_team);
    } else {
      for (size_t i = 0; i < alone.size(); ++i) ASSERT_NEAR(alone[i], in_team[i], 1e-4) << i;
    }
    // On AVX-512 the few-row kernels take these weights (and int8's take
    // any rows); oneDNN takes more than 36 rows of fp32 and bf16 weights,
    // but for bf16 ones widened in registers (no bf16 dot products), which
    // the few-row kernels take in blocks up to kFewRowsBf16AsF32MaxRows
    // rows (AVX-512) or kFewRowsBf16AsF32Avx2MaxRows (AVX2).
    const auto& impl = static_cast<const CpuPackedWeight&>(packed->impl());
    const bool blocks = impl.few_rows && impl.few_rows_bf16 && !impl.bf16_compute;
    const int64_t most =
        GetCpuFeatures().avx512f ? kFewRowsBf16AsF32MaxRows : kFewRowsBf16AsF32Avx2MaxRows;
    if (GetCpuFeatures().avx512f) {
      EXPECT_TRUE(LinearRunsOnTeam(*packed, rows));
    }
    if (type != DType::kInt8) {
      EXPECT_EQ(LinearRunsOnTeam(*packed, kFewRowsMax + 1), blocks);
      EXPECT_EQ(LinearRunsOnTeam(*packed, most), blocks);
      EXPECT_FALSE(LinearRunsOnTeam(*packed, most + 1));
    }
  }
}

}  // namespace
}  // namespace encoderd::kernels
