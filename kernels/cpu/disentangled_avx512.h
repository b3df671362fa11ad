// AVX-512 DisentangledRows (attention_cpu.h); see kernels/attention.h's
// DisentangledBias.
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace encoderd::kernels {

// DisentangledRows on a CPU with AVX-512 F: the projections of q and k onto
// the window of the tables in register tiles of 4 rows by 64 columns, the
// gathers 16 keys at a time. Each value sums over head_dim in order, so the
// same bits whatever rows an item holds.
void DisentangledRowsAvx512(const DisentangledBias& b, const float* q, const float* k, int64_t ld,
                            int64_t len, int64_t head, int64_t head_dim, int64_t row_begin,
                            int64_t row_end, float* out);

}  // namespace encoderd::kernels
