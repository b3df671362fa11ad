#include "kernels/cpu/linear_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/bf16_convert.h"
#include "kernels/cpu/dnnl_backend.h"
#include "kernels/cpu/few_rows_gemm_avx512.h"
#include "kernels/cpu/gelu_bf16_avx512.h"
#include "kernels/cpu/int8_avx512.h"
#include "kernels/cpu/int8_gemm_avx512.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu_features.h"

namespace encoderd::kernels {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

// oneDNN GEMMs (fp32, bf16, and int8 on CPUs with neither VNNI nor AVX2 +
// FMA) take rows in chunks: 2048, 1024 or 512 rows while that many are
// left; then a remainder r < 512 is one chunk of exactly r rows up to
// kExactRows, and beyond that 16 * (r / 16) rows and r % 16 rows. A weight
// thus needs at most kMaxPrimitivesPerEpilogue (3 + 23 + 128) primitives
// per epilogue and output type, whatever the batch
// sizes (a new primitive costs 0.3-1.5 ms to create; kernels/bench/gemm_bench compares chunked
// calls with one exact-size primitive). Each chunk reads the whole weight
// once (from L3 when the chunk before has just read it): `encoderd
// bench`'s W1 (4345 rows) reads it 4 times (2048, 2048, 240, 9 rows), and
// bench/make_inputs.py's W1 (3796 rows) 5 times (2048, 1024, 512, 208, 4).
// Until 2026-12-01 a remainder's r % 16 rows were always a chunk of their
// own, another pass over the weight: batches of 50-120 rows took 1-15%
// longer than they do now (docs/architecture.md has the figures and the
// primitives' memory).
//
// The int8 kernels (VNNI, or AVX2 without it) take 512 rows at a time (any
// count: they have no primitives), whose inputs stay in cache while each
// group of weight columns goes over them. Up to kFewRowsMax rows, fp32 and
// bf16 weights on AVX-512, bf16 weights on AVX2 + FMA, and int8 weights on
// VNNI go to the few-row kernels instead (few_rows_gemm_avx512.h), which
// read each weight once with every row in one tile; so do fp32 weights of
// kFewRowsF32Avx2MinBytes or more on AVX2 + FMA up to kFewRowsF32Avx2MaxRows
// rows, and bf16 weights without bf16 instructions up to
// kFewRowsBf16AsF32MaxRows rows on AVX-512 and kFewRowsBf16AsF32Avx2MaxRows
// on AVX2, in blocks of up to kFewRowsMax (FewRowsLimit). The AVX2 int8 kernel takes a few rows as
// any others, in blocks of up to 4.
constexpr int64_t kChunkRows = 512;
constexpr int64_t kMaxChunkRows = 2048;
constexpr int64_t kRowGranule = 16;
constexpr int64_t kExactRows = 128;
static_assert(kExactRows % kRowGranule == 0 && kExactRows < kChunkRows &&
                  kMaxChunkRows == 4 * kChunkRows,
              "the count below");
static_assert(kMaxPrimitivesPerEpilogue ==
                  3 + (kChunkRows / kRowGranule - 1 - kExactRows / kRowGranule) + kExactRows,
              "2048, 1024 and 512 rows; multiples of 16 over kExactRows; 1 to kExactRows");

// The rows of the next chunk when `left` rows remain, at most `max_chunk`
// (kChunkRows, or kMaxChunkRows).
int64_t ChunkRows(int64_t left, int64_t max_chunk) {
  for (int64_t chunk = max_chunk; chunk >= kChunkRows; chunk /= 2) {
    if (left >= chunk) return chunk;
  }
  return left <= kExactRows ? left : left / kRowGranule * kRowGranule;
}

Dt ComputeType(const CpuPackedWeight& w) { return w.bf16_compute ? Dt::bf16 : Dt::f32; }

dnnl::primitive_attr EpilogueAttr(Epilogue epilogue, int64_t rows, int64_t cols) {
  dnnl::post_ops ops;
  switch (epilogue) {
    case Epilogue::kNone:
      break;
    case Epilogue::kGelu:
      ops.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
      break;
    case Epilogue::kRelu:
      ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      break;
    case Epilogue::kResidual:
      // dst = x W^T + b + dst: the residual is copied into dst before the
      // call. A binary-add post-op reading the residual from dst itself is
      // wrong once oneDNN splits K (K > 512): dst then holds partial sums.
      ops.append_sum(1.f);
      break;
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  return attr;
}

// dst is fp32, or bf16 when bf16_out (a bf16 GEMM whose output feeds
// another).
dnnl::matmul::primitive_desc MakeMatmul(const dnnl::engine& engine, const CpuPackedWeight& w,
                                        int64_t rows, const memory::desc& weight_desc,
                                        Epilogue epilogue, bool bf16_out = false) {
  const int64_t n = w.out_features, k = w.in_features;
  memory::desc src({rows, k}, ComputeType(w), Tag::ab);
  memory::desc dst({rows, n}, bf16_out ? Dt::bf16 : Dt::f32, Tag::ab);
  const dnnl::primitive_attr attr = EpilogueAttr(epilogue, rows, n);
  if (w.bias) {
    return dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(src, weight_desc, w.bias.get_desc(), dst), attr, engine);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weight_desc, dst), attr, engine);
}

// The matmul w caches under (rows, epilogue, bf16 output), made the first
// time (under w.mu, which the oneDNN JIT then holds).
dnnl::matmul GetPrimitive(const CpuContext& ctx, CpuPackedWeight& w, int64_t rows,
                          Epilogue epilogue, bool bf16_out = false) {
  const auto key = std::make_tuple(rows, static_cast<int>(epilogue), bf16_out);
  std::lock_guard<std::mutex> lock(w.mu);
  auto it = w.primitives.find(key);
  if (it != w.primitives.end()) return it->second;
  dnnl::matmul prim(MakeMatmul(ctx.backend().engine, w, rows, w.weight_desc, epilogue, bf16_out));
  w.primitives.emplace(key, prim);
  return prim;
}

