// The CPU pooling op (kernels/pooling.h, arguments already validated).
#pragma once

#include <cstdint>

#include "core/op_types.h"
#include "kernels/cpu_context.h"

namespace encoderd::kernels {

void PoolCpu(const CpuContext& ctx, const float* hidden_states, const int32_t* cu_seqlens,
             const int32_t* pool_start, int64_t batch, int64_t hidden, Pooling mode, float* out);

}  // namespace encoderd::kernels
