#include "kernels/cpu/linear_cpu.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/bf16_convert.h"
#include "kernels/cpu/dnnl_backend.h"
#include "kernels/cpu_features.h"

namespace encoderd::kernels {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

// Rows are processed in chunks of kChunkRows; the remainder r is split into
// 16 * (r / 16) rows and r % 16 rows. A weight thus needs at most
// 1 + 31 + 15 primitives per epilogue, whatever the batch sizes (a new
// primitive costs 0.3-1.5 ms to create; kernels/bench/gemm_bench compares
// chunked calls with one exact-size primitive).
constexpr int64_t kChunkRows = 512;
constexpr int64_t kRowGranule = 16;

Dt ComputeType(const PackedWeight::Impl& w) { return w.bf16_compute ? Dt::bf16 : Dt::f32; }

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

dnnl::matmul::primitive_desc MakeMatmul(const dnnl::engine& engine, const PackedWeight::Impl& w,
                                        int64_t rows, const memory::desc& weight_desc,
                                        Epilogue epilogue) {
  const int64_t n = w.out_features, k = w.in_features;
  memory::desc src({rows, k}, ComputeType(w), Tag::ab);
  memory::desc dst({rows, n}, Dt::f32, Tag::ab);
  const dnnl::primitive_attr attr = EpilogueAttr(epilogue, rows, n);
  if (w.bias) {
    return dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(src, weight_desc, w.bias.get_desc(), dst), attr, engine);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weight_desc, dst), attr, engine);
}

dnnl::matmul GetPrimitive(const CpuContext& ctx, PackedWeight::Impl& w, int64_t rows,
                          Epilogue epilogue) {
  const auto key = std::make_pair(rows, static_cast<int>(epilogue));
  std::lock_guard<std::mutex> lock(w.mu);
  auto it = w.primitives.find(key);
  if (it != w.primitives.end()) return it->second;
  dnnl::matmul prim(MakeMatmul(ctx.backend().engine, w, rows, w.weight_desc, epilogue));
  w.primitives.emplace(key, prim);
  return prim;
}

// Per-thread scratch for the rounded copy of the input.
template <typename T>
T* Scratch(size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// Rounds x to bf16 into scratch (as uint16 for bf16 GEMMs, as fp32 values
// otherwise) and returns the scratch.
void* RoundInput(const CpuContext& ctx, const PackedWeight::Impl& w, const float* x,
                 int64_t total) {
  void* out = w.bf16_compute ? static_cast<void*>(Scratch<uint16_t>(total))
                             : static_cast<void*>(Scratch<float>(total));
  const int threads = total >= (1 << 16) ? ctx.num_threads() : 1;
#pragma omp parallel num_threads(threads)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t begin = total * t / nt, end = total * (t + 1) / nt;
    if (w.bf16_compute) {
      ConvertFloatToBFloat16(x + begin, static_cast<uint16_t*>(out) + begin, end - begin);
    } else {
      RoundToBFloat16(x + begin, static_cast<float*>(out) + begin, end - begin);
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<PackedWeight::Impl> PackWeightCpu(const CpuContext& ctx, const float* weight,
                                                  const float* bias, int64_t out_features,
                                                  int64_t in_features, DType type) {
  ApplyThreadBudget(ctx);
  auto w = std::make_unique<PackedWeight::Impl>();
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
  memory::desc any({in_features, out_features}, ComputeType(*w), Tag::any);
  const auto pd = MakeMatmul(be.engine, *w, kChunkRows, any, Epilogue::kNone);
  w->weight_desc = pd.weights_desc();
  w->weight = memory(w->weight_desc, be.engine);
  // torch's [out, in] row-major is the matmul's [in, out] weight with tag ba;
  // the reorder also rounds to bf16 (nearest even) for bf16 GEMMs.
  memory user({{in_features, out_features}, Dt::f32, Tag::ba}, be.engine,
              const_cast<float*>(weight));
  dnnl::reorder(user, w->weight).execute(be.stream, user, w->weight);
  be.stream.wait();
  return w;
}

void LinearCpu(const CpuContext& ctx, const float* x, int64_t rows, const PackedWeight& weight,
               Epilogue epilogue, const float* residual, float* y) {
  ApplyThreadBudget(ctx);
  PackedWeight::Impl& w = weight.impl();
  auto& be = ctx.backend();
  const int64_t k = w.in_features, n = w.out_features;
  const Dt src_type = ComputeType(w);
  const size_t src_elem = w.bf16_compute ? sizeof(uint16_t) : sizeof(float);
  const char* src = reinterpret_cast<const char*>(x);
  if (w.type == DType::kBFloat16) src = static_cast<const char*>(RoundInput(ctx, w, x, rows * k));

  for (int64_t r0 = 0; r0 < rows;) {
    const int64_t left = rows - r0;
    const int64_t chunk = left >= kChunkRows    ? kChunkRows
                          : left >= kRowGranule ? left / kRowGranule * kRowGranule
                                                : left;
    dnnl::matmul prim = GetPrimitive(ctx, w, chunk, epilogue);
    memory src_mem({{chunk, k}, src_type, Tag::ab}, be.engine,
                   const_cast<char*>(src + r0 * k * src_elem));
    memory dst_mem({{chunk, n}, Dt::f32, Tag::ab}, be.engine, y + r0 * n);
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, w.weight}, {DNNL_ARG_DST, dst_mem}};
    if (w.bias) args.emplace(DNNL_ARG_BIAS, w.bias);
    if (epilogue == Epilogue::kResidual && residual != y) {
      std::memcpy(y + r0 * n, residual + r0 * n, sizeof(float) * chunk * n);
    }
    prim.execute(be.stream, args);
    r0 += chunk;
  }
  be.stream.wait();
}

}  // namespace encoderd::kernels
