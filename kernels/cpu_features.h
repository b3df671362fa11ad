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
// billions of products a second (MeasureBf16DotRates).
struct Bf16DotRates {
  double native_gmacs = 0;
  double fma_gmacs = 0;
};

// Whether the process uses AVX512-BF16 where the CPU has it (bf16 models'
// GEMMs in oneDNN and the few-row kernels, and bf16 and int8 models'
// attention on VDPBF16PS): unset or `auto`, where the CPU has AMX-BF16
// (oneDNN's bf16 GEMMs run on AMX there) or where the dot product makes at
// least kNativeBf16MinShare of the products FMA makes (NativeBf16Pays,
// measured once per process); `native`, always. Where it does not pay, the
// models take the path of a CPU without it: fp32 GEMMs on bf16-rounded
// weights and inputs, the few-row kernel that widens bf16 weights in
// registers, and attention in fp32 on unrounded q, k, v (so a bf16 model's
// results differ from the native path's by bf16 roundings of attention as
// well as by the order of sums). On a 2-vCPU Intel Xeon VM (family 6,
// model 207, no AMX exposed) VDPBF16PS made half the products of FMA and
// oneDNN's bf16 GEMMs ran at 0.6x its fp32 ones (docs/architecture.md).
inline constexpr char kCpuBf16Env[] = "ENCODERD_CPU_BF16";
inline constexpr double kNativeBf16MinShare = 0.75;

bool NativeBf16Pays(const Bf16DotRates& rates);

// One thread's rates: 7 alternated passes of each loop of
// kernels/cpu/bf16_probe_avx512.h, each instruction's fastest (about a
// millisecond in all). Only on a CPU with AVX-512 F, BW and BF16.
Bf16DotRates MeasureBf16DotRates();

// What the process uses, and why.
struct CpuChoice {
  CpuFeatures features;        // in use
  bool amx_bf16 = false;       // AMX-BF16 usable: native bf16 kept unmeasured
  bool bf16_forced = false;    // ENCODERD_CPU_BF16=native
  bool bf16_measured = false;  // bf16_rates decided avx512_bf16
  Bf16DotRates bf16_rates;
};

// The choice for a CPU that reports `detected` (and AMX-BF16 if amx_bf16),
// given ENCODERD_CPU_DISABLE's `disable` and ENCODERD_CPU_BF16's `bf16`:
// `measure` runs only where the choice rests on it.
CpuChoice ChooseCpuFeatures(const CpuFeatures& detected, bool amx_bf16, std::string_view disable,
                            std::string_view bf16, Bf16DotRates (*measure)());

// What cpuid and xgetbv report (the OS must also save the wider registers),
// before ENCODERD_CPU_DISABLE and ENCODERD_CPU_BF16.
CpuFeatures DetectCpuFeatures();

// Whether cpuid reports AMX-BF16 and AMX-TILE and the OS saves the tile
// state (XCR0 bits 17 and 18).
bool DetectAmxBf16();

// This process's choice, made once from the CPU and the environment.
const CpuChoice& GetCpuChoice();

// The features in use: GetCpuChoice().features.
const CpuFeatures& GetCpuFeatures();

// `detected` less the features named in `disable` (comma-separated), and
// less those that build on one turned off (avx512f on avx2 and fma; avx512bw
// and avx512_vnni on avx512f; avx512_bf16 on avx512bw). Names that are not
// features are appended to `unknown` (comma-separated).
CpuFeatures DisableCpuFeatures(CpuFeatures detected, std::string_view disable,
                               std::string* unknown);

// One line for logs: the features in use, those ENCODERD_CPU_DISABLE turned
// off or named wrongly, and how native bf16 was chosen (the rates where
// they were measured).
std::string DescribeCpuChoice(const CpuFeatures& detected, std::string_view disable,
                              std::string_view bf16, const CpuChoice& choice);

// DescribeCpuChoice of this process.
std::string DescribeCpuFeatures();

}  // namespace encoderd::kernels
