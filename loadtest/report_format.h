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
std::string SweepCsvRow(double offered_rate, double window_s, const RunStats& stats);

// True when an open-loop run whose arrivals spanned window_s seconds was not
// sustained: more than 1% of calls failed, or the OK calls completed at less
// than 90% of the rate at which they arrived (the backlog kept growing). It
// compares with the arrivals actually generated, not the nominal rate, so
// Poisson noise at low rates does not read as saturation.
bool IsSaturated(double window_s, const RunStats& stats);

}  // namespace encoderd::loadtest
