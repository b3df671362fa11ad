#include "loadtest/run_stats.h"

#include <algorithm>

namespace encoderd::loadtest {
namespace {

// Runs longer than a day keep no per-second series past it.
constexpr int64_t kMaxSeconds = 86400;

}  // namespace

double RunStats::ElapsedSeconds() const {
  if (last_done_ns <= first_intended_ns) return 0;
  return static_cast<double>(last_done_ns - first_intended_ns) * 1e-9;
}

double RunStats::RequestsPerSecond() const {
  const double s = ElapsedSeconds();
  return s > 0 ? static_cast<double>(ok) / s : 0;
}

double RunStats::TokensPerSecond() const {
  const double s = ElapsedSeconds();
  return s > 0 ? static_cast<double>(tokens) / s : 0;
}

double RunStats::LatencyGrowth() const {
  const auto fit_n = static_cast<double>(ok);  // one point per OK call
  const double spread = fit_n * fit_xx - fit_x * fit_x;
  // Rounding leaves a spread of about 1e-16 of the sums where all points
  // share one send time.
  if (fit_n < 2 || spread <= 1e-12 * fit_n * fit_xx) return 0;
  return (fit_n * fit_xy - fit_x * fit_y) / spread;
}

void Recorder::Record(const CallOutcome& c) {
  std::lock_guard<std::mutex> lock(mu_);
  RunStats& s = stats_;
  if (s.ok + s.errors == 0 || c.intended_ns < s.first_intended_ns)
    s.first_intended_ns = c.intended_ns;
  s.last_done_ns = std::max(s.last_done_ns, c.done_ns);
  s.send_lag_us.Record((c.sent_ns - c.intended_ns) / 1000);
  s.latency_all_us.Record((c.done_ns - c.intended_ns) / 1000);
  if (c.sent_past_deadline) ++s.sent_past_deadline;
  const int64_t second = std::max<int64_t>(0, (c.intended_ns - origin_ns_) / 1000000000);
  if (second < kMaxSeconds) {
    if (static_cast<int64_t>(s.per_second.size()) <= second) s.per_second.resize(second + 1);
    SecondStats& slot = s.per_second[second];
    if (c.status_code != 0) {
      ++slot.errors;
    } else {
      ++slot.ok;
      slot.latency_us.Record((c.done_ns - c.intended_ns) / 1000);
    }
  }
  if (c.status_code != 0) {
    ++s.errors;
    ++s.errors_by_code[c.status_code];
    if (c.status_code == 8 || c.status_code == 14)  // RESOURCE_EXHAUSTED, UNAVAILABLE
      s.refusal_us.Record((c.done_ns - c.sent_ns) / 1000);
    return;
  }
  ++s.ok;
  s.texts += c.texts;
  s.tokens += c.token_count;
  s.latency_us.Record((c.done_ns - c.intended_ns) / 1000);
  const double x = static_cast<double>(c.intended_ns - origin_ns_) * 1e-9;
  const double y = static_cast<double>(c.done_ns - c.intended_ns) * 1e-9;
  s.fit_x += x;
  s.fit_y += y;
  s.fit_xy += x * y;
  s.fit_xx += x * x;
  s.service_us.Record((c.done_ns - c.sent_ns) / 1000);
  s.tokenize_us.Record(c.tokenize_us);
  s.queue_us.Record(c.queue_us);
  s.inference_us.Record(c.inference_us);
  s.server_total_us.Record(c.server_total_us);
}

RunStats Recorder::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace encoderd::loadtest
