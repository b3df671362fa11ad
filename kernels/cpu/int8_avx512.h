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

}  // namespace encoderd::kernels
