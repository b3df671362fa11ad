#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu_context.h"
#include "kernels/cpu_features.h"
#include "tests/kernels/kernel_test_util.h"

namespace encoderd::kernels {
namespace {

using testing::CuSeqlens;
using testing::RandomVector;
using testing::ScaledMaxError;

// x rounded to the nearest bfloat16 (ties to even), as a float.
float RoundToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

// With bf16_matmuls, the matmuls' inputs are rounded as the kernel's are:
// q * scale, k, v and the unnormalised probabilities (their sum is not).
// bias: a relative position bias (kernels/attention.h) or nullptr;
// disentangled: DeBERTa's terms or nullptr, over q and k as they are.
std::vector<double> Reference(const std::vector<float>& qkv, const std::vector<int32_t>& cu,
                              int64_t heads, int64_t d, double scale, bool bf16_matmuls = false,
                              const RelativeBias* bias = nullptr,
                              const DisentangledBias* disentangled = nullptr,
                              const KeyBias* key_bias = nullptr) {
  const auto in = [&](float x) { return bf16_matmuls ? RoundToBf16(x) : x; };
  const int64_t hidden = heads * d, ld = 3 * hidden, total = cu.back();
  std::vector<double> out(total * hidden);
  for (size_t b = 0; b + 1 < cu.size(); ++b) {
    const int64_t begin = cu[b], len = cu[b + 1] - cu[b];
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < len; ++i) {
        std::vector<double> p(len);
        double max = -1e300, sum = 0;
        for (int64_t j = 0; j < len; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) {
            const float q = qkv[(begin + i) * ld + h * d + c];
            dot += static_cast<double>(bf16_matmuls ? in(q * static_cast<float>(scale)) : q) *
                   in(qkv[(begin + j) * ld + hidden + h * d + c]);
          }
          p[j] = bf16_matmuls ? dot : dot * scale;
          if (bias) p[j] += bias->values[h * bias->width() + bias->center + j - i];
          if (key_bias) p[j] += key_bias->values[begin + j];
          if (disentangled) {
            const DisentangledBias& t = *disentangled;
            const int64_t col = t.index[t.center + i - j];
            for (int64_t c = 0; c < d; ++c) {
              const int64_t at = (h * d + c) * t.columns + col;
              p[j] += static_cast<double>(qkv[(begin + i) * ld + h * d + c]) * t.key[at] +
                      static_cast<double>(qkv[(begin + j) * ld + hidden + h * d + c]) * t.query[at];
            }
          }
          max = std::max(max, p[j]);
        }
        for (double& x : p) sum += (x = std::exp(x - max));
        for (int64_t c = 0; c < d; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < len; ++j)
            acc +=
                in(static_cast<float>(p[j])) * in(qkv[(begin + j) * ld + 2 * hidden + h * d + c]);
          out[(begin + i) * hidden + h * d + c] = acc / sum;
        }
      }
    }
  }
  return out;
}

struct Case {
  std::vector<int32_t> lengths;
  int64_t heads, head_dim;
};

// Runs Attention on random q, k, v (spread +-2: peaked softmaxes, where exp
// accuracy matters) and checks it against the double reference: within
// 1e-4 of the exact one, or with `rounds`, within 2e-3 of the one over
// bf16-rounded inputs and more than 1e-4 from the exact one (so the rounding
// path ran).
// threads: the context's (0: every processor).
void CheckAttention(const Case& c, DType matmul_dtype, bool rounds,
                    const RelativeBias* bias = nullptr, int threads = 0,
                    const DisentangledBias* disentangled = nullptr,
                    const KeyBias* key_bias = nullptr) {
  CpuContext ctx(threads);
  const auto cu = CuSeqlens(c.lengths);
  const int64_t total = cu.back(), hidden = c.heads * c.head_dim;
  const auto qkv = RandomVector(total * 3 * hidden, 11, -2.f, 2.f);
  const float scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> out(total * hidden, NAN);
  const int32_t longest = *std::max_element(c.lengths.begin(), c.lengths.end());
  Attention(ctx, DType::kFloat32, matmul_dtype, qkv.data(), cu.data(),
            static_cast<int64_t>(c.lengths.size()), total, longest, c.heads, c.head_dim, scale,
            out.data(), bias, disentangled, key_bias);
  const double exact = ScaledMaxError(
      out, Reference(qkv, cu, c.heads, c.head_dim, scale, false, bias, disentangled, key_bias));
  if (!rounds) {
    EXPECT_LT(exact, 1e-4);
    return;
  }
  EXPECT_LT(ScaledMaxError(out, Reference(qkv, cu, c.heads, c.head_dim, scale, true, bias,
                                          disentangled, key_bias)),
            2e-3);
  EXPECT_GT(exact, 1e-4);
  EXPECT_LT(exact, 3e-2);
}

class AttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionTest, MatchesDoubleReference) {
  CheckAttention(GetParam(), DType::kFloat32, false);
}

INSTANTIATE_TEST_SUITE_P(
    Ragged, AttentionTest,
    ::testing::Values(Case{{1, 2, 7, 33, 16, 17}, 2, 64},  // AVX-512 path, 6 x 64 blocks + tails
                      Case{{512, 1, 3, 64}, 2, 64},        // one long sequence among short ones
                      Case{{5, 130, 1}, 3, 48},            // 3 x 16 value columns
                      Case{{9, 1, 20}, 2, 80},             // 64 + 16 value columns
                      Case{{1, 2, 7, 33}, 3, 24},          // generic path (head_dim % 16 != 0)
                      Case{{4, 6}, 12, 64}));              // tiny batch, BERT-base heads

bool HasBf16Attention() {
  const CpuFeatures& f = GetCpuFeatures();
  return f.avx512f && f.avx512bw && f.avx512_bf16;
}

// bfloat16 matmuls round their inputs where the CPU has AVX512-BF16 (ctest
// also runs this binary with ENCODERD_CPU_DISABLE=avx512_bf16,...), and run
// in fp32 where it does not or where head_dim % 32 != 0.
TEST(AttentionTest, Bf16MatmulsRoundTheirInputsWhereTheCpuHasBf16) {
  const bool bf16 = HasBf16Attention();
  CheckAttention({{1, 2, 7, 33, 16, 17, 130}, 2, 64}, DType::kBFloat16, bf16);  // odd lengths
  CheckAttention({{5, 64, 3}, 3, 32}, DType::kBFloat16, bf16);  // one 32-wide value block
  CheckAttention({{9, 20}, 2, 96}, DType::kBFloat16, bf16);     // 64 + 32 value columns
  CheckAttention({{9, 20}, 2, 48}, DType::kBFloat16, false);    // head_dim % 32 != 0: fp32
}

// A sequence's attention does not depend on what it is batched with, bit
// for bit: int8 encoders quantize what follows per row, and a last-bit
// difference there can move a whole quantization step
// (EncoderParityTest.SequenceAloneEqualsSequenceInBatch).
TEST(AttentionTest, SequenceAloneEqualsSequenceInBatchBitForBit) {
  for (const int threads : {1, 2}) {
    CpuContext ctx(threads);
    const std::vector<int32_t> lengths = {7, 300, 1, 33, 130, 16};
    for (const int64_t d : {16, 64}) {
      const int64_t heads = 4, hidden = heads * d;
      const auto cu = CuSeqlens(lengths);
      const int64_t total = cu.back();
      const auto qkv = RandomVector(total * 3 * hidden, 21, -2.f, 2.f);
      for (const DType matmul : {DType::kFloat32, DType::kBFloat16}) {
        std::vector<float> together(total * hidden);
        Attention(ctx, DType::kFloat32, matmul, qkv.data(), cu.data(),
                  static_cast<int64_t>(lengths.size()), total, 300, heads, d, 0.125f,
                  together.data());
        for (size_t i = 0; i < lengths.size(); ++i) {
          const int32_t len = lengths[i];
          const std::vector<int32_t> one = {0, len};
          std::vector<float> alone(len * hidden);
          Attention(ctx, DType::kFloat32, matmul, qkv.data() + cu[i] * 3 * hidden, one.data(), 1,
                    len, len, heads, d, 0.125f, alone.data());
          EXPECT_EQ(std::memcmp(alone.data(), together.data() + cu[i] * hidden,
                                alone.size() * sizeof(float)),
                    0)
              << "threads " << threads << " head_dim " << d << " sequence " << i << " matmul dtype "
              << static_cast<int>(matmul);
        }
      }
    }
  }
}

