// Varlen flash-attention on CUDA cores. Grid: (query tiles, heads, sequences).
// A block of 4 warps owns kRowsPerBlock query rows of one (sequence, head);
// it walks the sequence's keys in tiles of kKeysPerTile held in shared memory
// and keeps, per query row, the running max m, the running sum l and the
// unnormalised output o (online softmax): for each tile, lane j of a warp
// scores keys j and j + 32, the warp reduces max and sum, rescales o by
// exp(m_old - m_new) and adds p_j v_j. Scores never leave registers.
#include <cmath>
#include <stdexcept>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace encoderd::kernels {
namespace {

using cuda_detail::FromFloat;
using cuda_detail::ToFloat;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kKeysPerTile = 64;  // two keys per lane

template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    FlashAttentionKernel(const T* __restrict__ qkv, const int32_t* __restrict__ cu_seqlens,
                         int heads, float scale, T* __restrict__ out) {
  static_assert(D % 32 == 0, "head_dim must be a multiple of 32");
  constexpr int kDimsPerLane = D / 32;
  // Keys are padded by 2 elements per row: lanes reading key `lane` at the
  // same d then hit 32 different banks (row stride D/2 + 1 words, odd).
  __shared__ float q_s[kRowsPerBlock][D];
  __shared__ T k_s[kKeysPerTile][D + 2];
  __shared__ T v_s[kKeysPerTile][D];

  const int seq = blockIdx.z, h = blockIdx.y;
  const int start = cu_seqlens[seq];
  const int len = cu_seqlens[seq + 1] - start;
  const int q0 = blockIdx.x * kRowsPerBlock;
  if (q0 >= len) return;  // uniform over the block: no barrier is skipped by part of it

  const size_t row_stride = static_cast<size_t>(3) * heads * D;
  const size_t hd = static_cast<size_t>(heads) * D;
  const T* base = qkv + static_cast<size_t>(start) * row_stride + static_cast<size_t>(h) * D;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

  for (int i = tid; i < kRowsPerBlock * D; i += kThreads) {
    const int r = i / D, d = i % D;
    q_s[r][d] = q0 + r < len ? ToFloat(base[(q0 + r) * row_stride + d]) * scale : 0.0f;
  }

  float o[kRowsPerWarp][kDimsPerLane];
  float m[kRowsPerWarp], l[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) o[rr][i] = 0.0f;
  }

  for (int k0 = 0; k0 < len; k0 += kKeysPerTile) {
    __syncthreads();  // q_s written (first tile) / previous tile consumed
    for (int i = tid; i < kKeysPerTile * D; i += kThreads) {
      const int j = i / D, d = i % D;
      T kv = FromFloat<T>(0.0f), vv = FromFloat<T>(0.0f);
      if (k0 + j < len) {
        const T* src = base + static_cast<size_t>(k0 + j) * row_stride + d;
        kv = src[hd];
        vv = src[2 * hd];
      }
      k_s[j][d] = kv;
      v_s[j][d] = vv;
    }
    __syncthreads();
    const int valid = min(kKeysPerTile, len - k0);  // >= 1

#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const float* q = q_s[warp * kRowsPerWarp + rr];
      float s0 = -INFINITY, s1 = -INFINITY;
      if (lane < valid) {
        float acc = 0.0f;
#pragma unroll 8
        for (int d = 0; d < D; ++d) acc += q[d] * ToFloat(k_s[lane][d]);
        s0 = acc;
      }
      if (lane + 32 < valid) {
        float acc = 0.0f;
#pragma unroll 8
        for (int d = 0; d < D; ++d) acc += q[d] * ToFloat(k_s[lane + 32][d]);
        s1 = acc;
      }
      const float m_new = fmaxf(m[rr], cuda_detail::WarpMax(fmaxf(s0, s1)));  // finite
      const float alpha = expf(m[rr] - m_new);  // 0 on the first tile (m = -inf)
      const float p0 = lane < valid ? expf(s0 - m_new) : 0.0f;
      const float p1 = lane + 32 < valid ? expf(s1 - m_new) : 0.0f;
      l[rr] = l[rr] * alpha + cuda_detail::WarpSum(p0 + p1);
      m[rr] = m_new;
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) o[rr][i] *= alpha;
      for (int j = 0; j < valid; ++j) {
        // j is uniform over the warp, so every lane takes the same operand.
        const float p = __shfl_sync(0xffffffffu, j < 32 ? p0 : p1, j & 31);
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) o[rr][i] += p * ToFloat(v_s[j][lane + 32 * i]);
      }
    }
  }

#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = q0 + warp * kRowsPerWarp + rr;
    if (r >= len) continue;
    const float inv = 1.0f / l[rr];  // l >= 1: the max score contributes exp(0)
    T* dst = out + static_cast<size_t>(start + r) * hd + static_cast<size_t>(h) * D;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) dst[lane + 32 * i] = FromFloat<T>(o[rr][i] * inv);
  }
}

template <typename T, int D>
void Launch(CudaContext& ctx, const void* qkv, const int32_t* cu_seqlens, int64_t batch,
            int32_t max_seqlen, int64_t heads, float scale, void* out) {
  const dim3 grid((max_seqlen + kRowsPerBlock - 1) / kRowsPerBlock, static_cast<unsigned>(heads),
                  static_cast<unsigned>(batch));
  FlashAttentionKernel<T, D><<<grid, kThreads, 0, static_cast<cudaStream_t>(ctx.stream())>>>(
      static_cast<const T*>(qkv), cu_seqlens, static_cast<int>(heads), scale, static_cast<T*>(out));
  ENCODERD_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool CudaAttentionSupports(int64_t head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 128;
}

void CudaAttention(CudaContext& ctx, DType dtype, const void* qkv, const int32_t* cu_seqlens,
                   int64_t batch, int32_t max_seqlen, int64_t heads, int64_t head_dim, float scale,
                   void* out) {
  if (!CudaAttentionSupports(head_dim)) {
    throw std::invalid_argument("CudaAttention: head_dim " + std::to_string(head_dim) +
                                " is not supported (32, 64, 128)");
  }
  if (batch < 0 || batch > 65535 || heads <= 0 || heads > 65535 || max_seqlen < 0) {
    throw std::invalid_argument("CudaAttention: bad sizes");
  }
  if (batch == 0 || max_seqlen == 0) return;
  if (!qkv || !cu_seqlens || !out) throw std::invalid_argument("CudaAttention: null pointer");
  ENCODERD_DISPATCH_DTYPE(dtype, T, {
    switch (head_dim) {
      case 32:
        Launch<T, 32>(ctx, qkv, cu_seqlens, batch, max_seqlen, heads, scale, out);
        break;
      case 64:
        Launch<T, 64>(ctx, qkv, cu_seqlens, batch, max_seqlen, heads, scale, out);
        break;
      default:
        Launch<T, 128>(ctx, qkv, cu_seqlens, batch, max_seqlen, heads, scale, out);
        break;
    }
  });
}

}  // namespace encoderd::kernels
