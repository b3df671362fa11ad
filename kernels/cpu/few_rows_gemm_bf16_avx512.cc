// Compiled with -mavx512f -mavx512bw -mavx512bf16 (kernels/CMakeLists.txt)
// and called only when the CPU has all three. Defines no inline function
// with external linkage, so no AVX-512 copy of a shared function can be
// chosen for generic code.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/few_rows_gemm_avx512.h"
#include "kernels/cpu/few_rows_tile_avx512.h"

namespace encoderd::kernels {
namespace {

// Two inputs a step: the pair of bf16 values in every 32-bit lane, one
// vdpbf16ps (both products added to the fp32 lane) per 16 columns.
struct Bf16Step : FewRowsWholeStep, FewRowsFloatEpilogue {
  using In = uint16_t;
  static constexpr int64_t kInputs = 2;
  static __m512i Broadcast(const uint16_t* x) {
    int32_t pair;
    std::memcpy(&pair, x, sizeof(pair));
    return _mm512_set1_epi32(pair);
  }
  // Assembly: with the intrinsic, GCC 12 copies the accumulators through
  // the stack at each step (as with vpdpbusd in int8_gemm_avx512.cc).
  static void Accumulate(__m512& acc, __m512i x, __m512i w) {
    asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
  }
};

}  // namespace

void FewRowsGemmBf16(const uint16_t* x, int64_t rows, int64_t ldx, const uint16_t* packed,
                     int64_t n, int64_t k, int64_t group_begin, int64_t group_end,
                     const FewRowsEpilogue& epilogue, float* out) {
  FewRowsGemm<Bf16Step>(x, rows, ldx, packed, n, k / 2, FewRowsBf16Inputs(k) / 2, group_begin,
                        group_end, epilogue, out);
}

}  // namespace encoderd::kernels
