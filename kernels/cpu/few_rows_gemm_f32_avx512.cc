// Compiled with -mavx512f (kernels/CMakeLists.txt) and called only when the
// CPU has it. Defines no inline function with external linkage, so no
// AVX-512 copy of a shared function can be chosen for generic code.
#include <immintrin.h>

#include "kernels/cpu/few_rows_gemm_avx512.h"
#include "kernels/cpu/few_rows_tile_avx512.h"

namespace encoderd::kernels {
namespace {

// One input a step: its fp32 value in every lane, one FMA per 16 columns.
struct F32Step : FewRowsWholeStep, FewRowsFloatEpilogue {
  using In = float;
  static constexpr int64_t kInputs = 1;
  static __m512i Broadcast(const float* x) { return _mm512_castps_si512(_mm512_set1_ps(*x)); }
  static void Accumulate(__m512& acc, __m512i x, __m512i w) {
    acc = _mm512_fmadd_ps(_mm512_castsi512_ps(x), _mm512_castsi512_ps(w), acc);
  }
};

// bf16 weights in pairs of inputs (each 32-bit lane: the even input's bf16
// in the low half, the odd one's in the high half), used as fp32 in two
// parts: the even inputs' weights shifted into the high half, then the odd
// ones' with the low half cleared. Inputs are fp32 (bf16-rounded by the
// caller). The products and their order are those of F32Step on the same
// values, so the sums are F32Step's bit for bit.
struct Bf16AsF32Step : F32Step {
  static constexpr int kParts = 2;
  static __m512i Load(const char* w, int part) {
    const __m512i pairs = _mm512_loadu_si512(w);
    return part == 0 ? _mm512_slli_epi32(pairs, 16)
                     : _mm512_and_si512(pairs, _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
  }
};

}  // namespace

void FewRowsGemmF32(const float* x, int64_t rows, int64_t ldx, const float* packed, int64_t n,
                    int64_t k, int64_t group_begin, int64_t group_end,
                    const FewRowsEpilogue& epilogue, float* out) {
  FewRowsGemm<F32Step>(x, rows, ldx, packed, n, k, FewRowsF32Inputs(k), group_begin, group_end,
                       epilogue, out);
}

void FewRowsGemmBf16AsF32(const float* x, int64_t rows, int64_t ldx, const uint16_t* packed,
                          int64_t n, int64_t k, int64_t group_begin, int64_t group_end,
                          const FewRowsEpilogue& epilogue, float* out) {
  const int64_t steps = (k + 1) / 2;
  FewRowsGemm<Bf16AsF32Step>(x, rows, ldx, packed, n, steps, FewRowsBf16Inputs(k) / 2, group_begin,
                             group_end, epilogue, out);
}

}  // namespace encoderd::kernels
