// The AVX2 GEMM kernels against memory that ends at an inaccessible page:
// fp32 weights [n][k] have no padding, so the last inputs of a k that is
// not a multiple of 8 are read through masks (and the last columns of the
// output written through masks), and a wrong mask or a vector read one step
// too far reads past the weights or the inputs, which here faults instead
// of reading a neighbour's bytes unnoticed. bf16 weights are padded to 16
// inputs a column, their inputs not. The int8 kernel's weights are
// padded to whole groups, its inputs to whole steps: it must not read past
// either.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cpu/few_rows_gemm_avx512.h"
#include "kernels/cpu/int8_gemm_avx512.h"
#include "kernels/cpu_features.h"
#include "tests/kernels/kernel_test_util.h"

namespace encoderd::kernels {
namespace {

using testing::EightLaneDot;
using testing::RandomVector;

// `count` values of T whose last one ends where a PROT_NONE page begins.
template <typename T>
class Guarded {
 public:
  explicit Guarded(const std::vector<T>& values) : count_(values.size()) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = count_ * sizeof(T);
    const size_t pages = (bytes + page - 1) / page;
    size_ = (pages + 1) * page;
    void* base = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return;
    base_ = static_cast<char*>(base);
    if (mprotect(base_ + pages * page, page, PROT_NONE) != 0) return;
    data_ = reinterpret_cast<T*>(base_ + pages * page - bytes);
    if (count_ > 0) std::memcpy(data_, values.data(), bytes);
  }
  ~Guarded() {
    if (base_) munmap(base_, size_);
  }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  T* data() const { return data_; }
  std::vector<T> values() const { return std::vector<T>(data_, data_ + count_); }

 private:
  size_t count_;
  size_t size_ = 0;
  char* base_ = nullptr;
  T* data_ = nullptr;
};

bool Avx2() {
  const CpuFeatures& cpu = GetCpuFeatures();
  return cpu.avx2 && cpu.fma;
}

// Rows 1 to max_rows of inputs [m][k] through `kernel` (the weights [n][k]
// with these values, bias b), each operand ending at a guard page, the
// residual added: the results must be the 8-lane FMA sums (EightLaneDot),
// then the bias and the residual.
void ExpectEightLaneSumsAtGuardPages(
    const std::vector<float>& values, const Guarded<float>& bias, const std::vector<float>& b,
    int64_t n, int64_t k, int64_t max_rows, uint32_t seed,
    const std::function<void(const float* x, int64_t m, const FewRowsEpilogue& e, float* out)>&
        kernel) {
  for (int64_t m = 1; m <= max_rows; ++m) {
    const Guarded<float> x(RandomVector(m * k, seed + m));
    const auto res = RandomVector(m * n, seed);
    const Guarded<float> residual(res);
    const Guarded<float> out(std::vector<float>(m * n, NAN));
    ASSERT_NE(x.data(), nullptr);
    ASSERT_NE(residual.data(), nullptr);
    ASSERT_NE(out.data(), nullptr);
    kernel(x.data(), m, FewRowsEpilogue{bias.data(), residual.data(), false, false}, out.data());
    const auto xs = x.values(), got = out.values();
    int64_t wrong = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const float sum = EightLaneDot(&xs[i * k], &values[j * k], k);
        wrong += got[i * n + j] != sum + b[j] + res[i * n + j];
      }
    }
    EXPECT_EQ(wrong, 0) << "n " << n << " k " << k << " m " << m;
  }
}

// fp32 weights [n][k] (as packed for the kernel on AVX2), bias, residual and
// output all end at a guard page, and so do the inputs (the last row's last
// step, of a k not a multiple of 8, read through masks); the results are
// the kernel's 8-lane FMA sums (EightLaneDot), then the bias and the
// residual.
TEST(GuardPageTest, F32Avx2StaysInsideItsOperands) {
  if (!Avx2()) GTEST_SKIP() << "no AVX2 + FMA";
  for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {5, 3}, {45, 17}, {70, 2}, {127, 33}, {1005, 40}}) {
    const auto w = RandomVector(n * k, 81);  // [n][k]
    const auto b = RandomVector(n, 82);
    const Guarded<float> weights(w), bias(b);
    ASSERT_NE(weights.data(), nullptr);
    ASSERT_NE(bias.data(), nullptr);
    ExpectEightLaneSumsAtGuardPages(
        w, bias, b, n, k, kFewRowsF32Avx2MaxRows, 83,
        [&](const float* x, int64_t m, const FewRowsEpilogue& e, float* out) {
          FewRowsGemmF32Avx2(x, m, k, weights.data(), n, k, 0, FewRowsGroups(n), e, out);
        });
  }
}

