// What happens once per answered request besides the answer: metrics, the
// sampled access log line, and an error log line (with the request id the
// client receives as `x-request-id`) for failures on the server's side.
// Free of gRPC; thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "server/metrics/serving_metrics.h"

namespace encoderd::server {

class RequestObserver {
 public:
  // `metrics` may be null (metrics off); `access_log_sample` in [0, 1].
  RequestObserver(ServingMetrics* metrics, double access_log_sample)
      : metrics_(metrics), access_log_sample_(access_log_sample) {}

  ServingMetrics* metrics() const { return metrics_; }

  // Any handler thread, after the answer is known. `model`: the served
  // model's name or "". `error`: the status message ("" when OK).
  void Finish(uint64_t request_id, const std::string& model, const RequestSample& sample,
              const std::string& error);

 private:
  // True for every 1/access_log_sample-th call (deterministic, evenly spaced).
  bool SampleAccess();

  ServingMetrics* const metrics_;
  const double access_log_sample_;
  std::atomic<uint64_t> answered_{0};
};

}  // namespace encoderd::server
