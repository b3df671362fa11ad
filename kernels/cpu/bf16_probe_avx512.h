// How fast this CPU's native bf16 dot product (VDPBF16PS) runs against its
// fp32 FMA, so that bf16 models take the faster of the two (cpu_features.h).
#pragma once

#include "kernels/cpu_features.h"

namespace encoderd::kernels {

// One thread's rates (VDPBF16PS: 32 products an instruction; VFMADD231PS:
// 16), each the best of a few short timed loops over 512-bit registers
// (about a millisecond in all). Only on a CPU with AVX-512 F, BW and BF16
// (the caller checks).
Bf16DotRates MeasureBf16DotRatesAvx512();

}  // namespace encoderd::kernels