// With more threads, a long sequence's query rows are split into blocks
// (kernels/cpu/attention_cpu.cc: a 512-token sequence of 2 heads on 8
// threads into blocks of 64 rows), each packing the head's K and V again;
// the bits are those of the whole sequence on one thread.
TEST(AttentionTest, SplittingASequenceBetweenThreadsChangesNoBit) {
  const std::vector<int32_t> lengths = {512, 3};
  const int64_t heads = 2, d = 64, hidden = heads * d;
  const auto cu = CuSeqlens(lengths);
  const int64_t total = cu.back();
  const auto qkv = RandomVector(total * 3 * hidden, 31, -2.f, 2.f);
  for (const DType matmul : {DType::kFloat32, DType::kBFloat16}) {
    std::vector<float> whole(total * hidden), split(total * hidden);
    Attention(CpuContext(1), DType::kFloat32, matmul, qkv.data(), cu.data(), 2, total, 512, heads,
              d, 0.125f, whole.data());
    Attention(CpuContext(8), DType::kFloat32, matmul, qkv.data(), cu.data(), 2, total, 512, heads,
              d, 0.125f, split.data());
    EXPECT_EQ(std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)), 0)
        << "matmul dtype " << static_cast<int>(matmul);
  }
}

// The AVX-512 kernels stream an output row past the caches when it starts
// a cache line, and store it plainly otherwise: both give the same bits,
// with several items per thread (each fetching the next one's rows).
TEST(AttentionTest, OutputsOnCacheLinesAndOffThemHoldTheSameBits) {
  const std::vector<int32_t> lengths = {40, 1, 130, 17, 64, 9};
  const int64_t heads = 3, d = 64, hidden = heads * d;
  const auto cu = CuSeqlens(lengths);
  const int64_t total = cu.back(), floats = total * hidden;
  const auto qkv = RandomVector(total * 3 * hidden, 41, -2.f, 2.f);
  // 64-byte aligned; the second copy starts one float later.
  std::unique_ptr<float[], decltype(&std::free)> lines(
      static_cast<float*>(std::aligned_alloc(64, (floats + 16) * sizeof(float))), &std::free);
  std::vector<float> off_lines(floats + 1);
  for (const int threads : {1, 2}) {
    for (const DType matmul : {DType::kFloat32, DType::kBFloat16}) {
      std::fill(lines.get(), lines.get() + floats, NAN);
      std::fill(off_lines.begin(), off_lines.end(), NAN);
      Attention(CpuContext(threads), DType::kFloat32, matmul, qkv.data(), cu.data(),
                static_cast<int64_t>(lengths.size()), total, 130, heads, d, 0.125f, lines.get());
      Attention(CpuContext(threads), DType::kFloat32, matmul, qkv.data(), cu.data(),
                static_cast<int64_t>(lengths.size()), total, 130, heads, d, 0.125f,
                off_lines.data() + 1);
      EXPECT_EQ(std::memcmp(lines.get(), off_lines.data() + 1, floats * sizeof(float)), 0)
          << "threads " << threads << " matmul dtype " << static_cast<int>(matmul);
      EXPECT_FALSE(std::isnan(lines[floats - 1]));
    }
  }
}

// bf16 x as the kernels round it (nearest even), as its bits.
uint16_t Bf16Bits(float x) {
  const float r = RoundToBf16(x);
  uint32_t bits;
  std::memcpy(&bits, &r, sizeof(bits));
  return static_cast<uint16_t>(bits >> 16);
}