// Per-thread scratch, one buffer per (type, slot): a pointer stays valid
// until the same thread asks that buffer for more elements.
template <typename T, int kSlot = 0>
T* Scratch(size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// fn(begin, end) over [0, n) in one range per thread of ctx's, or in one
// call when n is under 2^16.
template <typename Fn>
void SplitBetweenThreads(const CpuContext& ctx, int64_t n, Fn&& fn) {
  const int threads = n >= (1 << 16) ? ctx.num_threads() : 1;
  InParallel(threads, [&](int64_t t, int64_t nt) {
    const Share share = ShareOf(n, t, nt);
    fn(share.begin, share.end);
  });
}

// Rounds x to bf16 into scratch (as uint16 for bf16 GEMMs, as fp32 values
// otherwise) and returns the scratch.
void* RoundInput(const CpuContext& ctx, const CpuPackedWeight& w, const float* x, int64_t total) {
  void* out = w.bf16_compute ? static_cast<void*>(Scratch<uint16_t>(total))
                             : static_cast<void*>(Scratch<float>(total));
  SplitBetweenThreads(ctx, total, [&](int64_t begin, int64_t end) {
    if (w.bf16_compute) {
      ConvertFloatToBFloat16(x + begin, static_cast<uint16_t*>(out) + begin, end - begin);
    } else {
      RoundToBFloat16(x + begin, static_cast<float*>(out) + begin, end - begin);
    }
  });
  return out;
}

// Per-row asymmetric uint8 quantization: the row's range, widened to hold 0,
// in 255 steps; q = clamp(round(x / scale) + zero, 0, 255).
using RowQuant = Int8RowQuant;

// avx512: RowRangeAvx512 finds the range (the same values).
RowQuant ChooseRowQuant(const float* row, int64_t k, bool avx512) {
  float lo = 0.f, hi = 0.f;
  if (avx512) {
    RowRangeAvx512(row, k, &lo, &hi);
  } else {
    for (int64_t i = 0; i < k; ++i) {
      lo = std::min(lo, row[i]);
      hi = std::max(hi, row[i]);
    }
  }
  const float scale = (hi - lo) / 255.f;
  // All zero, or a range so small its reciprocal would overflow: all zero.
  if (!(scale >= std::numeric_limits<float>::min())) return {1.f, 0.f};
  return {scale, std::clamp(std::nearbyint(-lo / scale), 0.f, 255.f)};
}

// Rounds row * inv to the nearest integer, ties to even, as nearbyint rounds
// in the default mode, without a call per value: adding and taking back
// 1.5 * 2^23 does that to a float under 2^22 in magnitude (here about 255 at
// most, or NaN, which stays NaN), and the loops vectorize. The product must
// be rounded before the addition: this file is compiled with
// -ffp-contract=off (kernels/CMakeLists.txt).
inline float RoundedProduct(float x, float inv) {
  constexpr float kRound = 12582912.f;
  return (x * inv + kRound) - kRound;
}

// Quantizes one row to uint8 into q and returns its parameters: with AVX-512
// through int8_avx512.h, elsewhere in portable code, the same values (NaN
// becomes 0 either way).
RowQuant QuantizeRow(const float* row, int64_t k, bool avx512, uint8_t* q) {
  const RowQuant p = ChooseRowQuant(row, k, avx512);
  if (avx512) {
    QuantizeRowAvx512(row, k, 1.f / p.scale, p.zero, q);
    return p;
  }
  const float inv = 1.f / p.scale;
  for (int64_t i = 0; i < k; ++i) {
    const float v = RoundedProduct(row[i], inv) + p.zero;
    q[i] = static_cast<uint8_t>(v > 0.f ? (v < 255.f ? v : 255.f) : 0.f);
  }
  return p;
}

// A quantized row's inputs as Int8GemmAvx2 takes them: each step's x0..x3
// as the words x0 | x2 << 16 and x1 | x3 << 16 (steps * 4 bytes of q).
void PairInputs(const uint8_t* q, int64_t steps, uint32_t* pairs) {
  for (int64_t s = 0; s < steps; ++s) {
    const uint8_t* x = q + 4 * s;
    pairs[2 * s] = x[0] | static_cast<uint32_t>(x[2]) << 16;
    pairs[2 * s + 1] = x[1] | static_cast<uint32_t>(x[3]) << 16;
  }
}

// Quantizes each row of x [rows, k]: into `q` (uint8, the int8 kernels'
// path; rows ldq bytes apart, ldq >= Int8VnniRowStride(k), zero past k)
// when it is not null, and then, if `pairs` is not null, paired for the
// AVX2 kernel (PairInputs, rows ldp words apart); else as the dequantized
// values (q - zero) * scale into `dequantized` (the fallback's); the row
// parameters into `params`.
void QuantizeRows(const CpuContext& ctx, const float* x, int64_t rows, int64_t k, uint8_t* q,
                  int64_t ldq, uint32_t* pairs, int64_t ldp, float* dequantized, RowQuant* params) {
  const CpuFeatures& cpu = GetCpuFeatures();
  const bool avx512 = cpu.avx512f && cpu.avx512bw;
  const int threads = rows * k >= (1 << 16) ? ctx.num_threads() : 1;
  InParallel(threads, [&](int64_t t, int64_t nt) {
    const Share share = ShareOf(rows, t, nt);
    for (int64_t m = share.begin; m < share.end; ++m) {
      const float* row = x + m * k;
      if (q) {
        params[m] = QuantizeRow(row, k, avx512, q + m * ldq);
        std::memset(q + m * ldq + k, 0, ldq - k);
        if (pairs) PairInputs(q + m * ldq, Int8VnniSteps(k), pairs + m * ldp);
        continue;
      }
      const RowQuant p = ChooseRowQuant(row, k, /*avx512=*/false);
      params[m] = p;
      const float inv = 1.f / p.scale;
      for (int64_t i = 0; i < k; ++i) {
        const float v = std::clamp(RoundedProduct(row[i], inv) + p.zero, 0.f, 255.f);
        dequantized[m * k + i] = (v - p.zero) * p.scale;
      }
    }
  });
}

// Symmetric per-output-channel int8: weight row n -> q[n, :], scale[n].
// `weight` may sit at any address (a legacy checkpoint mapped at an odd
// offset): each row is copied out before it is read as floats.
void QuantizeWeights(const float* weight, int64_t out_features, int64_t in_features,
                     std::vector<int8_t>* q, std::vector<float>* scale) {
  q->resize(out_features * in_features);
  scale->resize(out_features);
  std::vector<float> row_copy(in_features);
  const float* row = row_copy.data();
  for (int64_t n = 0; n < out_features; ++n) {
    std::memcpy(row_copy.data(),
                reinterpret_cast<const char*>(weight) + n * in_features * sizeof(float),
                in_features * sizeof(float));
    float amax = 0.f;
    for (int64_t i = 0; i < in_features; ++i) amax = std::max(amax, std::fabs(row[i]));
    // A row of zeros, or of values so small that amax / 127 is no normal
    // float (amax under 127 x FLT_MIN, 1.5e-36; under 8.9e-44 the scale
    // rounded to 0, and 0 / 0 made NaN), or a row holding an infinity:
    // scale 1, and the row's values round to 0 (an infinity to +-127).
    float s = amax / 127.f;
    if (!(s >= std::numeric_limits<float>::min()) || !std::isfinite(s)) s = 1.f;
    (*scale)[n] = s;
    for (int64_t i = 0; i < in_features; ++i) {
      const float v = std::nearbyint(row[i] / s);
      // NaN (a NaN weight) to 0: converting it to an integer is undefined.
      (*q)[n * in_features + i] = static_cast<int8_t>(v == v ? std::clamp(v, -127.f, 127.f) : 0.f);
    }
  }
}

// GELU over `count` values of a bf16 GEMM's output at y (bf16 when bf16_out,
// else fp32, then rounded to bf16 first), split between the threads.
void GeluOfBf16(const CpuContext& ctx, void* y, int64_t count, bool bf16_out) {
  SplitBetweenThreads(ctx, count, [&](int64_t begin, int64_t end) {
    if (bf16_out) {
      GeluBf16Avx512(static_cast<uint16_t*>(y) + begin, end - begin);
    } else {
      GeluF32Avx512(static_cast<float*>(y) + begin, end - begin, /*round_to_bf16=*/true);
    }
  });
}

using WideLayout = CpuPackedWeight::WideLayout;

// The layout of oneDNN's fp32 weights `desc` [k, n] as a WideLayout into
// which AVX-512's bf16 copy widens (AVX2's: PackWeightCpu).
WideLayout WideLayoutOf(const memory::desc& desc, int64_t n, int64_t k) {
  const memory::dims dims = {k, n};
  if (desc == memory::desc(dims, Dt::f32, Tag::BA16a64b)) return WideLayout::kBlocked;
  if (desc == memory::desc(dims, Dt::f32, Tag::ab)) return WideLayout::kPlain;
  return WideLayout::kNone;
}

// Column groups [group_begin, group_end) of the bf16 weight `packed` [n, k]
// widened to fp32, in their places in `out`, the whole fp32 weight in
// `layout` (BA16a64b, ab or ba over [k, n], WideLayoutOf): from
// PackFewRowsBf16's layout into the first two, from PackBf16Columns' into
// ba. Exact: a bf16 value is the high half of its fp32 one; BA16a64b's
// padding (inputs up to a multiple of 16, columns up to one of 64) is the
// copy's zeros.
void WidenFewRowsBf16(const uint16_t* packed, int64_t n, int64_t k, WideLayout layout,
                      int64_t group_begin, int64_t group_end, float* out) {
  constexpr int64_t kCols = kFewRowsGroupColumns;
  if (layout == WideLayout::kColumns) {
    WidenBf16ColumnsAvx2(packed, k, group_begin * kCols, std::min(n, group_end * kCols), out);
    return;
  }
  const bool blocked = layout == WideLayout::kBlocked;
  const int64_t pairs = FewRowsBf16Inputs(k) / 2;
  const int64_t inputs = blocked ? FewRowsF32Inputs(k) : k;  // rows of the fp32 weight
  const int64_t stride = blocked ? kCols : n;                // between rows
  for (int64_t g = group_begin; g < group_end; ++g) {
    const uint16_t* group = packed + g * pairs * kCols * 2;
    float* dst = out + g * (blocked ? inputs * kCols : kCols);
    const int64_t cols = blocked ? kCols : std::min(kCols, n - g * kCols);
    for (int64_t i = 0; i < inputs; i += 2) {
      WidenBFloat16Pairs(group + i * kCols, cols, dst + i * stride,
                         i + 1 < inputs ? dst + (i + 1) * stride : nullptr);
    }
  }
}

// This thread's scratch of at least `bytes`, one buffer per slot, 4 KiB
// aligned as oneDNN's own weights are: valid until the same thread asks
// that slot for more.
template <int kSlot>
void* AlignedScratch(size_t bytes) {
  constexpr size_t kAlign = 4096;
  thread_local std::unique_ptr<char[], CpuPackedWeight::FreeBytes> buffer;
  thread_local size_t size = 0;
  if (size < bytes) {
    const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    char* grown = static_cast<char*>(std::aligned_alloc(kAlign, rounded));
    if (grown == nullptr) throw std::bad_alloc();  // the old buffer stays, and its size
    buffer.reset(grown);
    size = rounded;
  }
  return buffer.get();
}

// y = epilogue(src W^T + b) over `rows` rows of src (w's compute type:
// bf16 as uint16 for bf16 GEMMs, else fp32), in row chunks; y is fp32, or
// bf16 (uint16) when bf16_out, which takes no residual.
//
// bf16 GEMMs (bf16_compute) take GELU as PyTorch's bf16 modules do: on
// their output rounded to bf16 (GELU(bf16(x W^T + b)), in fp32 or rounded
// once more for a bf16 y), in a pass over each chunk right after its GEMM
// (gelu_bf16_avx512.h) instead of oneDNN's GELU post-op, which made W1's
// bf16 forward 0.8-1.8% slower (`encoderd bench --workloads W1 --dtypes
// bfloat16`, the two builds alternated 4 and 6 times, 2026-11-30).
void GemmChunks(const CpuContext& ctx, CpuPackedWeight& w, const void* src, int64_t rows,
                Epilogue epilogue, const float* residual, void* y, bool bf16_out,
                const memory* weight = nullptr) {
  auto& be = ctx.backend();
  const int64_t k = w.in_features, n = w.out_features;
  const size_t src_elem = w.bf16_compute ? sizeof(uint16_t) : sizeof(float);
  const size_t dst_elem = bf16_out ? sizeof(uint16_t) : sizeof(float);
  const bool gelu_of_bf16 = w.bf16_compute && epilogue == Epilogue::kGelu;
  for (int64_t r0 = 0; r0 < rows;) {
    const int64_t chunk = ChunkRows(rows - r0, kMaxChunkRows);
    dnnl::matmul prim =
        GetPrimitive(ctx, w, chunk, gelu_of_bf16 ? Epilogue::kNone : epilogue, bf16_out);
    memory src_mem({{chunk, k}, ComputeType(w), Tag::ab}, be.engine,
                   const_cast<char*>(static_cast<const char*>(src) + r0 * k * src_elem));
    char* dst = static_cast<char*>(y) + r0 * n * dst_elem;
    memory dst_mem({{chunk, n}, bf16_out ? Dt::bf16 : Dt::f32, Tag::ab}, be.engine, dst);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, src_mem},
                                            {DNNL_ARG_WEIGHTS, weight ? *weight : w.weight},
                                            {DNNL_ARG_DST, dst_mem}};
    if (w.bias) args.emplace(DNNL_ARG_BIAS, w.bias);
    if (epilogue == Epilogue::kResidual && residual + r0 * n != reinterpret_cast<float*>(dst)) {
      std::memcpy(dst, residual + r0 * n, sizeof(float) * chunk * n);
    }
    prim.execute(be.stream, args);
    if (gelu_of_bf16) {
      be.stream.wait();
      GeluOfBf16(ctx, dst, chunk * n, bf16_out);
    }
    r0 += chunk;
  }
  be.stream.wait();
}

