#include "server/core/cpu_quota.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace encoderd::server {
namespace {

// The quota in CPUs, rounded up; 0 for no quota or bad values.
int QuotaCpus(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return 0;
  return static_cast<int>((quota + period - 1) / period);
}

bool ParseNumber(const std::string& text, long long* value) {
  std::istringstream in(text);
  return static_cast<bool>(in >> *value);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return in ? text.str() : std::string();
}

}  // namespace

int CpusFromCgroupV2(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max") return 0;
  long long q = 0;
  return ParseNumber(quota, &q) ? QuotaCpus(q, period) : 0;
}

int CpusFromCgroupV1(const std::string& quota_us, const std::string& period_us) {
  long long quota = 0, period = 0;
  if (!ParseNumber(quota_us, &quota) || !ParseNumber(period_us, &period)) return 0;
  return QuotaCpus(quota, period);
}

std::string CpuBudget::Describe() const {
  std::string line = std::to_string(cpus) + (cpus == 1 ? " CPU" : " CPUs");
  if (quota > 0) {
    line += " (cgroup quota " + std::to_string(quota) + ", " + std::to_string(affinity) +
            " in the affinity mask)";
  } else {
    line += " (affinity mask; no cgroup CPU quota)";
  }
  return line;
}

CpuBudget ReadCpuBudget(const std::string& cgroup_root) {
  CpuBudget budget;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) budget.affinity = std::max(1, CPU_COUNT(&set));
  budget.quota = CpusFromCgroupV2(ReadFile(cgroup_root + "/cpu.max"));
  if (budget.quota == 0) {
    budget.quota = CpusFromCgroupV1(ReadFile(cgroup_root + "/cpu/cpu.cfs_quota_us"),
                                    ReadFile(cgroup_root + "/cpu/cpu.cfs_period_us"));
  }
  budget.cpus = budget.quota > 0 ? std::min(budget.affinity, budget.quota) : budget.affinity;
  return budget;
}

}  // namespace encoderd::server
