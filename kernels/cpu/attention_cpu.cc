#include "kernels/cpu/attention_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_avx2.h"
#include "kernels/cpu/attention_avx512.h"
#include "kernels/cpu/bf16_convert.h"
#include "kernels/cpu/disentangled_avx512.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu_features.h"

namespace encoderd::kernels {
namespace {

// A work item holds a (sequence, head)'s query rows, all of them unless
// that would be more than 1 / (kItemsPerThread x threads) of the batch's
// work: then blocks of as many rows as fit, at least kMinRowsPerItem. Every
// item packs its head's K and V for the whole sequence, so fewer items pack
// less: against blocks of 128 rows, kernels/bench/attention_bench's batch of
// 32 x U[16, 256] tokens ran 4-5% faster and 1-4 x 512 tokens 6-8%, and
// `encoderd bench --op-profile`'s attention on W1 1.4% (fp32), 1.5% (bf16)
// and 3.5% (int8) faster. The bound keeps one long sequence spread over
// every thread.
constexpr int64_t kItemsPerThread = 2;
constexpr int64_t kMinRowsPerItem = 32;
// An item with disentangled terms holds its rows' bias over every key
// (rows x len floats): at most this many, 16 MiB, so that one long sequence
// takes bounded memory a thread (8192 tokens: 512 rows an item).
constexpr int64_t kMaxBiasFloats = int64_t{1} << 22;

}  // namespace

float* AttentionScratch(int64_t floats) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < static_cast<size_t>(floats)) scratch.resize(floats);
  return scratch.data();
}

void AttentionRowsGeneric(const float* qkv, int64_t seq_begin, int64_t len, int64_t head,
                          int64_t heads, int64_t head_dim, float scale, int64_t row_begin,
                          int64_t row_end, float* out, BiasRows bias) {
  const int64_t hidden = heads * head_dim, ld = 3 * hidden;
  const float* q = qkv + seq_begin * ld + head * head_dim;
  const float* k = q + hidden;
  const float* v = q + 2 * hidden;
  std::vector<float> p(len);
  for (int64_t i = row_begin; i < row_end; ++i) {
    float max = -INFINITY;
    for (int64_t j = 0; j < len; ++j) {
      float dot = 0.f;
      for (int64_t c = 0; c < head_dim; ++c) dot += q[i * ld + c] * k[j * ld + c];
      p[j] = dot * scale;
    }
    AddBiasRow(p.data(), BiasRow(bias, i), len);
    for (int64_t j = 0; j < len; ++j) max = std::max(max, p[j]);
    float sum = 0.f;
    for (int64_t j = 0; j < len; ++j) {
      p[j] = std::exp(p[j] - max);
      sum += p[j];
    }
    float* o = out + (seq_begin + i) * hidden + head * head_dim;
    std::fill(o, o + head_dim, 0.f);
    for (int64_t j = 0; j < len; ++j) {
      for (int64_t c = 0; c < head_dim; ++c) o[c] += p[j] * v[j * ld + c];
    }
    const float inv = 1.f / sum;
    for (int64_t c = 0; c < head_dim; ++c) o[c] *= inv;
  }
}

void DisentangledRows(const DisentangledBias& d, const float* q, const float* k, int64_t ld,
                      int64_t len, int64_t head, int64_t head_dim, int64_t row_begin,
                      int64_t row_end, float* out) {
  const int64_t rows = row_end - row_begin;
  const DisentangledWindow window = WindowOf(d, len, row_begin, row_end);
  const int64_t lo = window.lo, width = window.width;
  // (The item's row kernel takes the scratch over once this returns.)
  float* c2p = AttentionScratch((rows + len) * width);  // [rows, width]: q_i . key[c]
  std::fill(c2p, c2p + (rows + len) * width, 0.f);
  float* p2c = c2p + rows * width;  // [len, width]: k_j . query[c]
  // y[r][c - lo] = x_r . table[c] over the window, for n rows x.
  const auto project = [&](const float* x, int64_t n, const float* table, float* y) {
    const float* t = table + head * head_dim * d.columns + lo;
    for (int64_t r = 0; r < n; ++r) {
      float* yr = y + r * width;
      for (int64_t c = 0; c < head_dim; ++c) {
        const float a = x[r * ld + c];
        const float* tc = t + c * d.columns;
        for (int64_t w = 0; w < width; ++w) yr[w] += a * tc[w];
      }
    }
  };
  project(q + row_begin * ld, rows, d.key, c2p);
  project(k, len, d.query, p2c);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* index = d.index + d.center + row_begin + r;  // index[-j]: key j's
    for (int64_t j = 0; j < len; ++j) {
      const int64_t col = index[-j] - lo;
      out[r * len + j] = c2p[r * width + col] + p2c[j * width + col];
    }
  }
}