// GemmChunks for a widened_for_gemm() weight: the threads widen their
// shares of its column groups into one scratch of the calling thread (the
// whole fp32 weight in the layout oneDNN chose for it, weight_desc), then
// oneDNN's GEMMs run on that as on an fp32 weight, straight into y; the
// results are the fp32 copy's bit for bit. Until 2026-12-07 each thread
// widened only its share and ran oneDNN on it alone, into a scratch copied
// into y (oneDNN 2.6's brgemm writes no rows further apart than their
// columns): the same time at 64-128 rows and 3-6% longer on the wide
// shapes from 256 rows on (docs/architecture.md, "bf16 weights without
// bf16 instructions").
void GemmWidened(const CpuContext& ctx, CpuPackedWeight& w, const float* src, int64_t rows,
                 Epilogue epilogue, const float* residual, float* y) {
  const int64_t n = w.out_features, k = w.in_features, groups = FewRowsGroups(n);
  float* wide = static_cast<float*>(AlignedScratch<0>(w.weight_desc.get_size()));
  InParallel(ctx.num_threads(), [&](int64_t t, int64_t nt) {
    const Share share = ShareOf(groups, t, nt);
    WidenFewRowsBf16(w.few_rows_bf16.get(), n, k, w.widened, share.begin, share.end, wide);
  });
  const memory weight(w.weight_desc, ctx.backend().engine, wide);
  GemmChunks(ctx, w, src, rows, epilogue, residual, y, /*bf16_out=*/false, &weight);
}

