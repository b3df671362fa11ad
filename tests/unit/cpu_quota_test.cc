// The CPU budget from the cgroup quota (server/core/cpu_quota.h), on fake cgroup
// files: a container's CPU limit caps the threads, not the node's core count.
#include "server/core/cpu_quota.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace encoderd::server {
namespace {

namespace fs = std::filesystem;

TEST(CpuQuotaTest, ParsesCgroupV2CpuMax) {
  EXPECT_EQ(CpusFromCgroupV2("200000 100000\n"), 2);
  EXPECT_EQ(CpusFromCgroupV2("150000 100000"), 2);  // 1.5 CPUs: rounded up
  EXPECT_EQ(CpusFromCgroupV2("50000 100000"), 1);
  EXPECT_EQ(CpusFromCgroupV2("max 100000\n"), 0);
  EXPECT_EQ(CpusFromCgroupV2(""), 0);
  EXPECT_EQ(CpusFromCgroupV2("garbage"), 0);
  EXPECT_EQ(CpusFromCgroupV2("100000 0"), 0);
}

TEST(CpuQuotaTest, ParsesCgroupV1Quota) {
  EXPECT_EQ(CpusFromCgroupV1("400000\n", "100000\n"), 4);
  EXPECT_EQ(CpusFromCgroupV1("-1\n", "100000\n"), 0);
  EXPECT_EQ(CpusFromCgroupV1("", ""), 0);
}

TEST(CpuQuotaTest, TheQuotaCapsTheAffinityCount) {
  const fs::path root = fs::temp_directory_path() / "encoderd_cpu_quota_test";
  fs::remove_all(root);
  fs::create_directories(root / "cpu");
  const CpuBudget none = ReadCpuBudget(root.string());
  EXPECT_EQ(none.quota, 0);
  EXPECT_EQ(none.cpus, none.affinity);
  EXPECT_NE(none.Describe().find("no cgroup CPU quota"), std::string::npos);

  std::ofstream(root / "cpu" / "cpu.cfs_quota_us") << "100000\n";  // v1: one CPU
  std::ofstream(root / "cpu" / "cpu.cfs_period_us") << "100000\n";
  EXPECT_EQ(ReadCpuBudget(root.string()).cpus, 1);

  std::ofstream(root / "cpu.max") << "100000 100000\n";  // v2 wins: one CPU
  const CpuBudget limited = ReadCpuBudget(root.string());
  EXPECT_EQ(limited.quota, 1);
  EXPECT_EQ(limited.cpus, 1);
  EXPECT_NE(limited.Describe().find("cgroup quota 1"), std::string::npos) << limited.Describe();

  std::ofstream(root / "cpu.max") << "6400000 100000\n";  // 64 CPUs: the mask caps it
  const CpuBudget wide = ReadCpuBudget(root.string());
  EXPECT_EQ(wide.cpus, std::min(wide.affinity, 64));
  fs::remove_all(root);
}

}  // namespace
}  // namespace encoderd::server
