// Varlen flash-attention on the tensor cores (mma.sync m16n8k16, fp16 or bf16
// operands, fp32 accumulators), in the manner of FlashAttention-2.
// Grid: (query tiles, heads, sequences); a block of 4 warps owns 64 or 128
// query rows of one (sequence, head), 16 or 32 per warp (one or two m-tiles:
// two for head sizes up to 64, where their registers fit). It walks the
// sequence's keys in tiles of kKeys = 64, copied into shared memory as
// [key][dim] rows by cp.async (the next tile's copy overlaps this tile's
// math where two stages fit); ldmatrix reads the operand fragments
// of K and (transposed, .trans) of V from there. Per tile each warp computes its 16 x 64
// scores per m-tile S = Q K^T in registers, keeps per row the running max m and sum l
// (online softmax, exp2 of scores pre-multiplied by scale * log2(e)),
// rescales its output accumulators and adds P V, where P goes from the
// accumulator layout of S straight into the operand layout of the second
// product. Scores and probabilities never leave registers.
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4):
//   A 16x16 row-major: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B 16x8 col-major:  b0 (k 2t..2t+1, n g), b1 (k 2t+8..2t+9, n g)
//   C 16x8 fp32:       c0 c1 (g, 2t..2t+1), c2 c3 (g+8, 2t..2t+1)
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace encoderd::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kWarps * 16;  // query rows per block
constexpr int kKeys = 64;           // keys per tile
// Row padding of the shared tiles, in elements: a row is D + 8 elements, an
// odd number of 16-byte units, so the 8 rows one ldmatrix matrix reads fall
// in 8 different groups of 4 banks.
constexpr int kPad = 8;

// c += a b for one m16n8k16 tile of T (__half or __nv_bfloat16) operands.
#define ENCODERD_MMA_M16N8K16(TYPE)                                           \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE         \
               ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n" \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])               \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))

template <typename T>
struct Mma {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>);
  // Two values rounded to T, packed as one operand register.
  __device__ __forceinline__ static uint32_t Pack(float lo, float hi) {
    uint32_t packed;
    if constexpr (std::is_same_v<T, __half>) {
      const __half2 v = __floats2half2_rn(lo, hi);
      memcpy(&packed, &v, sizeof(packed));
    } else {
      const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
      memcpy(&packed, &v, sizeof(packed));
    }
    return packed;
  }
  __device__ __forceinline__ static void Run(float c[4], const uint32_t a[4], uint32_t b0,
                                             uint32_t b1) {
    if constexpr (std::is_same_v<T, __half>) {
      ENCODERD_MMA_M16N8K16("f16");
    } else {
      ENCODERD_MMA_M16N8K16("bf16");
    }
  }
};
#undef ENCODERD_MMA_M16N8K16

__device__ __forceinline__ uint32_t Load32(const void* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// cp.async of 16 bytes from global to shared memory (zero-filled when not
// `valid`), committed as groups and awaited until at most N groups are pending.
__device__ __forceinline__ void CopyAsync16(void* smem, const void* gmem, bool valid) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void CommitCopies() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void WaitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 matrices of 16-bit elements from shared memory: lanes 8i..8i+7
// give the addresses of matrix i's rows; lane l receives in r[i] the elements
// (l / 4, 2 (l % 4) .. +1) of matrix i, or with Trans of its transpose.
template <bool Trans>
__device__ __forceinline__ void LoadMatrices(const void* row, uint32_t r[4]) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  }
}