// The int8 kernel's epilogue for w's Linear over rows with these parameters.
Int8Epilogue MakeInt8Epilogue(const CpuPackedWeight& w, const RowQuant* params, Epilogue epilogue,
                              const float* residual) {
  return {w.weight_scale.data(),
          w.weight_comp.data(),
          w.bias ? static_cast<const float*>(w.bias.get_data_handle()) : nullptr,
          params,
          epilogue == Epilogue::kResidual ? residual : nullptr,
          epilogue == Epilogue::kGelu,
          epilogue == Epilogue::kRelu};
}

// Parts into which the int8 kernel splits each column group's rows: enough
// for the (group, part) items to divide evenly between `threads`
// (lcm(groups, threads) / groups), but no part under 48 rows, since each
// part reads the group's weights again. So with few rows (one short
// sequence) the groups alone are split, and threads beyond them wait.
int64_t Int8RowParts(int64_t groups, int64_t threads, int64_t rows) {
  constexpr int64_t kMinPartRows = 48;
  const int64_t even = threads / std::gcd(groups, threads);
  return std::clamp<int64_t>(rows / kMinPartRows, 1, even);
}

}  // namespace

// Plain code, for every CPU: the AVX2 kernel reads this layout too.
void PackInt8Vnni(const int8_t* q, int64_t n, int64_t k, int8_t* packed) {
  const int64_t steps = Int8VnniSteps(k);
  for (int64_t g = 0; g < Int8VnniGroups(n); ++g) {
    for (int64_t s = 0; s < steps; ++s) {
      int8_t* out = packed + (g * steps + s) * 4 * kInt8GroupColumns;
      for (int64_t c = 0; c < kInt8GroupColumns; ++c) {
        const int64_t col = g * kInt8GroupColumns + c;
        for (int64_t i = 0; i < 4; ++i) {
          const int64_t in = 4 * s + i;
          out[4 * c + i] = col < n && in < k ? q[col * k + in] : 0;
        }
      }
    }
  }
}

