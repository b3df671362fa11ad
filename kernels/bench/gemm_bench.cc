// GEMM micro-benchmark for the Linear op: oneDNN (as kernels/linear.h uses it,
// rows chunked onto cached primitives), an exact-M primitive, a runtime-M
// primitive, oneDNN's own bf16 matmul, the int8 Linear (quantization and the
// project's VNNI kernel with its epilogue) and oneDNN's uint8 x int8 matmul
// alone, against OpenBLAS cblas_sgemm + a bias pass, at encoder-layer
// shapes. At M = 10 linear_f32 and linear_bf16 run the project's few-row
// kernels. Every timing in the table repeats a call on the same weights,
// which then sit in cache; at a few rows a real forward streams them from
// memory instead, which the last lines time for each dtype
// (docs/architecture.md, docs/int8.md).
//
//   ./build/kernels/gemm_bench [--threads N] [--seconds S] [--stream-rows M]
//                              [--stream-only 1] [--in-cache-rows 1]
//
// --stream-rows sets the rows of the streamed passes (default 10);
// --stream-only 1 times only them (the table's header, and no rows).
// --in-cache-rows 1 times, in place of the tables, kernels::Linear on one
// thread at 1 to 36 rows of a [256, 768] weight, which stays in cache (768
// KiB in fp32: in L2 where L2 holds it, else in L3, as on Zen 1 with 512
// KiB of L2): the arithmetic of the few-row kernels without the stream
// from memory; and, on a CPU with AVX2 and FMA, FewRowsGemmF32Avx2 alone
// over the weight's first 64-column group, up to 32 rows.
//
// Prints GFLOP/s (2*M*N*K per call, best of repeated timed runs).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <vector>

#include "kernels/bench/best_time.h"
#include "kernels/bench/readers.h"
#include "kernels/cpu/bf16_convert.h"
#include "kernels/cpu/dnnl_backend.h"
#include "kernels/cpu/few_rows_gemm_avx512.h"
#include "kernels/cpu/int8_gemm_avx512.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu_features.h"
#include "kernels/linear.h"

extern "C" void openblas_set_num_threads(int);

namespace {

using encoderd::DType;
using encoderd::Epilogue;
using encoderd::kernels::CpuContext;
using encoderd::kernels::Linear;
using encoderd::kernels::PackedWeight;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double TimeBest(const std::function<void()>& fn, double budget) {
  return encoderd::kernels::bench::BestSeconds(fn, budget, /*min_reps=*/5);
}

struct Shape {
  int64_t n, k;
};

// The best seconds of a call of `a` and of `b`, their calls taking turns
// (after one warm-up call of each) for at least `budget` seconds and 5 calls
// each, so that both see the host's memory as the other does.
std::pair<double, double> TimeBestAlternating(const std::function<void()>& a,
                                              const std::function<void()>& b, double budget) {
  a();
  b();
  double best_a = 1e30, best_b = 1e30, spent = 0;
  for (int reps = 0; spent < budget || reps < 5; ++reps) {
    const auto t0 = Clock::now();
    a();
    const auto t1 = Clock::now();
    b();
    const auto t2 = Clock::now();
    best_a = std::min(best_a, Seconds(t0, t1));
    best_b = std::min(best_b, Seconds(t1, t2));
    spent += Seconds(t0, t2);
  }
  return {best_a, best_b};
}

// The bytes kernels::Linear reads of w at `rows` rows: its int8 kernel's
// weights, the bf16 copy (of the few-row kernels, or widened for oneDNN's
// GEMMs), or oneDNN's packed ones.
std::pair<const char*, size_t> ReadBytes(const PackedWeight& weight, int64_t rows) {
  const auto& w = static_cast<const encoderd::kernels::CpuPackedWeight&>(weight.impl());
  if (w.int8_compute) {
    return {reinterpret_cast<const char*>(w.int8_weight.get()),
            encoderd::kernels::Int8VnniPackedBytes(w.out_features, w.in_features)};
  }
  if (w.few_rows_bf16 && (rows <= encoderd::kernels::kFewRowsMax || w.widened_for_gemm())) {
    return {reinterpret_cast<const char*>(w.few_rows_bf16.get()),
            static_cast<size_t>(w.few_rows_bf16_bytes)};
  }
  return {static_cast<const char*>(w.weight.get_data_handle()), w.weight_desc.get_size()};
}

// Reads `bytes` at p once with the threads of an OpenMP region, each its
// contiguous share of whole 256-byte steps (the last few bytes unread),
// with machine_limits' prefetching reader (AVX-512, else AVX2, else the
// plain loop).
uint64_t ReadWithThreads(const char* p, size_t bytes, int threads) {
  const auto& cpu = encoderd::kernels::GetCpuFeatures();
  const size_t steps = bytes / 256;
  uint64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    const size_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const auto* words = reinterpret_cast<const uint64_t*>(p + steps * t / nt * 256);
    const size_t n = (steps * (t + 1) / nt - steps * t / nt) * 32;
    total += cpu.avx512f ? encoderd::kernels::bench::ReadAvx512<true>(words, n)
             : cpu.avx2  ? encoderd::kernels::bench::ReadAvx2<true>(words, n)
                         : encoderd::kernels::bench::ReadScalar(words, n);
  }
  return total;
}

