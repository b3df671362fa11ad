// How many CPUs this process may use: the CPUs it may run on (affinity),
// capped by the cgroup's CPU quota (a container's CPU limit), which the
// affinity count does not show: a pod limited to 2 CPUs on a 64-core node
// sees 64 processors.
#pragma once

#include <string>

namespace encoderd::server {

// CPUs allowed by a cgroup v2 `cpu.max` text ("QUOTA PERIOD", rounded up) or
// by cgroup v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us` texts; 0 when
// unlimited ("max", -1) or unreadable.
int CpusFromCgroupV2(const std::string& cpu_max);
int CpusFromCgroupV1(const std::string& quota_us, const std::string& period_us);

struct CpuBudget {
  // CPUs to use: the affinity count, capped by the quota when there is one.
  int cpus = 1;
  int affinity = 1;
  int quota = 0;  // 0: no quota
  // One line for the log, e.g. "2 CPUs (cgroup quota 2, 64 in the affinity mask)".
  std::string Describe() const;
};

// Reads the affinity mask and the quota under `cgroup_root` (the cgroup v2
// cpu.max, else the v1 cpu/cpu.cfs_* files).
CpuBudget ReadCpuBudget(const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace encoderd::server
