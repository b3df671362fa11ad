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

// bf16 models use AVX512-BF16 only where its dot product makes at least 3/4
// of FMA's products: on a 2-vCPU Intel Xeon (family 6, model 207) it made
// half (42 against 84 GMAC/s) and oneDNN's bf16 GEMMs ran at 0.6x its fp32
// ones; on the AMD EPYCs measured it makes about twice FMA's.
TEST(CpuFeaturesTest, NativeBf16PaysFromThreeQuartersOfFma) {
  EXPECT_FALSE(NativeBf16Pays({42.0, 84.0}));
  EXPECT_FALSE(NativeBf16Pays({62.9, 84.0}));
  EXPECT_TRUE(NativeBf16Pays({63.0, 84.0}));
  EXPECT_TRUE(NativeBf16Pays({170.0, 84.0}));
}

// Where the CPU has AVX512-BF16 and the process leaves the choice to the
// measurement (ctest's kernels_bf16_choice), its rates are real numbers and
// the choice follows them; ENCODERD_CPU_BF16=native (ctest's `kernels` and
// `unit`, so that the native paths are tested wherever the CPU has them)
// keeps the instructions without measuring.
TEST(CpuFeaturesTest, Bf16ChoiceFollowsTheMeasurementOrTheSwitch) {
  std::printf("%s\n", DescribeCpuFeatures().c_str());
  std::string unknown;
  const char* disable = std::getenv(kCpuDisableEnv);
  const CpuFeatures allowed =
      DisableCpuFeatures(DetectCpuFeatures(), disable ? disable : "", &unknown);
  const char* choice = std::getenv(kCpuBf16Env);
  const bool native = choice != nullptr && std::string(choice) == "native";
  const Bf16DotRates* rates = MeasuredBf16DotRates();
  if (!allowed.avx512_bf16 || native) {
    EXPECT_EQ(rates, nullptr);
    EXPECT_EQ(GetCpuFeatures().avx512_bf16, allowed.avx512_bf16);
    return;
  }
  ASSERT_NE(rates, nullptr);
  EXPECT_GT(rates->native_gmacs, 0.0);
  EXPECT_GT(rates->fma_gmacs, 0.0);
  // Not from a loop the compiler removed or merged: one thread of a CPU of
  // today makes some 10-400 billion products a second either way.
  EXPECT_LT(rates->native_gmacs, 5000.0);
  EXPECT_LT(rates->fma_gmacs, 5000.0);
  EXPECT_EQ(GetCpuFeatures().avx512_bf16, NativeBf16Pays(*rates));
  EXPECT_NE(DescribeCpuFeatures().find("GMAC/s"), std::string::npos);
}

}  // namespace
}  // namespace encoderd::kernels
