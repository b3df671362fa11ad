// Shared helpers for the kernel tests: random data and error measures.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace encoderd::kernels::testing {

inline std::vector<float> RandomVector(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// cu_seqlens (B+1 prefix sums) of the given lengths.
inline std::vector<int32_t> CuSeqlens(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu(1, 0);
  for (int32_t len : lengths) cu.push_back(cu.back() + len);
  return cu;
}

// max |got - want| / max(max |want|, 1e-6): error relative to the activation scale.
inline double ScaledMaxError(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double scale = 1e-6, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::abs(want[i]));
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  return err / scale;
}

inline double Cosine(const std::vector<float>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += a[i] * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += b[i] * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

// The dot product of x and w (k floats each) as the AVX2 fp32 few-row
// kernel sums it (kernels/cpu/few_rows_gemm_avx2.cc): lane l of 8 takes
// inputs l, l + 8, ... one FMA at a time (inputs past k, up to a multiple
// of 8, as 0 x 0), then ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)).
inline float EightLaneDot(const float* x, const float* w, int64_t k) {
  float lane[8] = {};
  for (int64_t i = 0; i < (k + 7) / 8 * 8; ++i) {
    lane[i % 8] = std::fma(i < k ? x[i] : 0.f, i < k ? w[i] : 0.f, lane[i % 8]);
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

}  // namespace encoderd::kernels::testing