namespace {

// Whether the int8 Linear runs on the VNNI kernel; otherwise, with int8
// weights packed (int8_compute), on the AVX2 one.
bool Int8Vnni(const CpuFeatures& cpu) { return cpu.avx512f && cpu.avx512bw && cpu.avx512_vnni; }

// The int8 inputs of rows [0, rows): uint8 rows (QuantizeRows' layout) for
// the VNNI kernel, or their pairs for the AVX2 one (pairs not null).
struct Int8Inputs {
  const uint8_t* q;
  int64_t ldq;
  const uint32_t* pairs;
  int64_t ldp;
  Int8Inputs From(int64_t r0) const {
    return {q + r0 * ldq, ldq, pairs ? pairs + r0 * ldp : nullptr, ldp};
  }
};

// y [rows, n] = the int8 Linear of the inputs' rows [0, rows) with their
// parameters: items of one column group and a part of the rows
// (Int8RowParts) split between the threads.
void Int8Gemm(const CpuContext& ctx, const CpuPackedWeight& w, const Int8Inputs& in, int64_t rows,
              const RowQuant* params, Epilogue epilogue, const float* residual, float* y) {
  const int64_t n = w.out_features, k = w.in_features, groups = Int8VnniGroups(n);
  const Int8Epilogue e = MakeInt8Epilogue(w, params, epilogue, residual);
  const int threads = rows * n * k >= (1 << 16) ? ctx.num_threads() : 1;
  InParallel(threads, [&](int64_t t, int64_t nt) {
    const int64_t row_parts = Int8RowParts(groups, nt, rows);
    const Share share = ShareOf(groups * row_parts, t, nt);
    for (int64_t i = share.begin; i < share.end; ++i) {
      const int64_t g = i / row_parts, part = i % row_parts;
      const int64_t begin = rows * part / row_parts, end = rows * (part + 1) / row_parts;
      if (in.pairs) {
        Int8GemmAvx2(in.pairs, in.ldp, begin, end, w.int8_weight.get(), n, k, g, g + 1, e, y);
      } else {
        Int8GemmVnni(in.q, begin, end, w.int8_weight.get(), n, k, g, g + 1, e, y);
      }
    }
  });
}

// Whether bf16 weights without bf16 instructions get the few-row kernels'
// bf16 copy: where a kernel widens it (AVX-512 F, or AVX2 and FMA).
bool FewRowsBf16AsF32(const CpuFeatures& cpu) { return cpu.avx512f || (cpu.avx2 && cpu.fma); }

// Whether fp32 weights [n, k] go to FewRowsGemmF32Avx2 at a few rows (and
// are packed as it reads them): AVX2 + FMA without AVX-512, and at least
// kFewRowsF32Avx2MinBytes.
bool FewRowsF32Avx2(const CpuFeatures& cpu, DType type, int64_t n, int64_t k) {
  return !cpu.avx512f && cpu.avx2 && cpu.fma && type == DType::kFloat32 &&
         n * k * static_cast<int64_t>(sizeof(float)) >= kFewRowsF32Avx2MinBytes;
}

// Whether the few-row kernels can read w's packed weight: the CPU has their
// instructions and oneDNN chose the layout they read (compared, not
// assumed: another oneDNN may choose another); bf16 inputs come in pairs.
// bf16 weights without AVX512-BF16 have their own copy (few_rows_bf16).
bool FewRowsLayout(const CpuPackedWeight& w) {
  const CpuFeatures& cpu = GetCpuFeatures();
  if (w.type == DType::kInt8) return false;
  if (w.few_rows_bf16) return true;  // packed only where a kernel reads it
  const memory::dims dims = {w.in_features, w.out_features};
  if (!cpu.avx512f) {
    return FewRowsF32Avx2(cpu, w.type, w.out_features, w.in_features) &&
           w.weight_desc == memory::desc(dims, Dt::f32, Tag::ba);
  }
  if (w.bf16_compute) {
    return cpu.avx512bw && cpu.avx512_bf16 && w.in_features % 2 == 0 &&
           w.weight_desc == memory::desc(dims, Dt::bf16, Tag::BA16a64b2a);
  }
  return w.weight_desc == memory::desc(dims, Dt::f32, Tag::BA16a64b);
}

// The most rows w's few-row kernel takes: up to kFewRowsMax in one call,
// more (a bf16 weight widened in registers, on AVX-512 or AVX2) in blocks
// of up to kFewRowsMax rows a column group at a time (LinearFewRows).
int64_t FewRowsLimit(const CpuPackedWeight& w) {
  const CpuFeatures& cpu = GetCpuFeatures();
  if (FewRowsF32Avx2(cpu, w.type, w.out_features, w.in_features)) return kFewRowsF32Avx2MaxRows;
  if (w.few_rows_bf16 && !w.bf16_compute) {
    return cpu.avx512f ? kFewRowsBf16AsF32MaxRows : kFewRowsBf16AsF32Avx2MaxRows;
  }
  return kFewRowsMax;
}

// The weight w [n, k] (torch's layout) in bf16 (ConvertFloatToBFloat16's
// rounding) in the few-row kernels' bf16 layout (few_rows_gemm_avx512.h:
// groups of 64 columns, inputs in pairs, zero padding): 64-byte aligned.
std::unique_ptr<uint16_t[], CpuPackedWeight::FreeBytes> PackFewRowsBf16(const float* w, int64_t n,
                                                                        int64_t k) {
  const int64_t pairs = FewRowsBf16Inputs(k) / 2;
  const size_t bytes = static_cast<size_t>(FewRowsBf16PackedBytes(n, k));
  std::unique_ptr<uint16_t[], CpuPackedWeight::FreeBytes> packed(
      static_cast<uint16_t*>(std::aligned_alloc(64, bytes)));
  if (!packed) throw std::bad_alloc();
  std::memset(packed.get(), 0, bytes);
  std::vector<uint16_t> row(k);
  for (int64_t col = 0; col < n; ++col) {
    ConvertFloatToBFloat16(w + col * k, row.data(), k);
    const int64_t g = col / kFewRowsGroupColumns, j = col % kFewRowsGroupColumns;
    uint16_t* group = packed.get() + g * pairs * kFewRowsGroupColumns * 2;
    for (int64_t i = 0; i < k; ++i)
      group[((i / 2) * kFewRowsGroupColumns + j) * 2 + i % 2] = row[i];
  }
  return packed;
}

// The weight w [n, k] in bf16 in the AVX2 kernel's layout
// (few_rows_gemm_avx512.h: [n][k16], each 16 inputs as 0-3, 8-11, 4-7,
// 12-15, zeros past k): 64-byte aligned.
std::unique_ptr<uint16_t[], CpuPackedWeight::FreeBytes> PackBf16Columns(const float* w, int64_t n,
                                                                        int64_t k) {
  const int64_t stride = FewRowsBf16ColumnsInputs(k);
  const size_t bytes = static_cast<size_t>(FewRowsBf16ColumnsBytes(n, k));
  std::unique_ptr<uint16_t[], CpuPackedWeight::FreeBytes> packed(
      static_cast<uint16_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
  if (!packed) throw std::bad_alloc();
  std::memset(packed.get(), 0, bytes);
  std::vector<uint16_t> row(k);
  for (int64_t col = 0; col < n; ++col) {
    ConvertFloatToBFloat16(w + col * k, row.data(), k);
    uint16_t* column = packed.get() + col * stride;
    for (int64_t i = 0; i < k; ++i) {
      // Input j of its 16 goes to place (j % 8 < 4 ? 0 : 8) + 4 * (j / 8) + j % 4.
      const int64_t j = i % 16;
      column[i - j + (j % 8 < 4 ? 0 : 8) + 4 * (j / 8) + j % 4] = row[i];
    }
  }
  return packed;
}

// LinearFewRows' kernel over the column groups [begin, end) of y.
void RunFewRowsKernel(const CpuPackedWeight& w, const void* src, int64_t rows, int64_t ldx,
                      const void* packed, bool avx512, int64_t begin, int64_t end,
                      const FewRowsEpilogue& e, float* y) {
  const int64_t n = w.out_features, k = w.in_features;
  if (w.bf16_compute) {
    FewRowsGemmBf16(static_cast<const uint16_t*>(src), rows, ldx,
                    static_cast<const uint16_t*>(packed), n, k, begin, end, e, y);
  } else if (w.few_rows_bf16 && avx512) {
    FewRowsGemmBf16AsF32(static_cast<const float*>(src), rows, ldx, w.few_rows_bf16.get(), n, k,
                         begin, end, e, y);
  } else if (w.few_rows_bf16) {
    FewRowsGemmBf16ColumnsAvx2(static_cast<const float*>(src), rows, ldx, w.few_rows_bf16.get(), n,
                               k, begin, end, e, y);
  } else if (avx512) {
    FewRowsGemmF32(static_cast<const float*>(src), rows, ldx, static_cast<const float*>(packed), n,
                   k, begin, end, e, y);
  } else {
    FewRowsGemmF32Avx2(static_cast<const float*>(src), rows, ldx, static_cast<const float*>(packed),
                       n, k, begin, end, e, y);
  }
}

// y = epilogue(x W^T + b) for rows <= FewRowsLimit(w) on the few-row kernels:
// the column groups claimed by the threads one at a time (ClaimedShares:
// each thread its own range in order, then the back half of another's),
// each weight read once; over kFewRowsMax rows, each claimed group runs
// blocks of up to kFewRowsMax rows (as few as hold them, of sizes within
// one of each other) while its weights are in cache. x16:
// for a bf16_compute weight, bf16 rows in place of x, copied as they are.
void LinearFewRows(const CpuContext& ctx, const CpuPackedWeight& w, const float* x, int64_t rows,
                   Epilogue epilogue, const float* residual, float* y,
                   const uint16_t* x16 = nullptr) {
  const int64_t n = w.out_features, k = w.in_features, groups = FewRowsGroups(n);
  const FewRowsEpilogue e{w.bias ? static_cast<const float*>(w.bias.get_data_handle()) : nullptr,
                          epilogue == Epilogue::kResidual ? residual : nullptr,
                          epilogue == Epilogue::kGelu, epilogue == Epilogue::kRelu,
                          /*gelu_of_bf16=*/w.bf16_compute};
  // The rows copied FewRowsStride apart (few_rows_gemm_avx512.h), and
  // rounded to bf16 for bf16 weights: as bf16 values for the bf16 kernel,
  // as fp32 ones for the fp32 kernel where the CPU lacks AVX512-BF16.
  const size_t elem = w.bf16_compute ? sizeof(uint16_t) : sizeof(float);
  const int64_t ldx = FewRowsStride(k, elem);
  void* src = w.bf16_compute ? static_cast<void*>(Scratch<uint16_t>(rows * ldx))
                             : static_cast<void*>(Scratch<float>(rows * ldx));
  for (int64_t m = 0; m < rows; ++m) {
    if (w.bf16_compute && x16) {
      std::memcpy(static_cast<uint16_t*>(src) + m * ldx, x16 + m * k, k * sizeof(uint16_t));
    } else if (w.bf16_compute) {
      ConvertFloatToBFloat16(x + m * k, static_cast<uint16_t*>(src) + m * ldx, k);
    } else if (w.type == DType::kBFloat16) {
      float* row = static_cast<float*>(src) + m * ldx;
      RoundToBFloat16(x + m * k, row, k);
      // The last pair's second input (ldx > k): -0, whose products leave
      // the sums as the fp32 kernel makes them (AVX-512's bf16 layout,
      // few_rows_gemm_avx512.h; AVX2's kernel reads no input past k).
      if (k % 2 == 1) row[k] = -0.f;
    } else {
      std::memcpy(static_cast<float*>(src) + m * ldx, x + m * k, k * sizeof(float));
    }
  }
  const void* packed = w.few_rows_bf16 ? nullptr : w.weight.get_data_handle();
  const bool avx512 = GetCpuFeatures().avx512f;
  const int64_t blocks = (rows + kFewRowsMax - 1) / kFewRowsMax;
  const auto run = [&](int64_t group_begin, int64_t group_end) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t r0 = rows * b / blocks, r1 = rows * (b + 1) / blocks;
      FewRowsEpilogue block = e;
      if (block.residual) block.residual += r0 * n;
      RunFewRowsKernel(w, static_cast<const char*>(src) + r0 * ldx * elem, r1 - r0, ldx, packed,
                       avx512, group_begin, group_end, block, y + r0 * n);
    }
  };
  const int threads = rows * n * k >= (1 << 16) ? ctx.num_threads() : 1;
  if (threads <= 1) {
    run(0, groups);
    return;
  }
  ClaimedShares claims(groups, threads);
  InParallel(threads, [&](int64_t t, int64_t /*nt*/) {
    for (int64_t g; claims.Next(t, &g);) run(g, g + 1);
  });
}

