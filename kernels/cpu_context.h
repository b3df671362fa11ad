// Per-replica CPU execution context shared by the CPU kernels.
#pragma once

#include <functional>
#include <memory>

namespace encoderd::kernels {

// The smallest capacity the first CpuContext gives oneDNN's primitive cache
// (process-wide), unless ONEDNN_PRIMITIVE_CACHE_CAPACITY or
// DNNL_PRIMITIVE_CACHE_CAPACITY sets one (kernels/cpu/cpu_context.cc).
constexpr int kOneDnnPrimitiveCacheEntries = 4096;

// Owns the thread budget and the oneDNN engine/stream used by the CPU ops.
// All parallel loops (oneDNN's and the kernels' own) run on the OpenMP runtime
// that oneDNN was built with (libgomp), capped at num_threads(), so the two
// never oversubscribe the cores. One context per executor thread: ops called
// with the same context must not run concurrently (the oneDNN stream is
// in-order and not thread-safe); different contexts may run in parallel.
class CpuContext {
 public:
  // num_threads <= 0 means every processor OpenMP sees (omp_get_num_procs()).
  explicit CpuContext(int num_threads = 0);
  ~CpuContext();
  CpuContext(const CpuContext&) = delete;
  CpuContext& operator=(const CpuContext&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs work() with the context's threads held for it in one OpenMP
  // region, the CPU kernels' parallel regions handed to them at less cost
  // than libgomp's own (kernels/cpu/parallel.h, WithTeam): for a forward of
  // a few rows whose Linear layers all run on the project's own kernels
  // (kernels::LinearRunsOnTeam); oneDNN called in work() runs on one thread.
  // ENCODERD_CPU_TEAM=0 in the environment makes it a plain call of work().
  void RunAsTeam(const std::function<void()>& work) const;

  // Backend state (oneDNN engine and stream); defined in kernels/cpu/.
  struct Backend;
  Backend& backend() const { return *backend_; }

 private:
  int num_threads_;
  std::unique_ptr<Backend> backend_;
};

}  // namespace encoderd::kernels
