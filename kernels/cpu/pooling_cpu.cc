#include "kernels/cpu/pooling_cpu.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "kernels/cpu/layer_norm_cpu.h"
#include "kernels/cpu/parallel.h"

namespace encoderd::kernels {

void PoolCpu(const CpuContext& ctx, const float* hidden_states, const int32_t* cu_seqlens,
             const int32_t* pool_start, int64_t batch, int64_t hidden, Pooling mode, float* out) {
  const int threads =
      int64_t{cu_seqlens[batch]} * hidden >= 2 * kMinParallelElements ? ctx.num_threads() : 1;
  const auto pool = [&](int64_t b) {
    const float* first = hidden_states + int64_t{cu_seqlens[b]} * hidden;
    float* dst = out + b * hidden;
    const int64_t len = cu_seqlens[b + 1] - cu_seqlens[b];
    if (mode == Pooling::kCls || mode == Pooling::kLastToken) {
      const float* row = mode == Pooling::kCls ? first : first + (len - 1) * hidden;
      std::memcpy(dst, row, hidden * sizeof(float));
      return;
    }
    // The reducing modes read tokens [start, len).
    const int64_t start = pool_start ? std::clamp<int64_t>(pool_start[b], 0, len - 1) : 0;
    if (mode == Pooling::kMax) {
      std::memcpy(dst, first + start * hidden, hidden * sizeof(float));
      for (int64_t t = start + 1; t < len; ++t) {
        const float* row = first + t * hidden;
#pragma omp simd
        for (int64_t i = 0; i < hidden; ++i) dst[i] = std::max(dst[i], row[i]);
      }
      return;
    }
    // Weighted sums: token t weighs t + 1 for kWeightedMean, 1 otherwise.
    const bool by_position = mode == Pooling::kWeightedMean;
    std::fill(dst, dst + hidden, 0.f);
    for (int64_t t = start; t < len; ++t) {
      const float* row = first + t * hidden;
      const float w = by_position ? static_cast<float>(t + 1) : 1.f;
#pragma omp simd
      for (int64_t i = 0; i < hidden; ++i) dst[i] += w * row[i];
    }
    // n tokens; the weights t + 1 of tokens [start, len) sum to
    // (len (len + 1) - start (start + 1)) / 2.
    const double n = static_cast<double>(len - start);
    const double weights =
        0.5 * (static_cast<double>(len) * (len + 1) - static_cast<double>(start) * (start + 1));
    const float inv = static_cast<float>(mode == Pooling::kMeanSqrtLen ? 1.0 / std::sqrt(n)
                                         : by_position                 ? 1.0 / weights
                                                                       : 1.0 / n);
#pragma omp simd
    for (int64_t i = 0; i < hidden; ++i) dst[i] *= inv;
  };
  // Sequences one at a time, to whichever thread is free.
  std::atomic<int64_t> claimed{0};
  InParallel(threads, [&](int64_t /*t*/, int64_t /*nt*/) {
    for (int64_t b = claimed.fetch_add(1); b < batch; b = claimed.fetch_add(1)) pool(b);
  });
}

}  // namespace encoderd::kernels