void LinearInt8(const CpuContext& ctx, const CpuPackedWeight& w, const float* x, int64_t rows,
                Epilogue epilogue, const float* residual, float* y) {
  const int64_t k = w.in_features, n = w.out_features;
  const bool vnni = Int8Vnni(GetCpuFeatures());
  const bool few_rows = vnni && rows <= kFewRowsMax;
  const int64_t ldq = few_rows ? FewRowsStride(Int8VnniRowStride(k), 1) : Int8VnniRowStride(k);
  const int64_t ldp = 2 * Int8VnniSteps(k);
  uint8_t* q = Scratch<uint8_t>(rows * ldq);
  uint32_t* pairs = vnni ? nullptr : Scratch<uint32_t>(rows * ldp);
  RowQuant* params = Scratch<RowQuant>(rows);
  QuantizeRows(ctx, x, rows, k, q, ldq, pairs, ldp, nullptr, params);
  const Int8Inputs in{q, ldq, pairs, ldp};
  if (few_rows) {
    // Every row in one tile, the column groups claimed by the threads
    // (ClaimedShares), as LinearFewRows claims them.
    const Int8Epilogue e = MakeInt8Epilogue(w, params, epilogue, residual);
    const int64_t groups = Int8VnniGroups(n);
    const int threads = rows * n * k >= (1 << 16) ? ctx.num_threads() : 1;
    if (threads <= 1) {
      Int8GemmVnniFewRows(q, rows, ldq, w.int8_weight.get(), n, k, 0, groups, e, y);
      return;
    }
    ClaimedShares claims(groups, threads);
    InParallel(threads, [&](int64_t t, int64_t /*nt*/) {
      for (int64_t g; claims.Next(t, &g);) {
        Int8GemmVnniFewRows(q, rows, ldq, w.int8_weight.get(), n, k, g, g + 1, e, y);
      }
    });
    return;
  }
  for (int64_t r0 = 0; r0 < rows; r0 += kChunkRows) {
    const int64_t chunk = std::min(kChunkRows, rows - r0);
    Int8Gemm(ctx, w, in.From(r0), chunk, params + r0, epilogue,
             residual ? residual + r0 * n : nullptr, y + r0 * n);
  }
}

}  // namespace

