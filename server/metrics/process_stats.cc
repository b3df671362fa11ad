#include "server/metrics/process_stats.h"

#include <unistd.h>

#include <sstream>
#include <vector>

#include "core/file.h"

namespace encoderd::server {

StatusOr<ProcessStats> ParseProcessStats(const std::string& stat, const std::string& statm,
                                         int64_t clock_ticks_per_second, int64_t page_size) {
  // The command name (field 2) is in parentheses and may hold spaces or ')';
  // fields after the last ')' start with field 3 (state).
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return InvalidArgument("/proc/self/stat: no command field");
  std::istringstream fields(stat.substr(close + 1));
  std::vector<std::string> f;  // f[0] is field 3
  for (std::string s; fields >> s;) f.push_back(s);
  if (f.size() < 18) return InvalidArgument("/proc/self/stat: fewer than 20 fields");
  ProcessStats stats;
  try {
    const double utime = std::stod(f[14 - 3]);
    const double stime = std::stod(f[15 - 3]);
    stats.cpu_seconds = (utime + stime) / static_cast<double>(clock_ticks_per_second);
    stats.threads = std::stoll(f[20 - 3]);
  } catch (const std::exception&) {
    return InvalidArgument("/proc/self/stat: bad utime, stime or num_threads field");
  }
  std::istringstream m(statm);
  int64_t size_pages = 0, resident_pages = 0;
  if (!(m >> size_pages >> resident_pages))
    return InvalidArgument("/proc/self/statm: bad resident field");
  stats.resident_bytes = resident_pages * page_size;
  return stats;
}

StatusOr<ProcessStats> ReadProcessStats() {
  ASSIGN_OR_RETURN(std::string stat, ReadWholeFile("/proc/self/stat", "process statistics"));
  ASSIGN_OR_RETURN(std::string statm, ReadWholeFile("/proc/self/statm", "process statistics"));
  return ParseProcessStats(stat, statm, sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE));
}

}  // namespace encoderd::server