// M = 16-row m-tiles per warp (1 or 2): with 2, each K and V fragment read
// from shared memory feeds two mma instead of one, and a block covers
// kWarps * 16 * M query rows.
template <typename T, int D, int M>
__global__ void __launch_bounds__(kThreads)
    FlashAttentionKernel(const T* __restrict__ qkv, const int32_t* __restrict__ cu_seqlens,
                         int heads, float scale_log2, T* __restrict__ out) {
  static_assert(D % 16 == 0 && D <= 128, "head_dim must be a multiple of 16, at most 128");
  static_assert(M == 1 || M == 2, "one or two m-tiles per warp");
  constexpr int kSteps = D / 16;    // k-steps of Q K^T
  constexpr int kDimTiles = D / 8;  // n-tiles of the output
  constexpr int kKeyTiles = kKeys / 8;
  constexpr int kBlockRows = kRows * M;
  // Two stages (the next tile is copied while this one is computed) where
  // they fit the 48 KiB of static shared memory, one for head sizes over 80.
  constexpr int kStages = D <= 80 ? 2 : 1;
  __shared__ __align__(16) T k_s[kStages][kKeys][D + kPad];
  __shared__ __align__(16) T v_s[kStages][kKeys][D + kPad];

  const int seq = blockIdx.z, h = blockIdx.y;
  const int start = cu_seqlens[seq];
  const int len = cu_seqlens[seq + 1] - start;
  const int q0 = blockIdx.x * kBlockRows;
  if (q0 >= len) return;  // uniform over the block: no barrier is skipped by part of it

  const size_t row_stride = static_cast<size_t>(3) * heads * D;
  const size_t hd = static_cast<size_t>(heads) * D;
  const T* base = qkv + static_cast<size_t>(start) * row_stride + static_cast<size_t>(h) * D;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  // The row this lane addresses in an ldmatrix: matrix lane / 8, row lane % 8.
  const int mat = lane >> 3, mrow = lane & 7;
  // This thread's two query rows of m-tile i: row0[i] and row0[i] + 8.
  int row0[M];
#pragma unroll
  for (int i = 0; i < M; ++i) row0[i] = q0 + (warp * M + i) * 16 + g;

  // Q as A fragments, straight from global memory (rows past the end are 0).
  uint32_t qf[M][kSteps][4];
#pragma unroll
  for (int i = 0; i < M; ++i) {
    const int r0 = row0[i], r1 = r0 + 8;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int c = s * 16 + 2 * t;
      qf[i][s][0] = r0 < len ? Load32(base + r0 * row_stride + c) : 0u;
      qf[i][s][1] = r1 < len ? Load32(base + r1 * row_stride + c) : 0u;
      qf[i][s][2] = r0 < len ? Load32(base + r0 * row_stride + c + 8) : 0u;
      qf[i][s][3] = r1 < len ? Load32(base + r1 * row_stride + c + 8) : 0u;
    }
  }

  float o[M][kDimTiles][4];
#pragma unroll
  for (int i = 0; i < M; ++i) {
#pragma unroll
    for (int n = 0; n < kDimTiles; ++n) o[i][n][0] = o[i][n][1] = o[i][n][2] = o[i][n][3] = 0.0f;
  }
  // Per m-tile, the running max of rows row0, row0 + 8 (log2 units) and this
  // thread's part of their running sums.
  float m0[M], m1[M], l0[M], l1[M];
#pragma unroll
  for (int i = 0; i < M; ++i) {
    m0[i] = m1[i] = -INFINITY;
    l0[i] = l1[i] = 0.0f;
  }

  constexpr int kChunks = D / 8;  // 16-byte chunks per row of K or V
  // Queues the copies of key tile `tile` into `stage` as one cp.async group:
  // consecutive threads take consecutive chunks of one key; keys past the
  // end are zero-filled.
  auto load = [&](int tile, int stage) {
    for (int i = tid; i < kKeys * kChunks; i += kThreads) {
      const int j = i / kChunks, c = (i % kChunks) * 8;
      const int key = tile * kKeys + j;
      const bool valid = key < len;
      const T* src = base + (valid ? static_cast<size_t>(key) * row_stride : 0) + c;
      CopyAsync16(&k_s[stage][j][c], src + hd, valid);
      CopyAsync16(&v_s[stage][j][c], src + 2 * hd, valid);
    }
    CommitCopies();
  };
  const int tiles = (len + kKeys - 1) / kKeys;
  load(0, 0);
  for (int tile = 0; tile < tiles; ++tile) {
    const int k0 = tile * kKeys;
    const int stage = kStages == 2 ? tile & 1 : 0;
    if (kStages == 1) {
      if (tile > 0) load(tile, 0);
      WaitCopies<0>();
    } else if (tile + 1 < tiles) {
      load(tile + 1, stage ^ 1);  // its stage was last read before the previous barrier
      WaitCopies<1>();            // this tile's group has landed
    } else {
      WaitCopies<0>();
    }
    __syncthreads();  // every thread's copies of this tile are visible

    // S = Q K^T for this warp's rows and the tile's 64 keys. One ldmatrix
    // gives the B fragments (b0, b1) of key tiles n and n + 1: matrices 0, 1
    // are keys 8n.. at dims 16k.. and 16k + 8.., matrices 2, 3 keys 8n + 8...
    float s[M][kKeyTiles][4];
#pragma unroll
    for (int i = 0; i < M; ++i) {
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) s[i][n][0] = s[i][n][1] = s[i][n][2] = s[i][n][3] = 0.0f;
    }
