// The per-row passes around the int8 GEMM (kernels/cpu/linear_cpu.cc) in
// AVX-512. Call only when the CPU has AVX-512 F and BW (the int8 GEMM path
// needs VNNI, which implies both).
#pragma once

#include <cstdint>

namespace encoderd::kernels {

// The least and greatest of row[0, k), and 0.
void RowRangeAvx512(const float* row, int64_t k, float* lo, float* hi);

// q[i] = clamp(round(row[i] * inv_scale) + zero, 0, 255), rounding to
// nearest even.
void QuantizeRowAvx512(const float* row, int64_t k, float inv_scale, float zero, uint8_t* q);

// out[j] = act(scale * acc[j] - scale_zero * comp[j] + bias[j] + residual[j])
// for j < n; bias and residual may be null; act is GELU (erf form, within
// 1e-6 of it) when gelu, max(x, 0) when relu, else none. out may alias
// residual or acc.
void Int8EpilogueRowAvx512(const float* acc, int64_t n, float scale, float scale_zero,
                           const float* comp, const float* bias, const float* residual, bool gelu,
                           bool relu, float* out);

}  // namespace encoderd::kernels
