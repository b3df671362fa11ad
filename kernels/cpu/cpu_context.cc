#include "kernels/cpu_context.h"

#include <omp.h>

#include "kernels/cpu/dnnl_backend.h"
#include "kernels/cpu_features.h"

namespace encoderd::kernels {
namespace {

// oneDNN held to the instructions ENCODERD_CPU_DISABLE leaves, so that with
// AVX-512 turned off it packs weights and runs GEMMs as on a CPU without
// it (the layouts the few-row kernels read are those of that CPU): once,
// before oneDNN creates its first primitive. A oneDNN built without the cap
// keeps its own choice.
void CapOneDnnIsa() {
  static const bool capped = [] {
    const CpuFeatures& cpu = GetCpuFeatures();
    if (cpu.avx512f) return false;
    try {
      dnnl::set_max_cpu_isa(cpu.avx2 && cpu.fma ? dnnl::cpu_isa::avx2 : dnnl::cpu_isa::sse41);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  (void)capped;
}

}  // namespace

CpuContext::CpuContext(int num_threads)
    : num_threads_(num_threads > 0 ? num_threads : omp_get_num_procs()),
      backend_((CapOneDnnIsa(), std::make_unique<Backend>())) {}

CpuContext::~CpuContext() = default;

}  // namespace encoderd::kernels
