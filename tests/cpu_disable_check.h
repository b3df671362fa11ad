// The check that ENCODERD_CPU_DISABLE took effect in this process, for the
// test binaries ctest runs with it set (tests/CMakeLists.txt): every name it
// holds is a feature, each named feature (and those built on it) is off,
// and oneDNN is held below AVX-512 where AVX-512 is off. Without the check a
// misspelt name in tests/CMakeLists.txt runs the native paths again under a
// fallback run's name, and most fallbacks give the native paths' bits.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include "kernels/cpu_context.h"
#include "kernels/cpu_features.h"

namespace encoderd::test_support {

inline void ExpectCpuDisableHonoured() {
  using kernels::CpuFeatures;
  const char* env = std::getenv(kernels::kCpuDisableEnv);
  std::printf("%s\n", kernels::DescribeCpuFeatures().c_str());
  if (env == nullptr || *env == '\0')
    GTEST_SKIP() << kernels::kCpuDisableEnv << " is not set in this run";
  CpuFeatures all;
  all.avx2 = all.fma = all.avx512f = all.avx512bw = all.avx512_bf16 = all.avx512_vnni = true;
  std::string unknown;
  const CpuFeatures allowed = kernels::DisableCpuFeatures(all, env, &unknown);
  EXPECT_EQ(unknown, "") << kernels::kCpuDisableEnv << "=" << env << " names no such feature";
  const CpuFeatures& in_use = kernels::GetCpuFeatures();
  for (bool CpuFeatures::*feature :
       {&CpuFeatures::avx2, &CpuFeatures::fma, &CpuFeatures::avx512f, &CpuFeatures::avx512bw,
        &CpuFeatures::avx512_bf16, &CpuFeatures::avx512_vnni}) {
    EXPECT_TRUE(allowed.*feature || !(in_use.*feature)) << kernels::DescribeCpuFeatures();
  }
  if (!in_use.avx512f) {
    kernels::CpuContext context(1);  // caps oneDNN before its first primitive
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    // The cap CapOneDnnIsa sets (kernels/cpu/cpu_context.cc): AVX2 with
    // AVX2 and FMA on, else SSE4.1 (or less, on a CPU without AVX2).
    if (in_use.avx2 && in_use.fma) {
      EXPECT_TRUE(isa == dnnl::cpu_isa::avx2 || isa == dnnl::cpu_isa::avx ||
                  isa == dnnl::cpu_isa::sse41)
          << "oneDNN runs ISA " << static_cast<int>(isa) << " with avx512f off";
    } else {
      EXPECT_EQ(isa, dnnl::cpu_isa::sse41)
          << "oneDNN runs ISA " << static_cast<int>(isa) << " with avx2 or fma off";
    }
  }
}

}  // namespace encoderd::test_support