#pragma unroll
    for (int n = 0; n < kKeyTiles; n += 2) {
#pragma unroll
      for (int k = 0; k < kSteps; ++k) {
        uint32_t b[4];
        LoadMatrices<false>(&k_s[stage][(n + (mat >> 1)) * 8 + mrow][k * 16 + (mat & 1) * 8], b);
#pragma unroll
        for (int i = 0; i < M; ++i) {
          Mma<T>::Run(s[i][n], qf[i][k], b[0], b[1]);
          Mma<T>::Run(s[i][n + 1], qf[i][k], b[2], b[3]);
        }
      }
    }
    // Scale, mask the keys past the end, and the online softmax update.
    const int valid = len - k0;
    uint32_t pf[M][kKeyTiles / 2][4];
#pragma unroll
    for (int i = 0; i < M; ++i) {
      float mx0 = m0[i], mx1 = m1[i];
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
        const int key = n * 8 + 2 * t;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool in = key + (e & 1) < valid;
          s[i][n][e] = in ? s[i][n][e] * scale_log2 : -INFINITY;
        }
        mx0 = fmaxf(mx0, fmaxf(s[i][n][0], s[i][n][1]));
        mx1 = fmaxf(mx1, fmaxf(s[i][n][2], s[i][n][3]));
      }
      // The 4 threads of a quad hold one row between them.
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      // Key k0 is always valid, so the max is finite from the first tile on.
      const float alpha0 = exp2f(m0[i] - mx0), alpha1 = exp2f(m1[i] - mx1);  // 0 at first
      m0[i] = mx0;
      m1[i] = mx1;
      l0[i] *= alpha0;
      l1[i] *= alpha1;
#pragma unroll
      for (int n = 0; n < kDimTiles; ++n) {
        o[i][n][0] *= alpha0;
        o[i][n][1] *= alpha0;
        o[i][n][2] *= alpha1;
        o[i][n][3] *= alpha1;
      }
      // P as A fragments: key tiles 2k and 2k+1 make the k-th 16-key step.
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
        const float p0 = exp2f(s[i][n][0] - mx0), p1 = exp2f(s[i][n][1] - mx0);
        const float p2 = exp2f(s[i][n][2] - mx1), p3 = exp2f(s[i][n][3] - mx1);
        l0[i] += p0 + p1;
        l1[i] += p2 + p3;
        pf[i][n / 2][(n & 1) * 2 + 0] = Mma<T>::Pack(p0, p1);
        pf[i][n / 2][(n & 1) * 2 + 1] = Mma<T>::Pack(p2, p3);
      }
    }
    // O += P V. V^T's B fragments come transposed out of V's rows: matrices
    // 0, 1 are keys 16k.. and 16k + 8.. at dims 8n.., matrices 2, 3 the same
    // keys at dims 8n + 8...
