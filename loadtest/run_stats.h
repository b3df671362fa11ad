// RunStats: what one load run measured, and the thread-safe Recorder the RPC
// completions feed. Latency is measured from the *intended* send time (open
// loop: the arrival time; closed loop: when the client was ready), so time a
// request spent waiting behind a slow server or a full client is counted
// rather than hidden (no coordinated omission). Service time, from the actual
// send, is kept separately for comparison.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "loadtest/latency_histogram.h"
#include "proto/grpc_code_name.h"  // GrpcCodeName, used with RunStats::errors_by_code

namespace encoderd::loadtest {

// One finished call. Times are steady-clock nanoseconds.
struct CallOutcome {
  int status_code = 0;  // grpc::StatusCode value
  int64_t intended_ns = 0;
  int64_t sent_ns = 0;
  int64_t done_ns = 0;
  int64_t texts = 0;
  // Sent when its deadline (from the intended send) had already passed: the
  // load generator fell behind, and the client, not the server, failed it.
  bool sent_past_deadline = false;
  // From the response (OK calls only).
  int64_t token_count = 0;
  int64_t tokenize_us = 0;
  int64_t queue_us = 0;
  int64_t inference_us = 0;
  int64_t server_total_us = 0;
};

// Calls whose intended send fell in one second of the measured window.
struct SecondStats {
  int64_t ok = 0;
  int64_t errors = 0;
  LatencyHistogram latency_us{5};  // done - intended, OK calls
};

struct RunStats {
  int64_t ok = 0;
  int64_t errors = 0;
  std::map<int, int64_t> errors_by_code;  // grpc::StatusCode -> count
  int64_t sent_past_deadline = 0;         // CallOutcome::sent_past_deadline
  int64_t texts = 0;                      // texts in OK calls
  int64_t tokens = 0;                     // sum of OK responses' token_count
  // Measured window: first counted intended send to last counted completion.
  int64_t first_intended_ns = 0;
  int64_t last_done_ns = 0;
  LatencyHistogram latency_us;  // done - intended, OK calls
  // done - intended, every counted call, a failed one at its failure: a call
  // that ran into its deadline counts here, not in latency_us.
  LatencyHistogram latency_all_us;
  LatencyHistogram service_us;   // done - sent, OK calls
  LatencyHistogram send_lag_us;  // sent - intended, all counted calls
  LatencyHistogram refusal_us;   // done - sent, RESOURCE_EXHAUSTED and UNAVAILABLE calls
  LatencyHistogram tokenize_us, queue_us, inference_us, server_total_us;
  // Client process CPU (user + system) and wall time over the whole run,
  // warm-up and drain included, seconds.
  double client_cpu_s = 0;
  double client_wall_s = 0;
  // Second i of the measured window (by intended send time).
  std::vector<SecondStats> per_second;
  // Sums of a least-squares line through the OK calls' (intended send,
  // latency) points, seconds from the window's start (`ok` of them):
  // LatencyGrowth.
  double fit_x = 0, fit_y = 0, fit_xy = 0, fit_xx = 0;

  double ElapsedSeconds() const;
  double RequestsPerSecond() const;
  double TokensPerSecond() const;
  // Seconds of latency the OK calls gained per second of arrivals (the
  // slope of the line above; 0 with fewer than two distinct send times). A
  // server that completes mu calls/s while lambda arrive makes each wait
  // lambda/mu - 1 s longer per second: its backlog's growth.
  double LatencyGrowth() const;
};

class Recorder {
 public:
  // `origin_ns`: the start of the measured window (second 0 of per_second).
  explicit Recorder(int64_t origin_ns = 0) : origin_ns_(origin_ns) {}
  void Record(const CallOutcome& outcome);
  // Copy of the totals so far.
  RunStats Snapshot() const;

 private:
  const int64_t origin_ns_;
  mutable std::mutex mu_;
  RunStats stats_;  // guarded by mu_
};

}  // namespace encoderd::loadtest
