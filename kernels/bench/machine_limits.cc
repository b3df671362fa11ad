// The machine's measured limits, the yardsticks of bench/run_peers.py: oneDNN
// matmul throughput per dtype (fp32, bf16, int8 u8*s8->s32) at large M on the
// BERT-base layer shapes, weights in oneDNN's preferred layout, and memory
// read bandwidth, all with the benchmark's thread count. Prints one JSON
// object; a dtype oneDNN has no matmul for on this CPU (int8 on some AVX2
// CPUs) has "peak_gflops": null and the error. bf16 is timed as encoderd runs
// it: on oneDNN's bf16 GEMMs where the process uses AVX512-BF16
// ("native_instructions": true), else on its fp32 GEMMs. Each shape's
// "gflops" is its best call (the peak is the best shape's), "median_gflops"
// its median call: on a shared host the two differ by a few percent, and a
// forward's GEMMs run at about the median.
//
//   ./build/kernels/machine_limits [--threads N] [--rows M] [--seconds S]
//                                  [--read-only 1] [--dtypes D[,D...]]
// --read-only 1 measures the read bandwidth alone ("gemm" is empty), and
// --dtypes only the GEMMs of those dtypes (float32, bfloat16, int8): the
// readings taken beside each benchmark process (bench/run_peers.py).
// "omp_region_us" is what an empty OpenMP region of 1 and of N threads
// takes (kernels/cpu/parallel.h).
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bench/best_time.h"
#include "kernels/bench/readers.h"
#include "kernels/cpu_features.h"

namespace {

using dnnl::memory;
using Dt = memory::data_type;
using Tag = memory::format_tag;

using encoderd::kernels::bench::BestSeconds;
using encoderd::kernels::bench::CallSeconds;
using encoderd::kernels::bench::ReadAvx2;
using encoderd::kernels::bench::ReadAvx512;
using encoderd::kernels::bench::ReadScalar;
using encoderd::kernels::bench::TimeCalls;

struct Gflops {
  double best, median;
};

// `m` (of data type `type`) filled with values in [-1, 1]: fp32, bf16 (the
// same values truncated), or random bytes for int8 and uint8.
void FillRandom(const dnnl::memory& m, Dt type) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  const size_t bytes = m.get_desc().get_size();
  char* data = static_cast<char*>(m.get_data_handle());
  if (type == Dt::f32) {
    for (size_t i = 0; i + sizeof(float) <= bytes; i += sizeof(float)) {
      const float v = dist(rng);
      std::memcpy(data + i, &v, sizeof(v));
    }
  } else if (type == Dt::bf16) {
    for (size_t i = 0; i + sizeof(uint16_t) <= bytes; i += sizeof(uint16_t)) {
      const float v = dist(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof(bits));
      const uint16_t high = static_cast<uint16_t>(bits >> 16);
      std::memcpy(data + i, &high, sizeof(high));
    }
  } else {
    for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(rng());
  }
}

// GFLOP/s of an M x K by K x N matmul with source/weights of `src`/`wei`:
// its best call and its median one.
Gflops MatmulGflops(dnnl::engine& engine, dnnl::stream& stream, int64_t m, int64_t n, int64_t k,
                    Dt src, Dt wei, Dt dst, double budget) {
  dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc({{m, k}, src, Tag::ab}, {{k, n}, wei, Tag::any}, {{m, n}, dst, Tag::ab}),
      engine);
  memory a(pd.src_desc(), engine), w(pd.weights_desc(), engine), c(pd.dst_desc(), engine);
  // Values in [-1, 1] (bytes of any value for int8), as gemm_bench's: bytes
  // of 1, fp32 values of ~2e-38, once made every product underflow, which
  // some CPUs run slower (microcode assists) and all draw less power on.
  FillRandom(a, src);
  memory w_plain({{k, n}, wei, Tag::ab}, engine);
  FillRandom(w_plain, wei);
  dnnl::reorder(w_plain, w).execute(stream, w_plain, w);
  stream.wait();
  dnnl::matmul prim(pd);
  const CallSeconds s = TimeCalls(
      [&] {
        prim.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, c}});
        stream.wait();
      },
      budget);
  const double gflop = 2.0 * m * n * k / 1e9;
  return {gflop / s.best, gflop / s.median};
}

struct Reader {
  std::string name;
  uint64_t (*read)(const uint64_t*, size_t);
  const uint64_t* data;
  double best_seconds = 1e30;
};

struct FreeBytes {
  void operator()(void* p) const { std::free(p); }
};
using Words = std::unique_ptr<uint64_t[], FreeBytes>;

// KiB of anonymous memory in transparent huge pages in this process.
long AnonHugeKib() {
  std::FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (f == nullptr) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "AnonHugePages: %ld kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib;
}

