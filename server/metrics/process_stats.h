// Resource use of this process from /proc (Linux), read when scraped.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace encoderd::server {

struct ProcessStats {
  int64_t resident_bytes = 0;
  double cpu_seconds = 0;  // user + system
  int64_t threads = 0;
};

// Parses the text of /proc/<pid>/stat and /proc/<pid>/statm. INVALID_ARGUMENT
// names the file and the field that could not be read.
StatusOr<ProcessStats> ParseProcessStats(const std::string& stat, const std::string& statm,
                                         int64_t clock_ticks_per_second, int64_t page_size);

// Reads /proc/self/stat and /proc/self/statm.
StatusOr<ProcessStats> ReadProcessStats();

}  // namespace encoderd::server
