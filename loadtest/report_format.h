// The load run report: a text table for people, JSON and CSV for scripts.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "loadtest/load_options.h"
#include "loadtest/run_stats.h"

namespace encoderd::loadtest {

// offered_rate: the open-loop target (0 for closed loop).
std::string FormatReportText(const LoadOptions& options, double offered_rate,
                             const RunStats& stats);
nlohmann::json ReportJson(const LoadOptions& options, double offered_rate, const RunStats& stats);

// Sweep CSV: one row per rate; latencies in milliseconds.
// Per-second CSV: second,ok,errors,p50_ms,p99_ms (latency of OK calls).
std::string PerSecondCsv(const RunStats& stats);

std::string SweepCsvHeader();
std::string SweepCsvRow(double offered_rate, const RunStats& stats);

// True when an open-loop run was not sustained: more than 1% of calls
// failed, or the OK calls' latency grew by more than 1/9 s per second of
// arrivals (RunStats::LatencyGrowth): the server completed less than 90% of
// the arrivals' rate and its backlog kept growing. A slow server that keeps
// up (every call 2 s) or one slow call is not saturation: until 2026-12-04
// this compared the OK calls per second from the first send to the last
// completion with the arrivals' rate, and so read any latency over a tenth
// of the window as saturation.
bool IsSaturated(const RunStats& stats);

}  // namespace encoderd::loadtest