#pragma unroll
    for (int n = 0; n < kDimTiles; n += 2) {
#pragma unroll
      for (int k = 0; k < kKeyTiles / 2; ++k) {
        uint32_t b[4];
        LoadMatrices<true>(&v_s[stage][k * 16 + (mat & 1) * 8 + mrow][(n + (mat >> 1)) * 8], b);
#pragma unroll
        for (int i = 0; i < M; ++i) {
          Mma<T>::Run(o[i][n], pf[i][k], b[0], b[1]);
          Mma<T>::Run(o[i][n + 1], pf[i][k], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // this stage is read: the next load may refill it
  }

#pragma unroll
  for (int i = 0; i < M; ++i) {
    float s0 = l0[i], s1 = l1[i];
    s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
    s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
    const float inv0 = 1.0f / s0, inv1 = 1.0f / s1;  // >= 1: the max contributes exp2(0)
    const int r0 = row0[i], r1 = r0 + 8;
#pragma unroll
    for (int n = 0; n < kDimTiles; ++n) {
      const int c = n * 8 + 2 * t;
      if (r0 < len) {
        *reinterpret_cast<uint32_t*>(out + static_cast<size_t>(start + r0) * hd + h * D + c) =
            Mma<T>::Pack(o[i][n][0] * inv0, o[i][n][1] * inv0);
      }
      if (r1 < len) {
        *reinterpret_cast<uint32_t*>(out + static_cast<size_t>(start + r1) * hd + h * D + c) =
            Mma<T>::Pack(o[i][n][2] * inv1, o[i][n][3] * inv1);
      }
    }
  }
}

template <typename T, int D, int M>
void LaunchTiles(CudaContext& ctx, const void* qkv, const int32_t* cu_seqlens, int64_t batch,
                 int32_t max_seqlen, int64_t heads, float scale, void* out) {
  constexpr int kBlockRows = kRows * M;
  const dim3 grid(static_cast<unsigned>((int64_t{max_seqlen} + kBlockRows - 1) / kBlockRows),
                  static_cast<unsigned>(heads), static_cast<unsigned>(batch));
  const float scale_log2 = scale * 1.4426950408889634f;
  FlashAttentionKernel<T, D, M><<<grid, kThreads, 0, static_cast<cudaStream_t>(ctx.stream())>>>(
      static_cast<const T*>(qkv), cu_seqlens, static_cast<int>(heads), scale_log2,
      static_cast<T*>(out));
  ENCODERD_CUDA_CHECK_LAUNCH();
}

// Two m-tiles per warp for head sizes up to 64 (over 64 their accumulators
// would not fit the registers), unless ENCODERD_CUDA_ATTENTION_MTILES=1.
template <typename T, int D>
void Launch(CudaContext& ctx, const void* qkv, const int32_t* cu_seqlens, int64_t batch,
            int32_t max_seqlen, int64_t heads, float scale, void* out) {
  if constexpr (D <= 64) {
    if (CudaAttentionMTiles() == 2) {
      return LaunchTiles<T, D, 2>(ctx, qkv, cu_seqlens, batch, max_seqlen, heads, scale, out);
    }
  }
  LaunchTiles<T, D, 1>(ctx, qkv, cu_seqlens, batch, max_seqlen, heads, scale, out);
}

template <typename T>
void LaunchFor(int64_t head_dim, CudaContext& ctx, const void* qkv, const int32_t* cu_seqlens,
               int64_t batch, int32_t max_seqlen, int64_t heads, float scale, void* out) {
  switch (head_dim) {
#define ENCODERD_ATTENTION_CASE(D)                                            \
  case D:                                                                     \
    Launch<T, D>(ctx, qkv, cu_seqlens, batch, max_seqlen, heads, scale, out); \
    break;
    ENCODERD_ATTENTION_CASE(16)
    ENCODERD_ATTENTION_CASE(32)
    ENCODERD_ATTENTION_CASE(48)
    ENCODERD_ATTENTION_CASE(64)
    ENCODERD_ATTENTION_CASE(80)
    ENCODERD_ATTENTION_CASE(96)
    ENCODERD_ATTENTION_CASE(112)
    ENCODERD_ATTENTION_CASE(128)
#undef ENCODERD_ATTENTION_CASE
    default:
      throw std::invalid_argument("CudaAttention: head_dim " + std::to_string(head_dim));
  }
}
}  // namespace

int CudaAttentionMTiles() {
  const char* v = std::getenv("ENCODERD_CUDA_ATTENTION_MTILES");
  return v != nullptr && std::string(v) == "1" ? 1 : 2;
}

bool CudaAttentionSupports(int64_t head_dim) {
  return head_dim >= 16 && head_dim <= 128 && head_dim % 16 == 0;
}

void CudaAttention(CudaContext& ctx, DType dtype, const void* qkv, const int32_t* cu_seqlens,
                   int64_t batch, int32_t max_seqlen, int64_t heads, int64_t head_dim, float scale,
                   void* out) {
  if (!CudaAttentionSupports(head_dim)) {
    throw std::invalid_argument("CudaAttention: head_dim " + std::to_string(head_dim) +
                                " is not supported (a multiple of 16, at most 128)");
  }
  if (batch < 0 || batch > 65535 || heads <= 0 || heads > 65535 || max_seqlen < 0) {
    throw std::invalid_argument("CudaAttention: bad sizes");
  }
  if (batch == 0 || max_seqlen == 0) return;
  if (!qkv || !cu_seqlens || !out) throw std::invalid_argument("CudaAttention: null pointer");
  if (reinterpret_cast<uintptr_t>(qkv) % 16 != 0 || reinterpret_cast<uintptr_t>(out) % 4 != 0) {
    throw std::invalid_argument("CudaAttention: qkv must be 16-byte and out 4-byte aligned");
  }
  ENCODERD_DISPATCH_DTYPE(
      dtype, T, LaunchFor<T>(head_dim, ctx, qkv, cu_seqlens, batch, max_seqlen, heads, scale, out));
}

}  // namespace encoderd::kernels
