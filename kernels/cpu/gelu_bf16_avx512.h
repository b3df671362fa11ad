// GELU over the output of a bf16 GEMM (kernels/cpu/linear_cpu.cc), in
// AVX-512 with AVX512-BF16 (avx512_math.h's GeluErf). Call only when the CPU
// has AVX-512 F, BW and BF16.
#pragma once

#include <cstdint>

namespace encoderd::kernels {

// y[i] = bf16(GELU(y[i])) for i < n: bf16 values in, rounded to nearest
// even out.
void GeluBf16Avx512(uint16_t* y, int64_t n);

// y[i] = GELU(y[i]) for i < n in fp32; with round_to_bf16, GELU(bf16(y[i])),
// each value rounded to bf16 (nearest even) first.
void GeluF32Avx512(float* y, int64_t n, bool round_to_bf16);

}  // namespace encoderd::kernels
