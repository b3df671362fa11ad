// Runtime detection of the x86 instruction-set extensions the CPU kernels use.
#pragma once

namespace encoderd::kernels {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
};

// Detected once (cpuid + xgetbv: the OS must also save the wider registers).
const CpuFeatures& GetCpuFeatures();

}  // namespace encoderd::kernels
