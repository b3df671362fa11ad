// The timed loops of the measurement of the native bf16 dot product against
// fp32 FMA (MeasureBf16DotRates, kernels/cpu_features.cc): the instructions
// alone, so that this file, compiled for AVX-512, holds no standard-library
// code; the clock and the arithmetic stay in generic code.
#pragma once

#include <cstdint>

namespace encoderd::kernels {

// 16 x iterations VDPBF16PS (32 products each) on 16 independent
// accumulators, or as many VFMADD231PS (16 products each). Only on a CPU
// with AVX-512 F, BW and BF16 (the caller checks).
void Bf16DotLoopAvx512(int64_t iterations);
void FmaLoopAvx512(int64_t iterations);

}  // namespace encoderd::kernels