size_t CpuPackedWeight::bytes() const {
  size_t n = int8_compute ? Int8VnniPackedBytes(out_features, in_features)
             : weight     ? weight.get_desc().get_size()
                          : 0;
  if (bias) n += bias.get_desc().get_size();
  if (few_rows_bf16) n += few_rows_bf16_bytes;
  n += (weight_scale.size() + weight_comp.size()) * sizeof(float);
  return n;
}

std::unique_ptr<PackedWeight::Impl> PackWeightCpu(const CpuContext& ctx, const float* weight,
                                                  const float* bias, int64_t out_features,
                                                  int64_t in_features, DType type) {
  ApplyThreadBudget(ctx);
  auto w = std::make_unique<CpuPackedWeight>();
  w->out_features = out_features;
  w->in_features = in_features;
  w->type = type;
  const CpuFeatures& cpu = GetCpuFeatures();
  w->bf16_compute = type == DType::kBFloat16 && cpu.avx512_bf16 && cpu.avx512bw;
  auto& be = ctx.backend();
  if (bias != nullptr) {
    w->bias = memory({{1, out_features}, Dt::f32, Tag::ab}, be.engine);
    // memcpy: the bias may sit unaligned in a mapped legacy checkpoint.
    std::memcpy(w->bias.get_data_handle(), bias, static_cast<size_t>(out_features) * sizeof(float));
  }
  std::vector<float> rounded;
  if (type == DType::kBFloat16 && !w->bf16_compute) {
    rounded.resize(out_features * in_features);
    RoundToBFloat16(weight, rounded.data(), out_features * in_features);
    weight = rounded.data();
  }
  if (type == DType::kInt8) {
    std::vector<int8_t> q;
    QuantizeWeights(weight, out_features, in_features, &q, &w->weight_scale);
    // The kernel's int32 sums hold k products of up to 255 x 127.
    w->int8_compute = (Int8Vnni(cpu) || (cpu.avx2 && cpu.fma)) &&
                      in_features <= std::numeric_limits<int32_t>::max() / (255 * 127);
    if (w->int8_compute) {
      w->weight_comp.resize(out_features);
      for (int64_t n = 0; n < out_features; ++n) {
        int64_t sum = 0;
        for (int64_t i = 0; i < in_features; ++i) sum += q[n * in_features + i];
        w->weight_comp[n] = w->weight_scale[n] * static_cast<float>(sum);
      }
      // The kernel scales whole groups of 64 columns.
      w->weight_scale.resize(Int8VnniGroups(out_features) * kInt8GroupColumns, 0.f);
      const size_t bytes = Int8VnniPackedBytes(out_features, in_features);
      w->int8_weight.reset(static_cast<int8_t*>(std::aligned_alloc(64, bytes)));
      if (!w->int8_weight) throw std::bad_alloc();
      PackInt8Vnni(q.data(), out_features, in_features, w->int8_weight.get());
      // w->bias is added by the kernel's epilogue.
      return w;
    }
    // The same quantized weights as fp32 values for the fp32 GEMM.
    rounded.resize(out_features * in_features);
    for (int64_t n = 0; n < out_features; ++n) {
      for (int64_t i = 0; i < in_features; ++i)
        rounded[n * in_features + i] = q[n * in_features + i] * w->weight_scale[n];
    }
    weight = rounded.data();
  }
  // oneDNN picks the layout, but for fp32 weights that the AVX2 few-row
  // kernel reads: torch's own [n][k] (`ba` of the [k, n] weight), which
  // oneDNN's AVX2 GEMM runs as fast as its choice (plain `ab`) at many rows
  // and in which a thread's columns are one stretch of memory; and so for
  // bf16 weights on AVX2, widened into it from the AVX2 kernel's copy.
  const bool bf16_columns =
      type == DType::kBFloat16 && !w->bf16_compute && !cpu.avx512f && cpu.avx2 && cpu.fma;
  const bool columns = bf16_columns || FewRowsF32Avx2(cpu, type, out_features, in_features);
  memory::desc chosen({in_features, out_features}, ComputeType(*w), columns ? Tag::ba : Tag::any);
  const auto pd = MakeMatmul(be.engine, *w, kChunkRows, chosen, Epilogue::kNone);
  w->weight_desc = pd.weights_desc();
  if (type == DType::kBFloat16 && !w->bf16_compute && FewRowsBf16AsF32(cpu)) {
    w->few_rows_bf16 = bf16_columns ? PackBf16Columns(weight, out_features, in_features)
                                    : PackFewRowsBf16(weight, out_features, in_features);
    w->few_rows_bf16_bytes = bf16_columns ? FewRowsBf16ColumnsBytes(out_features, in_features)
                                          : FewRowsBf16PackedBytes(out_features, in_features);
    // AVX2's copy widens into the `ba` asked for above. (oneDNN compares no
    // stride of a dimension of 1: at n or k = 1, ab and ba compare equal,
    // and WideLayoutOf would read this copy as the other layout.)
    w->widened = !bf16_columns ? WideLayoutOf(w->weight_desc, out_features, in_features)
                 : w->weight_desc == memory::desc({in_features, out_features}, Dt::f32, Tag::ba)
                     ? WideLayout::kColumns
                     : WideLayout::kNone;
  }
  if (!w->widened_for_gemm()) {
    w->weight = memory(w->weight_desc, be.engine);
    // torch's [out, in] row-major is the matmul's [in, out] weight with tag
    // ba; the reorder also rounds to bf16 (nearest even) for bf16 GEMMs.
    memory user({{in_features, out_features}, Dt::f32, Tag::ba}, be.engine,
                const_cast<float*>(weight));
    dnnl::reorder(user, w->weight).execute(be.stream, user, w->weight);
    be.stream.wait();
  }
  w->few_rows = FewRowsLayout(*w);
  return w;
}

