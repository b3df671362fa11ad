// The prefetching of the AVX-512 and AVX2 attention kernels
// (attention_avx512_blocks.h, attention_avx2.cc). Everything here has
// internal linkage: each kernel's file has its own copy, compiled for its
// instructions.
#pragma once

#include <xmmintrin.h>

#include <cstdint>

#include "kernels/cpu/attention_cpu.h"

namespace encoderd::kernels {
namespace {

// Asks for the cache lines of the next work item's k, v and q rows (in the
// order it reads them) a few at a time, so that they arrive while this item
// computes. Read on demand, 256 bytes from rows 9 KiB apart, they stalled
// the kernels: on attention_bench's 32 x U[16, 256], k and v with q cost
// fp32 and bf16 a fifth of their time, and the prefetches win it back. (All
// of an item's lines asked for at once, when it starts, did not: the
// requests wait for each other.)
class NextItemPrefetch {
 public:
  // qkv: the kernel's input, of values `value_bytes` wide (fp32 or bf16).
  // Nothing to ask for when next is null, and only its q rows when it is
  // another block of rows of the same head as this item (seq_begin, head),
  // whose k and v this item reads; `steps`: about how many times the item
  // calls Step.
  NextItemPrefetch(const void* qkv, int64_t value_bytes, int64_t heads, int64_t d,
                   int64_t seq_begin, int64_t head, const AttentionItem* next, int64_t steps) {
    if (next == nullptr) return;
    const int64_t hidden = heads * d * value_bytes;  // all in bytes from here on
    ld_ = 3 * hidden;
    const char* q =
        static_cast<const char*>(qkv) + next->seq_begin * ld_ + next->head * d * value_bytes;
    const int64_t kv_rows = next->seq_begin == seq_begin && next->head == head ? 0 : next->len;
    ranges_[0] = {q + hidden, kv_rows};                                         // k
    ranges_[1] = {q + 2 * hidden, kv_rows};                                     // v
    ranges_[2] = {q + next->row_begin * ld_, next->row_end - next->row_begin};  // q
    row_lines_ = (d * value_bytes + 63) / 64;
    const int64_t lines = (2 * kv_rows + ranges_[2].rows) * row_lines_;
    per_step_ = (lines + steps - 1) / (steps > 0 ? steps : 1);
    range_ = 0;
  }

  // Asks for the next per_step_ lines.
  void Step() {
    for (int64_t n = 0; n < per_step_; ++n) {
      while (range_ < 3 && ranges_[range_].rows == 0) ++range_;
      if (range_ == 3) return;
      const Range& r = ranges_[range_];
      _mm_prefetch(r.first + row_ * ld_ + line_ * 64, _MM_HINT_T0);
      if (++line_ < row_lines_) continue;
      line_ = 0;
      if (++row_ < r.rows) continue;
      row_ = 0;
      ++range_;
    }
  }

 private:
  struct Range {
    const char* first = nullptr;
    int64_t rows = 0;
  };
  Range ranges_[3];
  int64_t ld_ = 0, row_lines_ = 0, per_step_ = 0;  // ld_ in bytes
  int range_ = 3;                                  // 3: done, or nothing to ask for
  int64_t row_ = 0, line_ = 0;
};

}  // namespace
}  // namespace encoderd::kernels
