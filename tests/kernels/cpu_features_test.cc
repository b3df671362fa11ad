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

// Fake measurements for ChooseCpuFeatures, counting their calls.
int measured_calls = 0;
Bf16DotRates HalfOfFma() {
  ++measured_calls;
  return {42.0, 84.0};
}
Bf16DotRates TwiceFma() {
  ++measured_calls;
  return {170.0, 84.0};
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CpuFeaturesTest, Bf16IsMeasuredAndDroppedWhereItDoesNotPay) {
  measured_calls = 0;
  for (const char* bf16 : {"", "auto"}) {
    const CpuChoice c = ChooseCpuFeatures(All(), /*amx_bf16=*/false, "", bf16, HalfOfFma);
    EXPECT_FALSE(c.features.avx512_bf16);
    EXPECT_TRUE(c.features.avx512bw && c.features.avx512_vnni);
    EXPECT_TRUE(c.bf16_measured && !c.bf16_forced && !c.amx_bf16);
    const std::string line = DescribeCpuChoice(All(), "", bf16, c);
    EXPECT_TRUE(Has(line, "CPU features: avx2 fma avx512f avx512bw avx512_vnni;")) << line;
    EXPECT_TRUE(Has(line,
                    "avx512_bf16 not used: its dot product made only 42.0 GMAC/s against "
                    "fp32 FMA's 84.0 (ENCODERD_CPU_BF16=native uses it)"))
        << line;
  }
  EXPECT_EQ(measured_calls, 2);
}

TEST(CpuFeaturesTest, Bf16IsMeasuredAndKeptWhereItPays) {
  measured_calls = 0;
  const CpuChoice c = ChooseCpuFeatures(All(), false, "", "", TwiceFma);
  EXPECT_TRUE(c.features.avx512_bf16 && c.bf16_measured);
  EXPECT_EQ(measured_calls, 1);
  const std::string line = DescribeCpuChoice(All(), "", "", c);
  EXPECT_TRUE(Has(line, "CPU features: avx2 fma avx512f avx512bw avx512_bf16 avx512_vnni;"))
      << line;
  EXPECT_TRUE(Has(line,
                  "avx512_bf16 used: its dot product made 170.0 GMAC/s against fp32 "
                  "FMA's 84.0"))
      << line;
}

// ENCODERD_CPU_BF16=native, AMX-BF16, a CPU without AVX512-BF16 and
// ENCODERD_CPU_DISABLE=avx512_bf16 all decide without a measurement.
TEST(CpuFeaturesTest, Bf16IsNotMeasuredWhereNothingRestsOnIt) {
  measured_calls = 0;
  const CpuChoice forced = ChooseCpuFeatures(All(), false, "", "native", HalfOfFma);
  EXPECT_TRUE(forced.features.avx512_bf16 && forced.bf16_forced && !forced.bf16_measured);
  EXPECT_TRUE(Has(DescribeCpuChoice(All(), "", "native", forced),
                  "avx512_bf16 kept by ENCODERD_CPU_BF16=native (not measured)"));

  const CpuChoice amx = ChooseCpuFeatures(All(), /*amx_bf16=*/true, "", "", HalfOfFma);
  EXPECT_TRUE(amx.features.avx512_bf16 && amx.amx_bf16 && !amx.bf16_measured);
  EXPECT_TRUE(Has(DescribeCpuChoice(All(), "", "", amx),
                  "avx512_bf16 kept: the CPU has AMX-BF16 (not measured)"));

  CpuFeatures no_bf16 = All();
  no_bf16.avx512_bf16 = false;
  const CpuChoice absent = ChooseCpuFeatures(no_bf16, false, "", "", HalfOfFma);
  EXPECT_FALSE(absent.features.avx512_bf16 || absent.bf16_measured);
  EXPECT_FALSE(Has(DescribeCpuChoice(no_bf16, "", "", absent), "avx512_bf16"));

  const CpuChoice disabled = ChooseCpuFeatures(All(), false, "avx512_bf16", "", HalfOfFma);
  EXPECT_FALSE(disabled.features.avx512_bf16 || disabled.bf16_measured);
  const std::string line = DescribeCpuChoice(All(), "avx512_bf16", "", disabled);
  EXPECT_TRUE(Has(line, "turned off by ENCODERD_CPU_DISABLE: avx512_bf16")) << line;
  EXPECT_FALSE(Has(line, "GMAC/s")) << line;
  EXPECT_EQ(measured_calls, 0);
}

TEST(CpuFeaturesTest, AnUnknownBf16ChoiceMeasuresAndIsReported) {
  measured_calls = 0;
  const CpuChoice c = ChooseCpuFeatures(All(), false, "", "fast", HalfOfFma);
  EXPECT_TRUE(c.bf16_measured && !c.features.avx512_bf16);
  EXPECT_EQ(measured_calls, 1);
  EXPECT_TRUE(Has(DescribeCpuChoice(All(), "", "fast", c),
                  "ENCODERD_CPU_BF16 is neither auto nor native: fast"));
}

// This process's own choice. Where the CPU has AVX512-BF16 and the choice
// rests on the measurement (ctest's kernels_bf16_choice), the rates are
// real numbers and the choice follows them; ENCODERD_CPU_BF16=native
// (ctest's `kernels` and `unit`, so that the native paths are tested
// wherever the CPU has them) keeps the instructions without measuring.
TEST(CpuFeaturesTest, TheProcessChoiceFollowsItsMeasurementOrTheSwitch) {
  std::printf("%s\n", DescribeCpuFeatures().c_str());
  const char* disable = std::getenv(kCpuDisableEnv);
  const CpuFeatures allowed =
      DisableCpuFeatures(DetectCpuFeatures(), disable ? disable : "", nullptr);
  const char* bf16 = std::getenv(kCpuBf16Env);
  const bool native = bf16 != nullptr && std::string(bf16) == "native";
  const CpuChoice& c = GetCpuChoice();
  if (!allowed.avx512_bf16 || native || DetectAmxBf16()) {
    EXPECT_FALSE(c.bf16_measured);
    EXPECT_EQ(c.features.avx512_bf16, allowed.avx512_bf16);
    return;
  }
  ASSERT_TRUE(c.bf16_measured);
  EXPECT_GT(c.bf16_rates.native_gmacs, 0.0);
  EXPECT_GT(c.bf16_rates.fma_gmacs, 0.0);
  // A sanity bound, not a speed: a loop the compiler removed or merged
  // gave some 10^5 GMAC/s; one thread of a CPU of today makes 10-400.
  EXPECT_LT(c.bf16_rates.native_gmacs, 5000.0);
  EXPECT_LT(c.bf16_rates.fma_gmacs, 5000.0);
  EXPECT_EQ(c.features.avx512_bf16, NativeBf16Pays(c.bf16_rates));
}

}  // namespace
}  // namespace encoderd::kernels
