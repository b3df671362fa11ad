// The switch that turns CPU features off so that every fallback path is
// tested on a CPU that could take the faster one (kernels/cpu_features.h).
#include "kernels/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace encoderd::kernels {
namespace {

CpuFeatures All() {
  CpuFeatures f;
  f.avx2 = f.fma = f.avx512f = f.avx512bw = f.avx512_bf16 = f.avx512_vnni = true;
  return f;
}

TEST(CpuFeaturesTest, DisableTurnsOffTheNamedFeatures) {
  std::string unknown;
  const CpuFeatures f = DisableCpuFeatures(All(), "avx512_bf16,,avx512f", &unknown);
  EXPECT_FALSE(f.avx512_bf16);
  EXPECT_FALSE(f.avx512f);
  EXPECT_TRUE(f.avx512bw && f.avx512_vnni && f.avx2 && f.fma);
  EXPECT_EQ(unknown, "");
  const CpuFeatures none = DisableCpuFeatures(All(), "", &unknown);
  EXPECT_TRUE(none.avx512_bf16 && none.avx512f);
}

TEST(CpuFeaturesTest, UnknownNamesAreReported) {
  std::string unknown;
  const CpuFeatures f = DisableCpuFeatures(All(), "amx,avx512_vnni,bf16", &unknown);
  EXPECT_FALSE(f.avx512_vnni);
  EXPECT_TRUE(f.avx512_bf16);
  EXPECT_EQ(unknown, "amx,bf16");
}

// ctest runs this binary a second time with ENCODERD_CPU_DISABLE set
// (tests/CMakeLists.txt): the process-wide features honour it.
TEST(CpuFeaturesTest, EnvironmentTurnsFeaturesOffForTheProcess) {
  const char* env = std::getenv(kCpuDisableEnv);
  const std::string disabled = env ? env : "";
  std::printf("%s\n", DescribeCpuFeatures().c_str());
  if (disabled.find("avx512_bf16") != std::string::npos) {
    EXPECT_FALSE(GetCpuFeatures().avx512_bf16);
  }
  if (disabled.find("avx512f") != std::string::npos) {
    EXPECT_FALSE(GetCpuFeatures().avx512f);
  }
  if (disabled.empty()) GTEST_SKIP() << kCpuDisableEnv << " is not set in this run";
}

}  // namespace
}  // namespace encoderd::kernels