// --in-cache-rows: kernels::Linear on one thread by row count, fp32 and
// bf16 (and int8), on a [256, 768] weight repeated until the budget is spent;
// and, where the CPU has AVX2 and FMA, the AVX2 fp32 few-row kernel alone
// (FewRowsGemmF32Avx2, which kernels::Linear gives only weights of
// kFewRowsF32Avx2MinBytes or more on CPUs without AVX-512) over the
// weight's first 64-column group, 192 KiB.
int InCacheRows(double budget) {
  const int64_t n = 256, k = 768;
  CpuContext ctx(1);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> w(n * k), x(36 * k), y(36 * n);
  for (float& v : w) v = dist(rng);
  for (float& v : x) v = dist(rng);
  const auto& cpu = encoderd::kernels::GetCpuFeatures();
  const bool avx2 = cpu.avx2 && cpu.fma;
  std::printf(
      "kernels::Linear on one thread, a [%ld, %ld] weight in cache, GFLOP/s (best of repeated "
      "calls; few = the few-row kernels run it); fp32 avx2 = FewRowsGemmF32Avx2 alone over its "
      "first %ld columns (-: no AVX2 and FMA, or over 32 rows)\n%5s %12s %12s %12s %10s\n",
      n, k, encoderd::kernels::kFewRowsGroupColumns, "rows", "fp32", "bf16", "int8", "fp32 avx2");
  std::unique_ptr<PackedWeight> packed[3];
  const DType types[3] = {DType::kFloat32, DType::kBFloat16, DType::kInt8};
  for (int i = 0; i < 3; ++i)
    packed[i] = PackedWeight::Pack(ctx, w.data(), nullptr, n, k, types[i]);
  for (const int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 18, 24, 36}) {
    std::printf("%5ld", rows);
    for (int i = 0; i < 3; ++i) {
      const double s = TimeBest(
          [&] {
            Linear(ctx, DType::kFloat32, x.data(), rows, *packed[i], Epilogue::kNone, nullptr,
                   y.data());
          },
          budget);
      std::printf(" %7.1f %-4s", 2.0 * rows * n * k / s * 1e-9,
                  encoderd::kernels::LinearRunsOnTeam(*packed[i], rows) ? "few" : "");
    }
    if (avx2 && rows <= encoderd::kernels::kFewRowsF32Avx2MaxRows) {
      // w is [n][k], the kernel's layout; the rows k floats apart (3 KiB,
      // off multiples of 4 KiB as LinearFewRows keeps them).
      const encoderd::kernels::FewRowsEpilogue none{nullptr, nullptr, false, false};
      const double s = TimeBest(
          [&] {
            encoderd::kernels::FewRowsGemmF32Avx2(x.data(), rows, k, w.data(), n, k, 0, 1, none,
                                                  y.data());
          },
          budget);
      std::printf(" %10.1f", 2.0 * rows * encoderd::kernels::kFewRowsGroupColumns * k / s * 1e-9);
    } else {
      std::printf(" %10s", "-");
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = omp_get_num_procs();
  double budget = 0.5;
  int64_t stream_rows = 10;
  bool stream_only = false, in_cache_rows = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--in-cache-rows")) in_cache_rows = std::atoi(argv[i + 1]) != 0;
    if (!std::strcmp(argv[i], "--stream-only")) stream_only = std::atoi(argv[i + 1]) != 0;
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seconds")) budget = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--stream-rows")) stream_rows = std::atoll(argv[i + 1]);
  }
  if (stream_rows < 1) {
    std::fprintf(stderr, "--stream-rows: at least 1\n");
    return 2;
  }
  if (in_cache_rows) return InCacheRows(budget);
  const std::vector<int64_t> rows = {10, 512, 4500};
  const std::vector<Shape> shapes = {{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
  };
  CpuContext ctx(threads);
  std::printf("threads=%d (OpenMP for oneDNN, pthreads for OpenBLAS), GFLOP/s best-of\n", threads);
  std::printf(
      "columns: openblas = cblas_sgemm + bias pass; linear_f32 / linear_bf16 = kernels::Linear\n"
      "(oneDNN brgemm, %s bf16 instructions); exact = one oneDNN primitive of exactly M rows;\n"
      "rt_M = one primitive with a runtime row count; dnnl_bf16 = oneDNN bf16 matmul (0\n"
      "where oneDNN has none on this CPU);\n"
      "linear_int8 = kernels::Linear with int8 weights (rows quantized, GEMM, epilogue);\n"
      "dnnl_u8s8 = oneDNN's uint8 x int8 matmul alone (GOP/s);\n"
      "jit_ms = time to create a new exact-size primitive\n",
      encoderd::kernels::GetCpuFeatures().avx512_bf16 ? "with" : "no");
  std::printf("%5s %5s %5s | %8s %10s %8s %8s %11s %9s %11s %9s | %7s\n", "M", "N", "K", "openblas",
              "linear_f32", "exact", "rt_M", "linear_bf16", "dnnl_bf16", "linear_int8", "dnnl_u8s8",
              "jit_ms");
  openblas_set_num_threads(threads);
  auto& be = ctx.backend();
  using dnnl::memory;
  using Dt = memory::data_type;
  using Tag = memory::format_tag;
  auto run = [&](const dnnl::matmul& prim, const memory& wm, const memory& bm, const void* x,
                 Dt xdt, int64_t m, const Shape& s, float* y) {
    memory src({{m, s.k}, xdt, Tag::ab}, be.engine, const_cast<void*>(x));
    memory dst({{m, s.n}, Dt::f32, Tag::ab}, be.engine, y);
    prim.execute(
        be.stream,
        {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, dst}});
    be.stream.wait();
  };
  auto packed = [&](const memory::desc& md, const std::vector<float>& w, const Shape& s) {
    memory out(md, be.engine);
    memory user({{s.k, s.n}, Dt::f32, Tag::ba}, be.engine, const_cast<float*>(w.data()));
    dnnl::reorder(user, out).execute(be.stream, user, out);
    be.stream.wait();
    return out;
  };
  // OpenBLAS's pthreads spin for a long time after each call and would steal
  // the cores from OpenMP: all oneDNN timings run first, OpenBLAS's last.
  struct Result {
    int64_t m;
    Shape s;
    std::vector<float> w, b;
    double g[9];
  };
  std::vector<Result> results;
  for (const Shape& s : stream_only ? std::vector<Shape>{} : shapes) {
    const auto w = random(s.n * s.k), b = random(s.n);
    const auto pf32 = PackedWeight::Pack(ctx, w.data(), b.data(), s.n, s.k, DType::kFloat32);
    const auto pbf16 = PackedWeight::Pack(ctx, w.data(), b.data(), s.n, s.k, DType::kBFloat16);
    const auto pint8 = PackedWeight::Pack(ctx, w.data(), b.data(), s.n, s.k, DType::kInt8);
    encoderd::kernels::ApplyThreadBudget(ctx);
    memory::desc bias_md({1, s.n}, Dt::f32, Tag::ab);
    memory bias_mem(bias_md, be.engine, const_cast<float*>(b.data()));
    // Runtime-M primitive, weights in the layout it asks for.
    const auto rt = DNNL_RUNTIME_DIM_VAL;
    dnnl::matmul::primitive_desc rt_pd(
        dnnl::matmul::desc({{rt, s.k}, Dt::f32, Tag::ab}, {{s.k, s.n}, Dt::f32, Tag::any}, bias_md,
                           {{rt, s.n}, Dt::f32, Tag::ab}),
        be.engine);
    dnnl::matmul rt_prim(rt_pd);
    const memory rt_w = packed(rt_pd.weights_desc(), w, s);

    for (int64_t m : rows) {
      const auto x = random(m * s.k);
      std::vector<uint16_t> xb(m * s.k);
      encoderd::kernels::ConvertFloatToBFloat16(x.data(), xb.data(), m * s.k);
      std::vector<float> y(m * s.n);
      const double flop = 2.0 * m * s.n * s.k;
      auto gflops = [&](const std::function<void()>& fn) {
        return flop / TimeBest(fn, budget) * 1e-9;
      };
      const double g_f32 = gflops([&] {
        Linear(ctx, DType::kFloat32, x.data(), m, *pf32, Epilogue::kNone, nullptr, y.data());
      });
      // Exact-M primitive on the same packed weights (possibly from oneDNN's
      // primitive cache); JIT time measured on a size nothing else used (M+1).
      const auto& impl = static_cast<const encoderd::kernels::CpuPackedWeight&>(pf32->impl());
      auto make_exact = [&](int64_t rows_) {
        return dnnl::matmul(dnnl::matmul::primitive_desc(
            dnnl::matmul::desc({{rows_, s.k}, Dt::f32, Tag::ab}, impl.weight_desc, bias_md,
                               {{rows_, s.n}, Dt::f32, Tag::ab}),
            be.engine));
      };
      const auto t0 = Clock::now();
      make_exact(m + 1);
      const double jit_ms = Seconds(t0, Clock::now()) * 1e3;
      const dnnl::matmul exact = make_exact(m);
      const double g_exact =
          gflops([&] { run(exact, impl.weight, bias_mem, x.data(), Dt::f32, m, s, y.data()); });
      const double g_rt =
          gflops([&] { run(rt_prim, rt_w, bias_mem, x.data(), Dt::f32, m, s, y.data()); });
      const double g_lbf16 = gflops([&] {
        Linear(ctx, DType::kFloat32, x.data(), m, *pbf16, Epilogue::kNone, nullptr, y.data());
      });
      double g_bf16 = 0;  // stays 0 where oneDNN has no bf16 matmul (AVX2 CPUs)
      try {
        dnnl::matmul::primitive_desc bf_pd(
            dnnl::matmul::desc({{m, s.k}, Dt::bf16, Tag::ab}, {{s.k, s.n}, Dt::bf16, Tag::any},
                               bias_md, {{m, s.n}, Dt::f32, Tag::ab}),
            be.engine);
        dnnl::matmul bf_prim(bf_pd);
        const memory bf_w = packed(bf_pd.weights_desc(), w, s);
        g_bf16 = gflops([&] { run(bf_prim, bf_w, bias_mem, xb.data(), Dt::bf16, m, s, y.data()); });
      } catch (const dnnl::error&) {
      }
      const double g_lint8 = gflops([&] {
        Linear(ctx, DType::kFloat32, x.data(), m, *pint8, Epilogue::kNone, nullptr, y.data());
      });
      // oneDNN's uint8 x int8 -> fp32 with per-column output scales, the GEMM
      // the int8 Linear used before its own kernel, on the same rows (the
      // values do not change the speed).
      dnnl::primitive_attr i8_attr;
      i8_attr.set_output_scales(1 << 1, std::vector<float>(s.n, 0.01f));
      dnnl::matmul::primitive_desc i8_pd(
          dnnl::matmul::desc({{m, s.k}, Dt::u8, Tag::ab}, {{s.k, s.n}, Dt::s8, Tag::any},
                             {{m, s.n}, Dt::f32, Tag::ab}),
          i8_attr, be.engine);
      dnnl::matmul i8_prim(i8_pd);
      memory i8_w(i8_pd.weights_desc(), be.engine);
      std::memset(i8_w.get_data_handle(), 1, i8_pd.weights_desc().get_size());
      std::vector<uint8_t> xq(m * s.k, 128);
      memory i8_src({{m, s.k}, Dt::u8, Tag::ab}, be.engine, xq.data());
      memory i8_dst({{m, s.n}, Dt::f32, Tag::ab}, be.engine, y.data());
      const double g_u8s8 = gflops([&] {
        i8_prim.execute(be.stream,
                        {{DNNL_ARG_SRC, i8_src}, {DNNL_ARG_WEIGHTS, i8_w}, {DNNL_ARG_DST, i8_dst}});
        be.stream.wait();
      });
      results.push_back(
          {m, s, w, b, {0, g_f32, g_exact, g_rt, g_lbf16, g_bf16, g_lint8, g_u8s8, jit_ms}});
    }
  }
  // Weights streamed from memory: one pass over the weights of 12 BERT-base
  // layers (340 MB in fp32, 170 in bf16, 85 in int8: far beyond the caches)
  // at 10 rows (--stream-rows), the GEMMs of one short sequence's forward. kernels::Linear
  // (the few-row kernels in fp32 and bf16, the int8 kernel) against oneDNN's
  // matmul at exactly as many rows on the same packed weights (int8: oneDNN's
  // uint8 x int8 matmul, weights in the layout it picks for 512 rows, as
  // encoderd packed them when it used oneDNN for int8). Without AVX512-BF16
  // (with ENCODERD_CPU_DISABLE=avx512_bf16, or where the process finds it
  // does not pay: kernels/cpu_features.h) the bf16 line is "bf16 as
  // fp32": kernels::Linear reads the bf16 copy of the weights (up to
  // kFewRowsMax rows; the fp32 ones beyond), oneDNN the fp32 ones.
  const int64_t stream_layers = 12;
  const auto stream_x = random(stream_rows * 3072);
  std::vector<uint16_t> stream_xb(stream_rows * 3072);
  encoderd::kernels::ConvertFloatToBFloat16(stream_x.data(), stream_xb.data(), stream_x.size());
  std::vector<uint8_t> stream_xq(stream_rows * 3072, 128);
  std::vector<float> stream_y(stream_rows * 3072);
  struct Streamed {
    const char* name;
    double bytes, linear_s, read_s, dnnl_bytes, dnnl_s;
  };
  uint64_t read_sink = 0;
  std::vector<Streamed> streamed;
  for (const DType type : {DType::kFloat32, DType::kBFloat16, DType::kInt8}) {
    std::vector<std::unique_ptr<PackedWeight>> weights;
    std::vector<memory> dnnl_w;
    std::vector<dnnl::matmul> dnnl_mm;
    std::vector<Shape> shape;
    const bool bf16 = type == DType::kBFloat16 && encoderd::kernels::GetCpuFeatures().avx512_bf16;
    const bool bf16_as_fp32 = type == DType::kBFloat16 && !bf16;
    const Dt src_dt = type == DType::kInt8 ? Dt::u8 : bf16 ? Dt::bf16 : Dt::f32;
    double bytes = 0, dnnl_bytes = 0;
    for (int64_t l = 0; l < stream_layers; ++l) {
      for (const Shape& s : shapes) {
        const auto w = random(s.n * s.k);
        weights.push_back(PackedWeight::Pack(ctx, w.data(), nullptr, s.n, s.k, type));
        dnnl::primitive_attr attr;
        memory::desc wd;
        if (type == DType::kInt8) {
          attr.set_output_scales(1 << 1, std::vector<float>(s.n, 0.01f));
          wd = dnnl::matmul::primitive_desc(
                   dnnl::matmul::desc({{512, s.k}, Dt::u8, Tag::ab}, {{s.k, s.n}, Dt::s8, Tag::any},
                                      {{512, s.n}, Dt::f32, Tag::ab}),
                   attr, be.engine)
                   .weights_desc();
          memory wm(wd, be.engine);
          std::memset(wm.get_data_handle(), 1, wd.get_size());
          dnnl_w.push_back(wm);
        } else {
          const auto& impl =
              static_cast<const encoderd::kernels::CpuPackedWeight&>(weights.back()->impl());
          wd = impl.weight_desc;
          if (impl.weight) {
            dnnl_w.push_back(impl.weight);
          } else {  // widened_for_gemm(): oneDNN's fp32 weights, for its own pass
            memory wm(wd, be.engine);
            std::memset(wm.get_data_handle(), 0, wd.get_size());
            dnnl_w.push_back(wm);
          }
        }
        dnnl_mm.emplace_back(dnnl::matmul::primitive_desc(
            dnnl::matmul::desc({{stream_rows, s.k}, src_dt, Tag::ab}, wd,
                               {{stream_rows, s.n}, Dt::f32, Tag::ab}),
            attr, be.engine));
        shape.push_back(s);
        const double size = type == DType::kInt8 ? 1 : bf16 ? 2 : 4;
        const auto& impl =
            static_cast<const encoderd::kernels::CpuPackedWeight&>(weights.back()->impl());
        const bool bf16_copy =
            bf16_as_fp32 && impl.few_rows_bf16 &&
            (stream_rows <= encoderd::kernels::kFewRowsMax || impl.widened_for_gemm());
        bytes += static_cast<double>(s.n) * s.k * (bf16_copy ? 2 : size);
        dnnl_bytes += static_cast<double>(s.n) * s.k * size;
      }
    }
    const void* src = type == DType::kInt8 ? static_cast<const void*>(stream_xq.data())
                      : bf16               ? static_cast<const void*>(stream_xb.data())
                                           : static_cast<const void*>(stream_x.data());
    encoderd::kernels::ApplyThreadBudget(ctx);
    // The kernels' pass and a plain read of the same bytes, the same way
    // (one parallel region a weight) take turns: the read is what the
    // memory gave in the same seconds.
    const auto [linear_s, read_s] = TimeBestAlternating(
        [&] {
          for (const auto& w : weights) {
            Linear(ctx, DType::kFloat32, stream_x.data(), stream_rows, *w, Epilogue::kNone, nullptr,
                   stream_y.data());
          }
        },
        [&] {
          for (const auto& w : weights) {
            const auto [p, n] = ReadBytes(*w, stream_rows);
            read_sink += ReadWithThreads(p, n, threads);
          }
        },
        2 * budget);
    const double dnnl_s = TimeBest(
        [&] {
          for (size_t i = 0; i < dnnl_mm.size(); ++i) {
            const Shape& s = shape[i];
            memory x_mem({{stream_rows, s.k}, src_dt, Tag::ab}, be.engine, const_cast<void*>(src));
            memory y_mem({{stream_rows, s.n}, Dt::f32, Tag::ab}, be.engine, stream_y.data());
            dnnl_mm[i].execute(
                be.stream,
                {{DNNL_ARG_SRC, x_mem}, {DNNL_ARG_WEIGHTS, dnnl_w[i]}, {DNNL_ARG_DST, y_mem}});
            be.stream.wait();
          }
        },
        budget);
    streamed.push_back({type == DType::kInt8 ? "int8"
                        : bf16               ? "bf16"
                        : bf16_as_fp32       ? "bf16 as fp32"
                                             : "fp32",
                        bytes, linear_s, read_s, dnnl_bytes, dnnl_s});
  }

  for (Result& r : results) {
    const int64_t m = r.m;
    const Shape s = r.s;
    const auto x = random(m * s.k);
    std::vector<float> y(m * s.n);
    const auto &w = r.w, &b = r.b;
    r.g[0] = 2.0 * m * s.n * s.k * 1e-9 /
             TimeBest(
                 [&] {
                   cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, s.n, s.k, 1.f, x.data(),
                               s.k, w.data(), s.k, 0.f, y.data(), s.n);
                   for (int64_t i = 0; i < m; ++i)
                     for (int64_t j = 0; j < s.n; ++j) y[i * s.n + j] += b[j];
                 },
                 budget);
    std::printf("%5ld %5ld %5ld | %8.1f %10.1f %8.1f %8.1f %11.1f %9.1f %11.1f %9.1f | %7.1f\n", m,
                s.n, s.k, r.g[0], r.g[1], r.g[2], r.g[3], r.g[4], r.g[5], r.g[6], r.g[7], r.g[8]);
  }
  std::printf(
      "\nWeights of %ld BERT-base layers streamed from memory at M = %ld, one pass (best of "
      "repeated passes), ms and GB/s of weights; read = the same bytes read alone, its passes "
      "taking turns with kernels::Linear's:\n",
      stream_layers, stream_rows);
  for (const Streamed& t : streamed) {
    std::printf(
        "  %s (%.0f MB): kernels::Linear %.2f ms = %.1f GB/s (%.2fx read %.2f ms = %.1f GB/s); "
        "oneDNN matmul (%.0f MB) %.2f ms = %.1f GB/s\n",
        t.name, t.bytes * 1e-6, t.linear_s * 1e3, t.bytes / t.linear_s * 1e-9,
        t.linear_s / t.read_s, t.read_s * 1e3, t.bytes / t.read_s * 1e-9, t.dnnl_bytes * 1e-6,
        t.dnnl_s * 1e3, t.dnnl_bytes / t.dnnl_s * 1e-9);
  }
  if (read_sink == 42) std::fputc(' ', stderr);  // keeps the reads
  return 0;
}