// bf16 weights in the AVX2 kernel's layout (few_rows_gemm_avx512.h:
// [n][k16], each 16 inputs stored as 0-3, 8-11, 4-7, 12-15, zeros past k),
// written out here from that description, end at a guard page, as do the
// bias, residual and output, and the inputs (the last row's last 1-15, of
// a k not a multiple of 16, read through masks): the results are the fp32
// kernel's sums (EightLaneDot) over the bf16 values, then the bias and the
// residual, up to kFewRowsMax rows. Widened for oneDNN
// (WidenBf16ColumnsAvx2) into [n][k] that ends at a guard page, the
// weights are those values bit for bit.
TEST(GuardPageTest, Bf16ColumnsAvx2StaysInsideItsOperands) {
  if (!Avx2()) GTEST_SKIP() << "no AVX2 + FMA";
  for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {5, 3}, {45, 17}, {70, 2}, {127, 33}, {33, 24}, {9, 40}, {3, 64}}) {
    const int64_t k16 = FewRowsBf16ColumnsInputs(k);
    const auto w = RandomVector(n * k, 91);
    std::vector<float> values(n * k);  // w's bf16 values (truncated: any bf16 value will do)
    std::vector<uint16_t> packed(n * k16, 0);
    for (int64_t col = 0; col < n; ++col) {
      for (int64_t i = 0; i < k; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &w[col * k + i], 4);
        bits &= 0xffff0000u;
        std::memcpy(&values[col * k + i], &bits, 4);
        const int64_t j = i % 16, place = (j % 8 < 4 ? 0 : 8) + 4 * (j / 8) + j % 4;
        packed[col * k16 + i - j + place] = static_cast<uint16_t>(bits >> 16);
      }
    }
    const auto b = RandomVector(n, 92);
    const Guarded<uint16_t> weights(packed);
    const Guarded<float> bias(b);
    ASSERT_NE(weights.data(), nullptr);
    ASSERT_NE(bias.data(), nullptr);
    ExpectEightLaneSumsAtGuardPages(
        values, bias, b, n, k, kFewRowsMax, 93,
        [&](const float* x, int64_t m, const FewRowsEpilogue& e, float* out) {
          FewRowsGemmBf16ColumnsAvx2(x, m, k, weights.data(), n, k, 0, FewRowsGroups(n), e, out);
        });
    const Guarded<float> wide(std::vector<float>(n * k, NAN));
    ASSERT_NE(wide.data(), nullptr);
    WidenBf16ColumnsAvx2(weights.data(), k, 0, n, wide.data());
    EXPECT_EQ(std::memcmp(wide.data(), values.data(), values.size() * sizeof(float)), 0)
        << "n " << n << " k " << k;
  }
}

// int8 weights packed for the kernels (PackInt8Vnni) and the inputs paired
// for the AVX2 kernel, each ending at a guard page, as do the epilogue's
// arrays (bias and residual n floats long, read through masks) and the
// output, which is also the residual (in place, as the encoder layers call
// it). With unit scales and no zero point the outputs are the integer sums
// plus the bias and the residual, small integers all: exact in fp32.
TEST(GuardPageTest, Int8Avx2StaysInsideItsOperands) {
  if (!Avx2()) GTEST_SKIP() << "no AVX2 + FMA";
  std::mt19937 rng(85);
  std::uniform_int_distribution<int> weight(-127, 127), input(0, 255);
  for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {5, 3}, {17, 6}, {64, 9}, {65, 4}, {200, 67}}) {
    std::vector<int8_t> q(n * k);
    for (auto& v : q) v = static_cast<int8_t>(weight(rng));
    std::vector<int8_t> packed(Int8VnniPackedBytes(n, k));
    PackInt8Vnni(q.data(), n, k, packed.data());
    const int64_t columns = Int8VnniGroups(n) * kInt8GroupColumns;
    const Guarded<int8_t> weights(packed);
    std::vector<float> b(n);
    for (auto& v : b) v = static_cast<float>(weight(rng));
    const Guarded<float> scale(std::vector<float>(columns, 1.f)), comp(std::vector<float>(n, 0.f));
    const Guarded<float> bias(b);
    ASSERT_NE(weights.data(), nullptr);
    ASSERT_NE(scale.data(), nullptr);
    ASSERT_NE(comp.data(), nullptr);
    ASSERT_NE(bias.data(), nullptr);
    for (const int64_t m : {1, 3, 4, 5, 12, 13}) {
      std::vector<uint8_t> x(m * k);
      for (auto& v : x) v = static_cast<uint8_t>(input(rng));
      const int64_t steps = Int8VnniSteps(k);
      std::vector<uint32_t> pairs(m * 2 * steps, 0);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t c = 0; c < k; ++c) {
          // Step c / 4's words: x0 | x2 << 16 and x1 | x3 << 16.
          const int64_t word = 2 * (c / 4) + c % 2, shift = c % 4 >= 2 ? 16 : 0;
          pairs[i * 2 * steps + word] |= static_cast<uint32_t>(x[i * k + c]) << shift;
        }
      }
      std::vector<float> res(m * n);
      for (auto& v : res) v = static_cast<float>(weight(rng));
      const Guarded<uint32_t> inputs(pairs);
      const Guarded<Int8RowQuant> rows(std::vector<Int8RowQuant>(m, Int8RowQuant{1.f, 0.f}));
      const Guarded<float> out(res);
      ASSERT_NE(inputs.data(), nullptr);
      ASSERT_NE(rows.data(), nullptr);
      ASSERT_NE(out.data(), nullptr);
      const Int8Epilogue e{scale.data(), comp.data(), bias.data(), rows.data(),
                           out.data(),   false,       false};
      Int8GemmAvx2(inputs.data(), 2 * steps, 0, m, weights.data(), n, k, 0, Int8VnniGroups(n), e,
                   out.data());
      const auto got = out.values();
      int64_t wrong = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          int64_t sum = 0;
          for (int64_t c = 0; c < k; ++c) sum += int64_t{x[i * k + c]} * q[j * k + c];
          wrong += got[i * n + j] != static_cast<float>(sum) + b[j] + res[i * n + j];
        }
      }
      EXPECT_EQ(wrong, 0) << "n " << n << " k " << k << " m " << m;
    }
  }
}

}  // namespace
}  // namespace encoderd::kernels
