// fp32 -> bf16 conversion (round to nearest even, as PyTorch) for the CPU ops.
#pragma once

#include <cstdint>

namespace encoderd::kernels {

// dst[i] = bf16(src[i]) for i < n; NaN stays NaN. Vectorised with AVX-512
// or AVX2 when the CPU has it. Single-threaded: callers split the work.
void ConvertFloatToBFloat16(const float* src, uint16_t* dst, int64_t n);

// dst[i] = float(bf16(src[i])): the same rounding, kept in fp32 storage (used
// to run bf16 math on fp32 GEMMs where the CPU has no bf16 instructions).
// dst may equal src.
void RoundToBFloat16(const float* src, float* dst, int64_t n);  // src may be unaligned

// dst[i] = float(src[i]) for i < n, exactly. Single-threaded.
void ConvertBFloat16ToFloat(const uint16_t* src, float* dst, int64_t n);

// n pairs of bf16 values (pairs[2i], pairs[2i + 1]) widened to fp32, exactly:
// even[i] = float(pairs[2i]) and, unless odd is null, odd[i] =
// float(pairs[2i + 1]). Vectorised with AVX-512 or AVX2 when the CPU has
// it. Single-threaded.
void WidenBFloat16Pairs(const uint16_t* pairs, int64_t n, float* even, float* odd);

}  // namespace encoderd::kernels
