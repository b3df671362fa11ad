// Attention micro-benchmark: kernels::Attention (the AVX-512 or AVX2 path,
// whichever the CPU has) against the generic path, BERT-base heads (12 x 64).
//
//   ./build/kernels/attention_bench [--threads N] [--seconds S] [--batch I]
//
// --batch I runs the I-th batch of the table alone (0: 32 x U[16,256]), for
// a profiler.
//
// Prints ms per call and GFLOP/s (4 * L^2 * head_dim per sequence and head).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/bench/best_time.h"
#include "kernels/cpu/attention_avx512.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/bf16_convert.h"
#include "kernels/cpu_features.h"

namespace {

using encoderd::kernels::bench::BestSeconds;

}  // namespace

int main(int argc, char** argv) {
  int threads = omp_get_num_procs();
  double budget = 0.5;
  int only = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seconds")) budget = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--batch")) only = std::atoi(argv[i + 1]);
  }
  const int64_t heads = 12, d = 64, hidden = heads * d;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> len_dist(16, 256);
  struct Batch {
    std::string name;
    std::vector<int32_t> lengths;
  };
  std::vector<Batch> batches = {{"32 x U[16,256]", {}},
                                {"1 x 512", {512}},
                                {"4 x 512", {512, 512, 512, 512}},
                                {"2 seqs (4, 6)", {4, 6}}};
  for (int i = 0; i < 32; ++i) batches[0].lengths.push_back(len_dist(rng));
  encoderd::kernels::CpuContext ctx(threads);
  const bool avx512 = encoderd::kernels::GetCpuFeatures().avx512f;
  std::printf("threads=%d heads=%ld head_dim=%ld cpu: %s\n", threads, heads, d,
              encoderd::kernels::DescribeCpuFeatures().c_str());
  std::printf(
      "fp32: kernels::Attention (32-row score tiles, AVX-512 or else AVX2); bf16: the same\n"
      "with bf16 matmuls (AVX512-BF16 where the CPU has it), err = max |bf16 - fp32| / max\n"
      "|fp32|; bf16_values: bf16 matmuls over bf16 q, k, v and output (a bf16 model's\n"
      "buffers; widened to fp32 where the CPU lacks AVX512-BF16); full_LxL: AVX-512 kernels\n"
      "(0 without AVX-512), one work item per (sequence, head) holding all L x L scores;\n"
      "generic: portable path\n");
  std::printf("%-16s %7s | %10s %8s | %8s %8s %8s | %14s %8s | %11s %8s | %10s %8s\n", "batch",
              "tokens", "fp32_ms", "GFLOP/s", "bf16_ms", "GFLOP/s", "err", "bf16_values_ms",
              "GFLOP/s", "full_LxL_ms", "GFLOP/s", "generic_ms", "GFLOP/s");
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    if (only >= 0 && bi != static_cast<size_t>(only)) continue;
    const Batch& b = batches[bi];
    std::vector<int32_t> cu(1, 0);
    double flop = 0;
    for (int32_t len : b.lengths) {
      cu.push_back(cu.back() + len);
      flop += 4.0 * len * len * d * heads;
    }
    const int64_t total = cu.back(), batch = static_cast<int64_t>(b.lengths.size());
    std::vector<float> qkv(total * 3 * hidden);
    // The output starts on a cache line, as the engine's activation buffers
    // do (the AVX-512 kernels stream out the rows that start one).
    const int64_t outputs = total * hidden;
    std::vector<float> out_storage(outputs + 16);
    float* out = out_storage.data() +
                 (64 - reinterpret_cast<uintptr_t>(out_storage.data()) % 64) % 64 / sizeof(float);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    for (float& x : qkv) x = dist(rng);
    const float scale = 1.f / std::sqrt(static_cast<float>(d));
    const double fast = BestSeconds(
        [&] {
          encoderd::kernels::Attention(ctx, encoderd::DType::kFloat32, encoderd::DType::kFloat32,
                                       qkv.data(), cu.data(), batch, total, /*max_seqlen=*/0, heads,
                                       d, scale, out);
        },
        budget);
    const std::vector<float> fp32_out(out, out + outputs);
    const double bf16 = BestSeconds(
        [&] {
          encoderd::kernels::Attention(ctx, encoderd::DType::kFloat32, encoderd::DType::kBFloat16,
                                       qkv.data(), cu.data(), batch, total, /*max_seqlen=*/0, heads,
                                       d, scale, out);
        },
        budget);
    double err = 0, amax = 0;
    for (int64_t i = 0; i < outputs; ++i) {
      err = std::max(err, static_cast<double>(std::fabs(out[i] - fp32_out[i])));
      amax = std::max(amax, static_cast<double>(std::fabs(fp32_out[i])));
    }
    // bf16 values; the output on a cache line too.
    std::vector<uint16_t> qkv16(qkv.size()), out16_storage(outputs + 32);
    encoderd::kernels::ConvertFloatToBFloat16(qkv.data(), qkv16.data(),
                                              static_cast<int64_t>(qkv.size()));
    uint16_t* out16 =
        out16_storage.data() +
        (64 - reinterpret_cast<uintptr_t>(out16_storage.data()) % 64) % 64 / sizeof(uint16_t);
    const double bf16_values = BestSeconds(
        [&] {
          encoderd::kernels::Attention(ctx, encoderd::DType::kBFloat16, encoderd::DType::kBFloat16,
                                       qkv16.data(), cu.data(), batch, total, /*max_seqlen=*/0,
                                       heads, d, scale, out16);
        },
        budget);
    const double full = !avx512
                            ? 0
                            : BestSeconds(
                                  [&] {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) collapse(2)
                                    for (int64_t s = 0; s < batch; ++s)
                                      for (int64_t h = 0; h < heads; ++h)
                                        encoderd::kernels::AttentionRowsAvx512(
                                            qkv.data(), cu[s], cu[s + 1] - cu[s], h, heads, d,
                                            scale, 0, cu[s + 1] - cu[s], cu[s + 1] - cu[s], out);
                                  },
                                  budget);
    const double generic = BestSeconds(
        [&] {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) collapse(2)
          for (int64_t s = 0; s < batch; ++s)
            for (int64_t h = 0; h < heads; ++h)
              encoderd::kernels::AttentionRowsGeneric(qkv.data(), cu[s], cu[s + 1] - cu[s], h,
                                                      heads, d, scale, 0, cu[s + 1] - cu[s], out);
        },
        budget);
    std::printf(
        "%-16s %7ld | %10.3f %8.1f | %8.3f %8.1f %8.1e | %14.3f %8.1f | %11.3f %8.1f | %10.3f "
        "%8.1f\n",
        b.name.c_str(), total, fast * 1e3, flop / fast * 1e-9, bf16 * 1e3, flop / bf16 * 1e-9,
        err / amax, bf16_values * 1e3, flop / bf16_values * 1e-9, full * 1e3,
        full > 0 ? flop / full * 1e-9 : 0.0, generic * 1e3, flop / generic * 1e-9);
  }
  return 0;
}