namespace {

// dst = float(src) (widen) or bf16(src) (narrow) over n values.
template <typename From, typename To>
void ConvertValues(const CpuContext& ctx, const From* src, int64_t n, To* dst) {
  SplitBetweenThreads(ctx, n, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<From, uint16_t>) {
      ConvertBFloat16ToFloat(src + begin, dst + begin, end - begin);
    } else {
      ConvertFloatToBFloat16(src + begin, dst + begin, end - begin);
    }
  });
}

// LinearCpu over fp32 x and y.
void LinearFloat(const CpuContext& ctx, const float* x, int64_t rows, CpuPackedWeight& w,
                 Epilogue epilogue, const float* residual, float* y) {
  const int64_t k = w.in_features;
  if (w.int8_compute) {
    LinearInt8(ctx, w, x, rows, epilogue, residual, y);
    return;
  }
  if (w.few_rows && rows <= FewRowsLimit(w)) {
    LinearFewRows(ctx, w, x, rows, epilogue, residual, y);
    return;
  }
  const void* src = x;
  if (w.type == DType::kBFloat16) src = RoundInput(ctx, w, x, rows * k);
  if (w.type == DType::kInt8) {  // int8 without the int8 kernels: the quantized inputs as fp32
    float* dequantized = Scratch<float>(rows * k);
    QuantizeRows(ctx, x, rows, k, nullptr, 0, nullptr, 0, dequantized, Scratch<RowQuant>(rows));
    src = dequantized;
  }
  if (w.widened_for_gemm()) {
    GemmWidened(ctx, w, static_cast<const float*>(src), rows, epilogue, residual, y);
    return;
  }
  GemmChunks(ctx, w, src, rows, epilogue, residual, y, /*bf16_out=*/false);
}

}  // namespace

void LinearCpu(const CpuContext& ctx, DType x_dtype, const void* x, int64_t rows,
               const PackedWeight& weight, Epilogue epilogue, const float* residual, DType y_dtype,
               void* y) {
  ApplyThreadBudget(ctx);
  CpuPackedWeight& w = static_cast<CpuPackedWeight&>(weight.impl());
  const int64_t k = w.in_features, n = w.out_features;
  const bool x16 = x_dtype == DType::kBFloat16, y16 = y_dtype == DType::kBFloat16;
  const bool few_rows = w.few_rows && rows <= FewRowsLimit(w);
  if ((x16 || y16) && (few_rows || !w.bf16_compute)) {
    // Only oneDNN's bf16 GEMMs read and write bf16: elsewhere the fp32
    // call, on x widened (which its rounding to bf16 leaves as it is) and
    // into an fp32 y then rounded; the few-row bf16 kernel copies bf16 rows
    // as they are (the same bits as widened and rounded back).
    float* yf = y16 ? Scratch<float, 2>(rows * n) : static_cast<float*>(y);
    if (x16 && few_rows && w.bf16_compute) {
      LinearFewRows(ctx, w, nullptr, rows, epilogue, residual, yf, static_cast<const uint16_t*>(x));
    } else {
      const float* xf = static_cast<const float*>(x);
      if (x16) {
        float* wide = Scratch<float, 1>(rows * k);
        ConvertValues(ctx, static_cast<const uint16_t*>(x), rows * k, wide);
        xf = wide;
      }
      LinearFloat(ctx, xf, rows, w, epilogue, residual, yf);
    }
    if (y16) ConvertValues(ctx, yf, rows * n, static_cast<uint16_t*>(y));
    return;
  }
  if (x16 || y16) {  // and so bf16_compute, on oneDNN's bf16 GEMMs
    const void* src = x16 ? x : RoundInput(ctx, w, static_cast<const float*>(x), rows * k);
    GemmChunks(ctx, w, src, rows, epilogue, residual, y, y16);
    return;
  }
  LinearFloat(ctx, static_cast<const float*>(x), rows, w, epilogue, residual,
              static_cast<float*>(y));
}

bool LinearRunsOnTeamCpu(const PackedWeight& weight, int64_t rows) {
  const CpuPackedWeight& w = static_cast<const CpuPackedWeight&>(weight.impl());
  // LinearInt8 runs on the int8 kernels at any row count (VNNI's few-row
  // one, the VNNI or AVX2 one in chunks); LinearFewRows on the few-row ones.
  return w.int8_compute || (w.few_rows && rows <= FewRowsLimit(w));
}

bool FeedForwardCpu(const CpuContext& ctx, DType x_dtype, const void* x, int64_t rows,
                    const PackedWeight& w_in, Epilogue activation, const PackedWeight& w_out,
                    float* hidden, float* y, bool add_to_y) {
  CpuPackedWeight& in = static_cast<CpuPackedWeight&>(w_in.impl());
  CpuPackedWeight& out = static_cast<CpuPackedWeight&>(w_out.impl());
  // At a few rows either weight may run on the few-row kernels, which the
  // fused pair (oneDNN for both) would not match bit for bit.
  const bool few_rows = rows <= kFewRowsMax && (in.few_rows || out.few_rows);
  if (in.bf16_compute && out.bf16_compute && !few_rows) {
    // ffn.in stores its output in bf16 (oneDNN rounds to nearest even, as
    // RoundInput would; its GELU too, GemmChunks), which ffn.out reads as
    // is: no fp32 copy of the hidden activations is written, read back and
    // converted. hidden, sized for fp32, holds the bf16 rows. All of x is
    // read before y is written.
    ApplyThreadBudget(ctx);
    const void* x16 =
        x_dtype == DType::kBFloat16
            ? x
            : RoundInput(ctx, in, static_cast<const float*>(x), rows * in.in_features);
    GemmChunks(ctx, in, x16, rows, activation, nullptr, hidden, /*bf16_out=*/true);
    GemmChunks(ctx, out, hidden, rows, add_to_y ? Epilogue::kResidual : Epilogue::kNone,
               add_to_y ? y : nullptr, y, /*bf16_out=*/false);
    return true;
  }
  return false;
}

}  // namespace encoderd::kernels