// Whether this kernel may give transparent huge pages at all: false where
// they are off ("[never]") or it has none.
bool HugePagesPossible() {
  std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f == nullptr) return false;
  char line[128] = {};
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  return read && std::strstr(line, "[never]") == nullptr;
}

// `words` words aligned to 2 MiB (and so to 64 bytes), advised into 2 MiB
// pages (madvise(MADV_HUGEPAGE), which the "madvise" mode of many
// distributions needs) or, without huge_pages, out of them (under the
// "always" mode); each thread first touches the share it will read. Null
// where the kernel refuses the advice for huge pages.
Words AllocateWords(size_t words, bool huge_pages) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = (words * sizeof(uint64_t) + kHuge - 1) / kHuge * kHuge;
  Words data(static_cast<uint64_t*>(std::aligned_alloc(kHuge, bytes)));
  if (!data) throw std::bad_alloc();
  if (::madvise(data.get(), bytes, huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0 &&
      huge_pages) {
    return nullptr;
  }
#pragma omp parallel
  {
    const size_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    for (size_t i = words / 32 * t / nt * 32; i < words / 32 * (t + 1) / nt * 32; ++i) data[i] = i;
  }
  return data;
}

// GB/s of reading `bytes` once with every thread, each its contiguous share,
// by each reader the CPU has, over memory in 4 KiB pages and, where the
// kernel grants them, again over memory in 2 MiB pages (readers named
// "..._2m"; two buffers of `bytes`, 2 GiB at machine_limits' 1 GiB). With 4
// KiB pages the reads walk the page tables for every page; on the 2-vCPU
// EPYC the best reader over 2 MiB pages read 1-18% faster than the best
// over 4 KiB ones in the same runs (10 runs, 2026-12-02). Until 2026-12-02 the one buffer came from
// new[], 16 bytes past a cache line, so that every 64-byte load of the AVX-512 readers spanned two
// lines: the same binary with its reads put 16 bytes off read 48.8-52.3
// GB/s with the AVX-512 reader against 65.0-68.3 aligned, in alternate
// runs. The readers' passes take turns until `budget` seconds have passed
// (so that each sees the host as the others do), and each reader's best
// pass counts. Returns the readers with their GB/s, and sets *huge_pages to
// whether the 2 MiB pages were granted (most of the buffer in them).
std::vector<std::pair<std::string, double>> ReadBandwidth(size_t bytes, double budget,
                                                          bool* huge_pages) {
  const size_t words = bytes / sizeof(uint64_t) / 32 * 32;
  Words small = AllocateWords(words, /*huge_pages=*/false);
  Words huge;
  *huge_pages = false;
  if (HugePagesPossible()) {
    const long before = AnonHugeKib();
    huge = AllocateWords(words, /*huge_pages=*/true);
    *huge_pages =
        huge && before >= 0 && static_cast<double>(AnonHugeKib() - before) * 1024 >= 0.9 * bytes;
  }
  const auto& cpu = encoderd::kernels::GetCpuFeatures();
  std::vector<std::pair<std::string, uint64_t (*)(const uint64_t*, size_t)>> kinds = {
      {"scalar", ReadScalar}};
  if (cpu.avx512f) {
    kinds.push_back({"avx512", ReadAvx512<false>});
    kinds.push_back({"avx512_prefetch", ReadAvx512<true>});
  } else if (cpu.avx2) {
    kinds.push_back({"avx2", ReadAvx2<false>});
    kinds.push_back({"avx2_prefetch", ReadAvx2<true>});
  }
  std::vector<Reader> readers;
  for (const auto& [name, read] : kinds) readers.push_back({name, read, small.get()});
  if (*huge_pages) {
    for (const auto& [name, read] : kinds) readers.push_back({name + "_2m", read, huge.get()});
  } else {
    huge.reset();
  }
  uint64_t sink = 0;
  double spent = 0;
  for (int round = 0; spent < budget || round < 3; ++round) {
    for (Reader& r : readers) {
      const auto t0 = std::chrono::steady_clock::now();
      uint64_t total = 0;
#pragma omp parallel reduction(+ : total)
      {
        const size_t nt = omp_get_num_threads(), t = omp_get_thread_num();
        const size_t begin = words / 32 * t / nt * 32, end = words / 32 * (t + 1) / nt * 32;
        total += r.read(r.data + begin, end - begin);
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      sink += total;
      if (round > 0) r.best_seconds = std::min(r.best_seconds, s);  // round 0 warms up
      spent += s;
    }
  }
  if (sink == 42) std::fputc(' ', stderr);  // keeps the reads
  std::vector<std::pair<std::string, double>> out;
  for (const Reader& r : readers)
    out.emplace_back(r.name, words * sizeof(uint64_t) / r.best_seconds / 1e9);
  return out;
}

// Microseconds an empty OpenMP region of `threads` threads takes in its
// caller, from entering it to leaving it (the median of 51 rounds of 200):
// what each parallel region of the kernels costs beyond its work.
double RegionMicroseconds(int threads) {
  std::vector<double> rounds;
  for (int round = 0; round < 51; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 200; ++i) {
#pragma omp parallel num_threads(threads)
      asm volatile("" ::: "memory");
    }
    rounds.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        200);
  }
  std::nth_element(rounds.begin(), rounds.begin() + 25, rounds.end());
  return rounds[25];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = omp_get_num_procs();
  int64_t rows = 4096;
  double budget = 1.0;
  bool read_only = false;
  std::string dtypes = "float32,bfloat16,int8";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--read-only")) read_only = std::atoi(argv[i + 1]) != 0;
    if (!std::strcmp(argv[i], "--dtypes")) dtypes = argv[i + 1];
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rows")) rows = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seconds")) budget = std::atof(argv[i + 1]);
  }
  omp_set_num_threads(threads);
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const auto& cpu = encoderd::kernels::GetCpuFeatures();
  struct Kind {
    const char* name;
    Dt src, wei, dst;
    bool native;
  };
  const Kind kinds[] = {{"float32", Dt::f32, Dt::f32, Dt::f32, true},
                        // bf16 as encoderd runs it here: on fp32 GEMMs
                        // (of bf16-rounded values) where native bf16 is
                        // off or does not pay (kernels/cpu_features.h).
                        {"bfloat16", cpu.avx512_bf16 ? Dt::bf16 : Dt::f32,
                         cpu.avx512_bf16 ? Dt::bf16 : Dt::f32, Dt::f32, cpu.avx512_bf16},
                        {"int8", Dt::u8, Dt::s8, Dt::s32, cpu.avx512_vnni}};
  const int64_t shapes[][2] = {{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}};  // N, K
  std::printf("{\"threads\": %d, \"rows\": %lld, \"cpu_features\": \"%s\",\n \"gemm\": {", threads,
              static_cast<long long>(rows), encoderd::kernels::DescribeCpuFeatures().c_str());
  const char* separator = "";
  for (size_t i = 0; i < (read_only ? 0 : std::size(kinds)); ++i) {
    const Kind& kind = kinds[i];
    if (("," + dtypes + ",").find(std::string(",") + kind.name + ",") == std::string::npos)
      continue;
    double peak = 0;
    std::string per_shape, error;
    for (const auto& shape : shapes) {
      Gflops g{};
      try {
        g = MatmulGflops(engine, stream, rows, shape[0], shape[1], kind.src, kind.wei, kind.dst,
                         budget);
      } catch (const dnnl::error& e) {  // no implementation of this dtype on this CPU
        error = e.what();
        break;
      }
      peak = std::max(peak, g.best);
      char item[128];
      std::snprintf(item, sizeof item,
                    "%s{\"n\": %lld, \"k\": %lld, \"gflops\": %.1f, \"median_gflops\": %.1f}",
                    per_shape.empty() ? "" : ", ", static_cast<long long>(shape[0]),
                    static_cast<long long>(shape[1]), g.best, g.median);
      per_shape += item;
    }
    if (!error.empty()) {
      std::printf(
          "%s\n  \"%s\": {\"peak_gflops\": null, \"native_instructions\": %s, \"error\": "
          "\"oneDNN: %s\"}",
          separator, kind.name, kind.native ? "true" : "false", error.c_str());
      separator = ",";
      continue;
    }
    std::printf(
        "%s\n  \"%s\": {\"peak_gflops\": %.1f, \"native_instructions\": %s, \"shapes\": [%s]}",
        separator, kind.name, peak, kind.native ? "true" : "false", per_shape.c_str());
    separator = ",";
  }
  bool huge_pages = false;
  const auto readers = ReadBandwidth(size_t{1} << 30, budget, &huge_pages);
  double gbs = 0;
  std::string per_reader;
  for (const auto& [name, reader_gbs] : readers) {
    gbs = std::max(gbs, reader_gbs);
    char item[96];
    std::snprintf(item, sizeof item, "%s\"%s\": %.1f", per_reader.empty() ? "" : ", ", name.c_str(),
                  reader_gbs);
    per_reader += item;
  }
  std::printf(
      "},\n \"read_bandwidth_gbs\": %.1f, \"read_bandwidth_readers_gbs\": {%s}, "
      "\"read_huge_pages\": %s,\n \"omp_region_us\": {\"1\": %.2f, \"%d\": %.2f}}\n",
      gbs, per_reader.c_str(), huge_pages ? "true" : "false", RegionMicroseconds(1), threads,
      RegionMicroseconds(threads));
  return 0;
}
