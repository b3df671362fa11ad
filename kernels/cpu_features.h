// Runtime detection of the x86 instruction-set extensions the CPU kernels use.
#pragma once

#include <string>
#include <string_view>

namespace encoderd::kernels {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
};

// The environment variable that turns detected features off, so that the
// fallback paths (bf16 GEMMs in fp32 with bf16-rounded weights, a bf16
// model's attention in fp32, attention without AVX-512, ...) run and are
// tested on a CPU that has the features: a comma-separated list of
// CpuFeatures' field names, e.g. "avx512_bf16".
inline constexpr char kCpuDisableEnv[] = "ENCODERD_CPU_DISABLE";

// How fast one thread multiplies and adds with the native bf16 dot product
// (VDPBF16PS, two bf16 products into each fp32 lane) and with fp32 FMA, in
// billions of products a second (kernels/cpu/bf16_probe_avx512.cc).
struct Bf16DotRates {
  double native_gmacs = 0;
  double fma_gmacs = 0;
};

// Whether bf16 models use AVX512-BF16 where the CPU has it (bf16 GEMMs in
// oneDNN and the few-row kernels, attention on VDPBF16PS): unset or `auto`,
// where its dot product makes at least kNativeBf16MinShare of the products
// FMA makes (NativeBf16Pays, measured once per process); `native`, always.
// Where it does not pay, bf16 models take the fallback: fp32 GEMMs on
// bf16-rounded weights and inputs, the few-row kernel that widens bf16
// weights in registers, attention in fp32; the results round the same
// values and differ only in the order of fp32 sums. On a 2-vCPU Intel
// Xeon (family 6, model 207) VDPBF16PS made half the products of FMA and
// oneDNN's bf16 GEMMs ran at 0.6x its fp32 ones (docs/architecture.md).
inline constexpr char kCpuBf16Env[] = "ENCODERD_CPU_BF16";
inline constexpr double kNativeBf16MinShare = 0.75;

bool NativeBf16Pays(const Bf16DotRates& rates);

// What cpuid and xgetbv report (the OS must also save the wider registers),
// before ENCODERD_CPU_DISABLE and ENCODERD_CPU_BF16.
CpuFeatures DetectCpuFeatures();

// The rates GetCpuFeatures measured, or null where it measured none
// (no avx512_bf16 left by ENCODERD_CPU_DISABLE, or ENCODERD_CPU_BF16=native).
const Bf16DotRates* MeasuredBf16DotRates();

// Decided once: the detected features less those ENCODERD_CPU_DISABLE
// names, and less avx512_bf16 where it does not pay (kCpuBf16Env).
const CpuFeatures& GetCpuFeatures();

// `detected` less the features named in `disable` (comma-separated), and
// less those that build on one turned off (avx512f on avx2 and fma; avx512bw
// and avx512_vnni on avx512f; avx512_bf16 on avx512bw). Names that are not
// features are appended to `unknown` (comma-separated).
CpuFeatures DisableCpuFeatures(CpuFeatures detected, std::string_view disable,
                               std::string* unknown);

// One line for logs: the features in use, those ENCODERD_CPU_DISABLE turned
// off or named wrongly, and the bf16 dot product's rates where they were
// measured.
std::string DescribeCpuFeatures();

}  // namespace encoderd::kernels
