// The switch that turns CPU features off so that every fallback path is
// tested on a CPU that could take the faster one (kernels/cpu_features.h).
#include "kernels/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/cpu_disable_check.h"

namespace encoderd::kernels {
namespace {

CpuFeatures All() {
  CpuFeatures f;
  f.avx2 = f.fma = f.avx512f = f.avx512bw = f.avx512_bf16 = f.avx512_vnni = true;
  return f;
}

TEST(CpuFeaturesTest, DisableTurnsOffTheNamedFeatures) {
  std::string unknown;
  const CpuFeatures f = DisableCpuFeatures(All(), "avx512_bf16,,avx512bw", &unknown);
  EXPECT_FALSE(f.avx512_bf16);
  EXPECT_FALSE(f.avx512bw);
  EXPECT_TRUE(f.avx512f && f.avx512_vnni && f.avx2 && f.fma);
  EXPECT_EQ(unknown, "");
  const CpuFeatures none = DisableCpuFeatures(All(), "", &unknown);
  EXPECT_TRUE(none.avx512_bf16 && none.avx512f);
}

// A feature turned off takes along those that build on it: the kernels
// check only their own flags (the bf16 GEMMs avx512_bf16 and avx512bw), so
// with avx512f off alone they still ran AVX-512 code.
TEST(CpuFeaturesTest, TurningAFeatureOffTakesThoseThatBuildOnIt) {
  std::string unknown;
  const CpuFeatures no512 = DisableCpuFeatures(All(), "avx512f", &unknown);
  EXPECT_FALSE(no512.avx512f || no512.avx512bw || no512.avx512_bf16 || no512.avx512_vnni);
  EXPECT_TRUE(no512.avx2 && no512.fma);
  for (const char* base : {"avx2", "fma"}) {
    const CpuFeatures f = DisableCpuFeatures(All(), base, &unknown);
    EXPECT_FALSE(f.avx512f || f.avx512bw || f.avx512_bf16 || f.avx512_vnni) << base;
  }
  const CpuFeatures no_bw = DisableCpuFeatures(All(), "avx512bw", &unknown);
  EXPECT_FALSE(no_bw.avx512_bf16);
  EXPECT_TRUE(no_bw.avx512f && no_bw.avx512_vnni);
  EXPECT_EQ(unknown, "");
}

TEST(CpuFeaturesTest, UnknownNamesAreReported) {
  std::string unknown;
  const CpuFeatures f = DisableCpuFeatures(All(), "amx,avx512_vnni,bf16", &unknown);
  EXPECT_FALSE(f.avx512_vnni);
  EXPECT_TRUE(f.avx512_bf16);
  EXPECT_EQ(unknown, "amx,bf16");
}

// ctest runs this binary again with ENCODERD_CPU_DISABLE set
// (tests/CMakeLists.txt): the process-wide features honour it, every name
// in it is a feature, and oneDNN is capped with AVX-512 off.
TEST(CpuFeaturesTest, EnvironmentTurnsFeaturesOffForTheProcess) {
  test_support::ExpectCpuDisableHonoured();
}

}  // namespace
}  // namespace encoderd::kernels
