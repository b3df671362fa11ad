#include "kernels/cpu/layer_norm_cpu.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/bf16_convert.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu_features.h"

namespace encoderd::kernels {

namespace {

// Three passes over a row that stays in L1: sum, centred sum of squares
// (two-pass variance, as accurate as PyTorch's Welford), normalise. Inlined
// into one function per instruction set below, each vectorising it for its
// own.
__attribute__((always_inline)) inline void LayerNormRowBody(const float* x, const float* residual,
                                                            const float* gamma, const float* beta,
                                                            int64_t n, float eps, float* out) {
  float sum = 0.f;
  if (residual != nullptr) {
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i] + residual[i];
      out[i] = v;
      sum += v;
    }
    x = out;
  } else {
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += x[i];
  }
  const float mean = sum / static_cast<float>(n);
  float sq = 0.f;
#pragma omp simd reduction(+ : sq)
  for (int64_t i = 0; i < n; ++i) {
    const float d = x[i] - mean;
    sq += d * d;
  }
  const float rstd = 1.f / std::sqrt(sq / static_cast<float>(n) + eps);
  if (gamma != nullptr && beta != nullptr) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] - mean) * rstd * gamma[i] + beta[i];
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      float v = (x[i] - mean) * rstd;
      if (gamma != nullptr) v *= gamma[i];
      if (beta != nullptr) v += beta[i];
      out[i] = v;
    }
  }
}

__attribute__((target("avx512f"))) void LayerNormRowAvx512(const float* x, const float* residual,
                                                           const float* gamma, const float* beta,
                                                           int64_t n, float eps, float* out) {
  LayerNormRowBody(x, residual, gamma, beta, n, eps, out);
}

__attribute__((target("avx2"))) void LayerNormRowAvx2(const float* x, const float* residual,
                                                      const float* gamma, const float* beta,
                                                      int64_t n, float eps, float* out) {
  LayerNormRowBody(x, residual, gamma, beta, n, eps, out);
}

void LayerNormRowGeneric(const float* x, const float* residual, const float* gamma,
                         const float* beta, int64_t n, float eps, float* out) {
  LayerNormRowBody(x, residual, gamma, beta, n, eps, out);
}

}  // namespace

// Chosen by GetCpuFeatures(), so that ENCODERD_CPU_DISABLE reaches it (the
// compiler's target_clones, used before, asked the CPU itself: the generic
// and AVX2 test runs ran the AVX-512 version).
LayerNormRowIsa LayerNormRowIsaInUse() {
  const CpuFeatures& cpu = GetCpuFeatures();
  return cpu.avx512f ? LayerNormRowIsa::kAvx512
                     : (cpu.avx2 ? LayerNormRowIsa::kAvx2 : LayerNormRowIsa::kGeneric);
}

void AddLayerNormRowWith(LayerNormRowIsa isa, const float* x, const float* residual,
                         const float* gamma, const float* beta, int64_t n, float eps, float* out) {
  switch (isa) {
    case LayerNormRowIsa::kAvx512:
      return LayerNormRowAvx512(x, residual, gamma, beta, n, eps, out);
    case LayerNormRowIsa::kAvx2:
      return LayerNormRowAvx2(x, residual, gamma, beta, n, eps, out);
    case LayerNormRowIsa::kGeneric:
      return LayerNormRowGeneric(x, residual, gamma, beta, n, eps, out);
  }
}

void AddLayerNormRow(const float* x, const float* residual, const float* gamma, const float* beta,
                     int64_t n, float eps, float* out) {
  static const LayerNormRowIsa isa = LayerNormRowIsaInUse();
  AddLayerNormRowWith(isa, x, residual, gamma, beta, n, eps, out);
}

void AddLayerNormCpu(const CpuContext& ctx, const float* x, const float* residual,
                     const float* gamma, const float* beta, int64_t rows, int64_t hidden, float eps,
                     float* out, uint16_t* out_bf16) {
  const int threads = rows * hidden >= 2 * kMinParallelElements ? ctx.num_threads() : 1;
  InParallel(threads, [&](int64_t t, int64_t nt) {
    // Without out, each row is normalised into a row of this thread's own.
    std::vector<float> row(out == nullptr ? hidden : 0);
    const Share share = ShareOf(rows, t, nt);
    for (int64_t r = share.begin; r < share.end; ++r) {
      float* y = out != nullptr ? out + r * hidden : row.data();
      AddLayerNormRow(x + r * hidden, residual ? residual + r * hidden : nullptr, gamma, beta,
                      hidden, eps, y);
      if (out_bf16 != nullptr) ConvertFloatToBFloat16(y, out_bf16 + r * hidden, hidden);
    }
  });
}

}  // namespace encoderd::kernels
