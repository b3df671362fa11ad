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

// Detected once (cpuid + xgetbv: the OS must also save the wider registers),
// less the features ENCODERD_CPU_DISABLE names.
const CpuFeatures& GetCpuFeatures();

// `detected` less the features named in `disable` (comma-separated), and
// less those that build on one turned off (avx512f on avx2 and fma; avx512bw
// and avx512_vnni on avx512f; avx512_bf16 on avx512bw). Names that are not
// features are appended to `unknown` (comma-separated).
CpuFeatures DisableCpuFeatures(CpuFeatures detected, std::string_view disable,
                               std::string* unknown);

// One line for logs: the features in use, and those ENCODERD_CPU_DISABLE
// turned off or named wrongly.
std::string DescribeCpuFeatures();

}  // namespace encoderd::kernels
