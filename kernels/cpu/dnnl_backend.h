// oneDNN state behind CpuContext; included only by kernels/cpu/*.cc.
#pragma once

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu_context.h"

namespace encoderd::kernels {

struct CpuContext::Backend {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

// Caps OpenMP (and therefore oneDNN) parallel regions started by the calling
// thread at the context's thread budget.
inline void ApplyThreadBudget(const CpuContext& ctx) {
  if (omp_get_max_threads() != ctx.num_threads()) omp_set_num_threads(ctx.num_threads());
}

}  // namespace encoderd::kernels
