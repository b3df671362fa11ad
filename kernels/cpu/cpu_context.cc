#include "kernels/cpu_context.h"

#include <omp.h>

#include "kernels/cpu/dnnl_backend.h"

namespace encoderd::kernels {

CpuContext::CpuContext(int num_threads)
    : num_threads_(num_threads > 0 ? num_threads : omp_get_num_procs()),
      backend_(std::make_unique<Backend>()) {}

CpuContext::~CpuContext() = default;

}  // namespace encoderd::kernels