// A bias of either kind on three sequences of 3, 130 and 20 tokens, 2 heads
// of 64: random q, k, v (spread +-2) rounded to bf16, the float32 call with
// bf16 matmuls on them, and where the bf16 kernel runs, the bfloat16 call on
// their bits, which must hold the float32 call's bits rounded.
struct Bf16BiasCase {
  static constexpr int64_t kHeads = 2, kDim = 64;
  const std::vector<int32_t> cu = CuSeqlens({3, 130, 20});
  const int64_t total = cu.back();
  std::vector<float> qkv;
  std::vector<float> out32;
  Bf16BiasCase(uint32_t seed, const RelativeBias* bias, const DisentangledBias* disentangled,
               const KeyBias* key_bias = nullptr)
      : qkv(RandomVector(total * 3 * kHeads * kDim, seed, -2.f, 2.f)),
        out32(total * kHeads * kDim) {
    for (float& x : qkv) x = RoundToBf16(x);
    CpuContext ctx;
    Attention(ctx, DType::kFloat32, DType::kBFloat16, qkv.data(), cu.data(), 3, total, 130, kHeads,
              kDim, 0.125f, out32.data(), bias, disentangled, key_bias);
    if (!AttentionTakesBf16Values(ctx, kDim)) return;
    std::vector<uint16_t> qkv16, out16(out32.size());
    for (float x : qkv) qkv16.push_back(Bf16Bits(x));
    Attention(ctx, DType::kBFloat16, DType::kBFloat16, qkv16.data(), cu.data(), 3, total, 130,
              kHeads, kDim, 0.125f, out16.data(), bias, disentangled, key_bias);
    int64_t differ = 0;
    for (size_t i = 0; i < out16.size(); ++i) differ += out16[i] != Bf16Bits(out32[i]);
    EXPECT_EQ(differ, 0);
  }
  // The float32 call with fp32 matmuls and these biases.
  std::vector<float> Float32(const RelativeBias* bias, const DisentangledBias* disentangled) const {
    std::vector<float> out(out32.size());
    Attention(CpuContext(), DType::kFloat32, DType::kFloat32, qkv.data(), cu.data(), 3, total, 130,
              kHeads, kDim, 0.125f, out.data(), bias, disentangled);
    return out;
  }
};

