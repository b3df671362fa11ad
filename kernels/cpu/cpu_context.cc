#include "kernels/cpu_context.h"

#include <omp.h>

#include <cstdlib>
#include <string>

#include "kernels/cpu/dnnl_backend.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu_features.h"

namespace encoderd::kernels {
namespace {

// Where ENCODERD_CPU_DISABLE leaves no AVX-512 (or no AVX2), oneDNN is held
// to AVX2 (or SSE4.1) as well, so that it packs weights and runs GEMMs as on
// a CPU without them (the layouts the few-row kernels read are those of
// that CPU): once, before oneDNN creates its first primitive. Without the
// variable oneDNN keeps its own choice (and ONEDNN_MAX_CPU_ISA). oneDNN
// refuses the cap after its first primitive or when built without it; a
// weight then keeps the layout oneDNN chose, which FewRowsLayout checks.
void CapOneDnnIsa() {
  static const int once = [] {
    const CpuFeatures& cpu = GetCpuFeatures();
    if (std::getenv(kCpuDisableEnv) == nullptr || cpu.avx512f) return 0;
    return static_cast<int>(
        dnnl::set_max_cpu_isa(cpu.avx2 && cpu.fma ? dnnl::cpu_isa::avx2 : dnnl::cpu_isa::sse41));
  }();
  static_cast<void>(once);
}

// oneDNN's cache of primitives, which weights of the same shape share
// (each weight keeps the handles of its own, linear_cpu.h): at least
// kOneDnnPrimitiveCacheEntries, unless ONEDNN_PRIMITIVE_CACHE_CAPACITY or
// DNNL_PRIMITIVE_CACHE_CAPACITY (oneDNN reads both) sets it. A weight shape
// takes up to kMaxPrimitivesPerEpilogue (154) entries for each epilogue,
// output type and thread count it runs with (a bf16 weight widened for
// fp32 GEMMs, linear_cpu.h, up to three times as many), so oneDNN's default of 1024
// holds about six such sets, fewer than two models of different shapes use
// (a BERT-like model four); past it, a weight whose primitives were evicted
// compiles and keeps copies of its own (0.1-0.3 MB a primitive in a
// BERT-base daemon, docs/architecture.md).
bool OneDnnPrimitiveCacheSetByEnv() {
  return std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") != nullptr ||
         std::getenv("DNNL_PRIMITIVE_CACHE_CAPACITY") != nullptr;
}

void SizeOneDnnPrimitiveCache() {
  static const int once = [] {
    if (OneDnnPrimitiveCacheSetByEnv() ||
        dnnl::get_primitive_cache_capacity() >= kOneDnnPrimitiveCacheEntries) {
      return 0;
    }
    dnnl::set_primitive_cache_capacity(kOneDnnPrimitiveCacheEntries);
    return 1;
  }();
  static_cast<void>(once);
}

}  // namespace

CpuContext::CpuContext(int num_threads)
    : num_threads_(num_threads > 0 ? num_threads : omp_get_num_procs()),
      backend_((CapOneDnnIsa(), SizeOneDnnPrimitiveCache(), std::make_unique<Backend>())) {}

CpuContext::~CpuContext() = default;

void CpuContext::RunAsTeam(const std::function<void()>& work) const {
  static const bool off = [] {
    const char* env = std::getenv("ENCODERD_CPU_TEAM");
    return env != nullptr && std::string(env) == "0";
  }();
  if (off) {
    work();
    return;
  }
  WithTeam(num_threads_, work);
}

}  // namespace encoderd::kernels