bool AttentionCpuTakesBf16Values(int64_t head_dim) {
  const CpuFeatures& cpu = GetCpuFeatures();
  return head_dim % 32 == 0 && cpu.avx512f && cpu.avx512bw && cpu.avx512_bf16;
}

void AttentionCpu(const CpuContext& ctx, DType values, const void* qkv, const int32_t* cu_seqlens,
                  int64_t batch, int64_t heads, int64_t head_dim, float scale, bool bf16_matmuls,
                  void* out, const RelativeBias* bias, const DisentangledBias* disentangled,
                  const KeyBias* key_bias) {
  const CpuFeatures& cpu = GetCpuFeatures();
  const bool fast = head_dim % 16 == 0 && cpu.avx512f;
  const bool avx2 = head_dim % 16 == 0 && cpu.avx2 && cpu.fma;
  const bool bf16 = bf16_matmuls && AttentionCpuTakesBf16Values(head_dim);
  const bool bf16_values = values == DType::kBFloat16;
  if (bf16_values && !bf16) {
    // No kernel reads bf16 values here: the fp32 path over them, widened.
    const int64_t tokens = cu_seqlens[batch], hidden = heads * head_dim;
    std::vector<float> wide(tokens * 3 * hidden), result(tokens * hidden);
    ConvertBFloat16ToFloat(static_cast<const uint16_t*>(qkv), wide.data(), tokens * 3 * hidden);
    AttentionCpu(ctx, DType::kFloat32, wide.data(), cu_seqlens, batch, heads, head_dim, scale,
                 bf16_matmuls, result.data(), bias, disentangled, key_bias);
    ConvertFloatToBFloat16(result.data(), static_cast<uint16_t*>(out), tokens * hidden);
    return;
  }
  double work = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const double len = cu_seqlens[b + 1] - cu_seqlens[b];
    work += len * len * static_cast<double>(head_dim * heads);
  }
  // From one sequence of 7 BERT-base tokens on, the threads share the work.
  // Until 2026-12-01 they did from 2^18 (19 tokens): one sequence of 7 to 18
  // tokens ran on one thread. `encoderd bench --workloads W2 --op-profile`
  // (10 tokens; 2-vCPU AMD EPYC, the two builds alternated twice):
  // attention 0.20-0.21 -> 0.11-0.15 ms per forward in fp32, 0.14 -> 0.09-0.12
  // in bf16; 7 tokens 0.09-0.10 -> 0.06-0.07 (bf16, 3 rounds). The outputs are
  // the same bits: each item is computed alone, whichever thread takes it.
  const int threads = work >= (1 << 15) ? ctx.num_threads() : 1;
  // The most rows x keys an item may hold (when threads > 1).
  const double item_cap = work / static_cast<double>(head_dim * kItemsPerThread * threads);
  std::vector<AttentionItem> items;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t begin = cu_seqlens[b], len = cu_seqlens[b + 1] - begin;
    // One thread takes whole sequences (nothing to balance).
    const double fit = threads > 1 ? item_cap / std::max<double>(len, 1) : len;
    int64_t rows =
        std::max<int64_t>(kMinRowsPerItem, static_cast<int64_t>(std::min<double>(fit, len)));
    if (disentangled != nullptr) rows = std::min(rows, std::max<int64_t>(1, kMaxBiasFloats / len));
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t r = 0; r < len; r += rows)
        items.push_back({begin, len, h, r, std::min(len, r + rows)});
    }
  }
  // Longest sequences first so that the threads end together.
  std::stable_sort(items.begin(), items.end(),
                   [](const AttentionItem& a, const AttentionItem& b) { return a.len > b.len; });
  const float* qkv32 = static_cast<const float*>(qkv);
  float* out32 = static_cast<float*>(out);
  const int64_t hidden = heads * head_dim, ld = 3 * hidden;
  // The rows the item adds to its scores (BiasRows).
  const auto ItemBias = [&](const AttentionItem& it) -> BiasRows {
    if (bias != nullptr) return {bias->values + it.head * bias->width() + bias->center, 0, -1};
    if (key_bias != nullptr) return {key_bias->values + it.seq_begin, 0, 0};
    if (disentangled == nullptr) return {};
    thread_local std::vector<float> rows, wide;
    const float* q = qkv32 + it.seq_begin * ld + it.head * head_dim;
    const float* k = q + hidden;
    int64_t stride = ld;
    if (bf16_values) {  // the head's q and k rows of the sequence, widened
      wide.resize(static_cast<size_t>(2 * it.len * head_dim));
      const uint16_t* q16 =
          static_cast<const uint16_t*>(qkv) + it.seq_begin * ld + it.head * head_dim;
      for (int64_t j = 0; j < it.len; ++j) {
        ConvertBFloat16ToFloat(q16 + j * ld, wide.data() + j * head_dim, head_dim);
        ConvertBFloat16ToFloat(q16 + j * ld + hidden, wide.data() + (it.len + j) * head_dim,
                               head_dim);
      }
      q = wide.data();
      k = q + it.len * head_dim;
      stride = head_dim;
    }
    rows.resize(static_cast<size_t>((it.row_end - it.row_begin) * it.len));
    (cpu.avx512f ? DisentangledRowsAvx512 : DisentangledRows)(*disentangled, q, k, stride, it.len,
                                                              it.head, head_dim, it.row_begin,
                                                              it.row_end, rows.data());
    return {rows.data(), it.row_begin, it.len};
  };
  const auto RunItem = [&](const AttentionItem& it, const AttentionItem* next) {
    const BiasRows b = ItemBias(it);
    if (bf16_values) {
      AttentionRowsAvx512Bf16Values(static_cast<const uint16_t*>(qkv), it.seq_begin, it.len,
                                    it.head, heads, head_dim, scale, it.row_begin, it.row_end,
                                    kAttentionSubRows, static_cast<uint16_t*>(out), b, next);
    } else if (bf16) {
      AttentionRowsAvx512Bf16(qkv32, it.seq_begin, it.len, it.head, heads, head_dim, scale,
                              it.row_begin, it.row_end, kAttentionSubRows, out32, b, next);
    } else if (fast) {
      AttentionRowsAvx512(qkv32, it.seq_begin, it.len, it.head, heads, head_dim, scale,
                          it.row_begin, it.row_end, kAttentionSubRows, out32, b, next);
    } else if (avx2) {
      AttentionRowsAvx2(qkv32, it.seq_begin, it.len, it.head, heads, head_dim, scale, it.row_begin,
                        it.row_end, kAttentionSubRows, out32, b, next);
    } else {
      AttentionRowsGeneric(qkv32, it.seq_begin, it.len, it.head, heads, head_dim, scale,
                           it.row_begin, it.row_end, out32, b);
    }
  };
  const int64_t n = static_cast<int64_t>(items.size());
  // Each thread claims its next item before it starts the current one (the
  // items in order, whichever thread is free), so that the AVX-512 and AVX2
  // kernels can fetch the next one's rows meanwhile.
  std::atomic<int64_t> claimed{0};
  InParallel(threads, [&](int64_t /*t*/, int64_t /*nt*/) {
    for (int64_t i = claimed.fetch_add(1); i < n;) {
      const int64_t following = claimed.fetch_add(1);
      const AttentionItem* next = following < n ? &items[following] : nullptr;
      RunItem(items[i], next);
      i = following;
    }
    // The AVX-512 and AVX2 kernels stream their outputs past the caches:
    // those stores are complete before the threads leave.
    _mm_sfence();
  });
}

}  // namespace encoderd::kernels