float Bf16Value(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

// Masked keys (fairseq's key padding mask, kernels::KeyBias): every query
// row of a sequence, masked ones too, attends to its unmasked keys only, on
// every kernel (fp32 AVX-512 here; ctest runs this binary with AVX-512 and
// AVX2 turned off too; head_dim 24 the generic path), fp32 and bf16
// matmuls, one thread and two; and the unmasked rows of a sequence whose
// last keys are masked are those of the sequence without them, within
// fp32 sums (the masked keys' exp stops at -87.3, not at 0).
TEST(AttentionTest, MaskedKeysAreLeftOut) {
  for (const Case& c : {Case{{1, 2, 7, 33, 16, 17, 130}, 2, 64}, Case{{9, 1, 20}, 2, 80},
                        Case{{1, 2, 7, 33}, 3, 24}, Case{{4, 6}, 12, 64}}) {
    const int64_t total = CuSeqlens(c.lengths).back();
    std::vector<float> values(total, 0.f);
    int64_t begin = 0;
    for (const int32_t len : c.lengths) {
      // Keys 1, 4, 7, ... of every sequence of 2 or more, and its last two
      // of 5 or more.
      for (int64_t j = 1; j < len; j += 3) values[begin + j] = -INFINITY;
      if (len >= 5) values[begin + len - 1] = values[begin + len - 2] = -INFINITY;
      begin += len;
    }
    const KeyBias mask{values.data()};
    for (const int threads : {1, 2}) {
      CheckAttention(c, DType::kFloat32, false, nullptr, threads, nullptr, &mask);
      CheckAttention(c, DType::kBFloat16, HasBf16Attention() && c.head_dim % 32 == 0, nullptr,
                     threads, nullptr, &mask);
    }
  }
  // A sequence of 40 tokens whose last 8 keys are masked: its first 32 rows
  // are those of the first 32 tokens alone.
  const int64_t heads = 2, d = 64, hidden = heads * d;
  const auto qkv = RandomVector(40 * 3 * hidden, 51, -2.f, 2.f);
  std::vector<float> values(40, 0.f);
  std::fill(values.begin() + 32, values.end(), -INFINITY);
  const KeyBias mask{values.data()};
  const std::vector<int32_t> padded = {0, 40}, unpadded = {0, 32};
  std::vector<float> masked(40 * hidden), alone(32 * hidden);
  Attention(CpuContext(2), DType::kFloat32, DType::kFloat32, qkv.data(), padded.data(), 1, 40, 40,
            heads, d, 0.125f, masked.data(), nullptr, nullptr, &mask);
  Attention(CpuContext(2), DType::kFloat32, DType::kFloat32, qkv.data(), unpadded.data(), 1, 32, 32,
            heads, d, 0.125f, alone.data());
  masked.resize(alone.size());
  EXPECT_LT(ScaledMaxError(masked, std::vector<double>(alone.begin(), alone.end())), 1e-6);
  // bf16 values in and out (a bf16 model's qkv and context): where the bf16
  // kernel runs, the bits of the float32 call on them widened (Bf16BiasCase);
  // elsewhere the float32 path over them widened, within bf16's rounding.
  std::vector<float> keys(153, 0.f);  // Bf16BiasCase's 3 + 130 + 20 tokens
  for (const int64_t t : {1, 2, 4, 50, 51, 131, 132, 140, 152}) keys[t] = -INFINITY;
  const KeyBias key_mask{keys.data()};
  const Bf16BiasCase c(54, nullptr, nullptr, &key_mask);
  const auto want =
      Reference(c.qkv, c.cu, c.kHeads, c.kDim, 0.125, false, nullptr, nullptr, &key_mask);
  EXPECT_LT(ScaledMaxError(c.out32, want), 3e-2);
  std::vector<uint16_t> qkv16, out16(c.out32.size());
  for (const float x : c.qkv) qkv16.push_back(Bf16Bits(x));
  Attention(CpuContext(2), DType::kBFloat16, DType::kBFloat16, qkv16.data(), c.cu.data(), 3,
            c.total, 130, c.kHeads, c.kDim, 0.125f, out16.data(), nullptr, nullptr, &key_mask);
  std::vector<float> got(out16.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = Bf16Value(out16[i]);
  EXPECT_LT(ScaledMaxError(got, want), 3e-2);
  EXPECT_GT(ScaledMaxError(c.Float32(nullptr, nullptr), want), 0.1);  // unmasked: far off
  // Not beside a position bias.
  const std::vector<float> table(2 * 40 * 3, 0.f);
  const RelativeBias relative{table.data(), 39};
  EXPECT_THROW(Attention(CpuContext(1), DType::kFloat32, DType::kFloat32, qkv.data(), padded.data(),
                         1, 40, 40, heads, d, 0.125f, masked.data(), &relative, nullptr, &mask),
               std::invalid_argument);
}

// bfloat16 values (a bf16 model's qkv and context on the CPU): where the
// bf16 kernel runs (AttentionTakesBf16Values), the bits of the float32 call
// on the values widened, rounded to bf16, for any scale, and of the
// float32 call on the fp32 values they round when the scale is a power of
// two; with output rows on cache lines and off them. Elsewhere (no
// AVX512-BF16, or head_dim % 32 != 0) the float32 path over the widened
// values, within bf16's rounding of the reference.
TEST(AttentionTest, Bf16ValuesHoldTheFloat32CallsBitsRounded) {
  const std::vector<int32_t> lengths = {40, 1, 130, 17, 300, 64, 9};
  const auto cu = CuSeqlens(lengths);
  const int64_t total = cu.back(), batch = static_cast<int64_t>(lengths.size());
  for (const int64_t d : {32, 64, 96, 48}) {
    const int64_t heads = 3, hidden = heads * d, values = total * hidden;
    const auto qkv = RandomVector(total * 3 * hidden, 51, -2.f, 2.f);
    std::vector<uint16_t> qkv16(qkv.size());
    std::vector<float> rounded(qkv.size());
    for (size_t i = 0; i < qkv.size(); ++i) {
      qkv16[i] = Bf16Bits(qkv[i]);
      rounded[i] = Bf16Value(qkv16[i]);
    }
    const bool kernel = HasBf16Attention() && d % 32 == 0;
    EXPECT_EQ(AttentionTakesBf16Values(CpuContext(1), d), kernel);
    for (const float scale : {0.125f, 1.f / std::sqrt(static_cast<float>(d))}) {
      const bool power_of_two = scale == 0.125f;
      for (const int threads : {1, 2}) {
        CpuContext ctx(threads);
        const std::string what = "head_dim " + std::to_string(d) + " scale " +
                                 std::to_string(scale) + " threads " + std::to_string(threads);
        // 64-byte aligned, and one value off.
        std::unique_ptr<uint16_t[], decltype(&std::free)> lines(
            static_cast<uint16_t*>(std::aligned_alloc(64, (values * 2 + 63) / 64 * 64)),
            &std::free);
        std::vector<uint16_t> off_lines(values + 1);
        Attention(ctx, DType::kBFloat16, DType::kBFloat16, qkv16.data(), cu.data(), batch, total,
                  300, heads, d, scale, lines.get());
        Attention(ctx, DType::kBFloat16, DType::kBFloat16, qkv16.data(), cu.data(), batch, total,
                  300, heads, d, scale, off_lines.data() + 1);
        EXPECT_EQ(std::memcmp(lines.get(), off_lines.data() + 1, values * 2), 0) << what;
        if (!kernel) {
          std::vector<float> got(values);
          for (int64_t i = 0; i < values; ++i) got[i] = Bf16Value(lines[i]);
          const auto want = Reference(rounded, cu, heads, d, scale);
          EXPECT_LT(ScaledMaxError(got, want), 5e-3) << what;
          continue;
        }
        for (const bool from_rounded : {true, false}) {
          if (!from_rounded && !power_of_two) continue;
          std::vector<float> out32(values);
          Attention(ctx, DType::kFloat32, DType::kBFloat16,
                    from_rounded ? rounded.data() : qkv.data(), cu.data(), batch, total, 300, heads,
                    d, scale, out32.data());
          int64_t differ = 0;
          for (int64_t i = 0; i < values; ++i) differ += lines[i] != Bf16Bits(out32[i]);
          EXPECT_EQ(differ, 0) << what << (from_rounded ? " (rounded values)" : " (fp32 values)");
        }
      }
    }
  }
}

// A relative position bias (MPNet's) is added to the scores of every kernel:
// the AVX-512 fp32 and bf16 ones, AVX2 and the generic one (ctest runs this
// binary with ENCODERD_CPU_DISABLE for each), with bf16 values too. The
// bias spreads +-3, as much as the scores, so that a kernel leaving it out
// or taking it for the wrong distance is far off.
TEST(AttentionTest, AddsTheRelativePositionBiasInEveryKernel) {
  const int64_t center = 140;
  for (const int64_t heads : {2, 3}) {
    const auto values = RandomVector(heads * (2 * center + 1), 51, -3.f, 3.f);
    const RelativeBias bias{values.data(), center};
    // 4 threads: the 130-token sequence's rows split between items, each
    // adding the bias from its own first row.
    CheckAttention({{1, 2, 7, 33, 16, 17, 130}, heads, 64}, DType::kFloat32, false, &bias, 4);
    CheckAttention({{5, 130, 1}, heads, 48}, DType::kFloat32, false, &bias, 4);
    CheckAttention({{1, 2, 7, 33}, heads, 24}, DType::kFloat32, false, &bias);  // generic
    CheckAttention({{1, 2, 7, 33, 16, 17, 130}, heads, 64}, DType::kBFloat16, HasBf16Attention(),
                   &bias, 4);
  }
  // bf16 values in and out: the same bits as the float32 call on them widened.
  const auto values = RandomVector(Bf16BiasCase::kHeads * (2 * center + 1), 52, -3.f, 3.f);
  const RelativeBias bias{values.data(), center};
  const Bf16BiasCase c(53, &bias, nullptr);
  const auto want = Reference(c.qkv, c.cu, c.kHeads, c.kDim, 0.125, false, &bias);
  EXPECT_LT(ScaledMaxError(c.out32, want), 3e-2);
  // Without the bias the output is far from the biased reference.
  EXPECT_GT(ScaledMaxError(c.Float32(nullptr, nullptr), want), 0.1);
}

// DeBERTa-like disentangled tables for `heads` heads of head_dim d and
// sequences up to center + 1 tokens: the index steps by one column every 4
// positions (plateaus, as DeBERTa's log buckets have) around column 12 of
// 24, clamped at both ends; q_i . key and k_j . query spread about +-3.
struct DisentangledTables {
  std::vector<float> key, query;
  std::vector<int32_t> index;
  DisentangledBias bias;
  DisentangledTables(int64_t heads, int64_t d, int64_t center, uint64_t seed) {
    const int64_t columns = 24;
    key = RandomVector(heads * d * columns, seed, -0.5f, 0.5f);
    query = RandomVector(heads * d * columns, seed + 1, -0.5f, 0.5f);
    for (int64_t delta = -center; delta <= center; ++delta) {
      const int64_t col = static_cast<int64_t>(std::floor(delta / 4.0)) + 12;
      index.push_back(static_cast<int32_t>(std::clamp<int64_t>(col, 0, columns - 1)));
    }
    bias = {key.data(), query.data(), columns, index.data(), center};
  }
};

// DeBERTa's disentangled terms are added to the scores of every kernel, as
// the relative position bias above is (ctest runs this binary with
// ENCODERD_CPU_DISABLE for each), over rows split between items, and with
// bf16 values; leaving either term out is far off.
TEST(AttentionTest, AddsTheDisentangledTermsInEveryKernel) {
  const int64_t center = 140;
  for (const int64_t heads : {2, 3}) {
    const DisentangledTables t64(heads, 64, center, 61), t48(heads, 48, center, 63),
        t24(heads, 24, center, 65);
    CheckAttention({{1, 2, 7, 33, 16, 17, 130}, heads, 64}, DType::kFloat32, false, nullptr, 4,
                   &t64.bias);
    CheckAttention({{5, 130, 1}, heads, 48}, DType::kFloat32, false, nullptr, 4, &t48.bias);
    CheckAttention({{1, 2, 7, 33}, heads, 24}, DType::kFloat32, false, nullptr, 0, &t24.bias);
    CheckAttention({{1, 2, 7, 33, 16, 17, 130}, heads, 64}, DType::kBFloat16, HasBf16Attention(),
                   nullptr, 4, &t64.bias);
  }
  // bf16 values in and out: the same bits as the float32 call on them widened.
  const DisentangledTables t(Bf16BiasCase::kHeads, Bf16BiasCase::kDim, center, 67);
  const Bf16BiasCase c(68, nullptr, &t.bias);
  const auto want = Reference(c.qkv, c.cu, c.kHeads, c.kDim, 0.125, false, nullptr, &t.bias);
  EXPECT_LT(ScaledMaxError(c.out32, want), 3e-2);
  // Without the terms, or with either one alone, the output is far off.
  const std::vector<float> zeros(t.key.size(), 0.f);
  const DisentangledBias c2p_only{t.key.data(), zeros.data(), t.bias.columns, t.index.data(),
                                  center};
  const DisentangledBias p2c_only{zeros.data(), t.query.data(), t.bias.columns, t.index.data(),
                                  center};
  for (const DisentangledBias* partial :
       {static_cast<const DisentangledBias*>(nullptr), &c2p_only, &p2c_only}) {
    EXPECT_GT(ScaledMaxError(c.Float32(nullptr, partial), want), 0.1);
  }
}

TEST(AttentionTest, RefusesMalformedDisentangledTables) {
  CpuContext ctx;
  const auto cu = CuSeqlens({4, 6});
  const auto qkv = RandomVector(10 * 3 * 32, 12);
  std::vector<float> out(10 * 32);
  const DisentangledTables covers(2, 16, 5, 14);  // sequences up to 6 tokens
  EXPECT_NO_THROW(Attention(ctx, DType::kFloat32, DType::kFloat32, qkv.data(), cu.data(), 2, 10, 6,
                            2, 16, 0.25f, out.data(), nullptr, &covers.bias));
  const DisentangledTables short_tables(2, 16, 4, 14);
  EXPECT_THROW(Attention(ctx, DType::kFloat32, DType::kFloat32, qkv.data(), cu.data(), 2, 10, 6, 2,
                         16, 0.25f, out.data(), nullptr, &short_tables.bias),
               std::invalid_argument);
  DisentangledBias no_index = covers.bias;
  no_index.index = nullptr;
  EXPECT_THROW(Attention(ctx, DType::kFloat32, DType::kFloat32, qkv.data(), cu.data(), 2, 10, 6, 2,
                         16, 0.25f, out.data(), nullptr, &no_index),
               std::invalid_argument);
  const auto values = RandomVector(2 * 11, 13);
  const RelativeBias relative{values.data(), 5};
  EXPECT_THROW(Attention(ctx, DType::kFloat32, DType::kFloat32, qkv.data(), cu.data(), 2, 10, 6, 2,
                         16, 0.25f, out.data(), &relative, &covers.bias),
               std::invalid_argument);
}

TEST(AttentionTest, RefusesABiasShorterThanASequence) {
  CpuContext ctx;
  const auto cu = CuSeqlens({4, 6});
  const auto qkv = RandomVector(10 * 3 * 32, 12);
  std::vector<float> out(10 * 32);
  const auto values = RandomVector(2 * 11, 13);
  const RelativeBias covers{values.data(), 5};  // sequences up to 6 tokens
  EXPECT_NO_THROW(Attention(ctx, DType::kFloat32, DType::kFloat32, qkv.data(), cu.data(), 2, 10, 6,
                            2, 16, 0.25f, out.data(), &covers));
  const RelativeBias short_bias{values.data(), 4};
  EXPECT_THROW(Attention(ctx, DType::kFloat32, DType::kFloat32, qkv.data(), cu.data(), 2, 10, 6, 2,
                         16, 0.25f, out.data(), &short_bias),
               std::invalid_argument);
  const RelativeBias null_bias{nullptr, 5};
  EXPECT_THROW(Attention(ctx, DType::kFloat32, DType::kFloat32, qkv.data(), cu.data(), 2, 10, 6, 2,
                         16, 0.25f, out.data(), &null_bias),
               std::invalid_argument);
}

// The AVX-512 kernels spread the prefetches of the next work item over
// their calls of NextItemPrefetch::Step, one per register block of rows in
// each sub-block: the count must be the blocks the kernel makes (with 6-row
// blocks in 32-row sub-blocks, ceil(rows / 6) left out a block per full
// sub-block and asked for each item's lines about a tenth too early).
TEST(AttentionTest, PrefetchStepsCountTheBlocksOfEverySubBlock) {
  for (const int64_t sub_rows : {1, 6, 7, 12, 32}) {
    for (const int64_t block_rows : {4, 6}) {
      for (int64_t rows = 0; rows <= 600; ++rows) {
        int64_t blocks = 0;
        for (int64_t i0 = 0; i0 < rows; i0 += sub_rows) {
          const int64_t in_sub_block = std::min(sub_rows, rows - i0);
          for (int64_t r = 0; r < in_sub_block; r += block_rows) ++blocks;
        }
        ASSERT_EQ(RowBlocksInSubBlocks(rows, sub_rows, block_rows), blocks)
            << rows << " rows, sub-blocks of " << sub_rows << ", blocks of " << block_rows;
      }
    }
  }
  EXPECT_EQ(RowBlocksInSubBlocks(64, 32, 6), 12);
  EXPECT_EQ(RowBlocksInSubBlocks(512, 32, 6), 96);
}

TEST(AttentionTest, EmptySequencesAndBadShapes) {
  CpuContext ctx;
  const auto cu = CuSeqlens({0, 3, 0});
  const auto qkv = RandomVector(3 * 3 * 32, 12);
  std::vector<float> out(3 * 32);
  Attention(ctx, DType::kFloat32, DType::kFloat32, qkv.data(), cu.data(), 3, 3, 3, 2, 16, 0.25f,
            out.data());
  const auto want = Reference(qkv, cu, 2, 16, 0.25);
  EXPECT_LT(ScaledMaxError(out, want), 1e-4);

  EXPECT_THROW(Attention(ctx, DType::kFloat32, DType::kFloat32, qkv.data(), cu.data(), 3, 4, 3, 2,
                         16, 0.25f, out.data()),
               std::invalid_argument);  // cu_seqlens does not end at total
  const std::vector<int32_t> decreasing = {0, 3, 2};
  EXPECT_THROW(Attention(ctx, DType::kFloat32, DType::kFloat32, qkv.data(), decreasing.data(), 2, 2,
                         3, 2, 16, 0.25f, out.data()),
               std::invalid_argument);
  const std::vector<int32_t> offset = {1, 3};
  EXPECT_THROW(Attention(ctx, DType::kFloat32, DType::kFloat32, qkv.data(), offset.data(), 1, 3, 2,
                         2, 16, 0.25f, out.data()),
               std::invalid_argument);
  EXPECT_THROW(Attention(ctx, DType::kFloat32, DType::kFloat32, qkv.data(), cu.data(), 3, 3, 3, 0,
                         16, 0.25f, out.data()),
               std::invalid_argument);
  EXPECT_THROW(Attention(ctx, DType::kFloat32, DType::kFloat32, qkv.data(), nullptr, 3, 3, 3, 2, 16,
                         0.25f, out.data()),
               std::invalid_argument);
  EXPECT_THROW(Attention(ctx, DType::kFloat32, DType::kFloat16, qkv.data(), cu.data(), 3, 3, 3, 2,
                         16, 0.25f, out.data()),
               std::invalid_argument);  // fp16 matmuls: CUDA only
  EXPECT_THROW(Attention(ctx, DType::kBFloat16, DType::kFloat32, qkv.data(), cu.data(), 3, 3, 3, 2,
                         16, 0.25f, out.data()),
               std::invalid_argument);  // bf16 values take bf16 matmuls
  EXPECT_THROW(Attention(ctx, DType::kFloat16, DType::kFloat16, qkv.data(), cu.data(), 3, 3, 3, 2,
                         16, 0.25f, out.data()),
               std::invalid_argument);  // fp16 values: CUDA only
}

}  // namespace
}  // namespace encoderd::kernels
