// ServingMetrics recorded into a prometheus-cpp registry: counters and
// histograms per model (see docs/observability.md for the names). Series are
// created up front per configured model, or on first use for (rpc, code)
// pairs, and cached so an observation takes no lock of ours.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/metrics/serving_metrics.h"

namespace encoderd::server {

// The `model` label of requests that resolved to no served model (no model
// may take the name: ServerConfig::Validate).
inline constexpr char kNoModelLabel[] = "(none)";

class PrometheusMetrics final : public ServingMetrics {
 public:
  // Registers the families in `registry`, which must outlive this object.
  // `models`: the configured model names (other names count as kNoModelLabel).
  PrometheusMetrics(prometheus::Registry* registry, const std::vector<std::string>& models);
  ~PrometheusMetrics() override;

  void ObserveRequest(const std::string& model, const RequestSample& sample) override;
  void ObserveBatch(const std::string& model, const BatchSample& sample) override;
  void AddInFlight(const std::string& model, int delta) override;
  void ObserveDrop(const std::string& model, DropReason reason) override;
  void ObserveAdmitted(const std::string& model) override;
  void ObserveConnectionClosed(GuardPort port, ConnectionClose reason) override;
  void ObserveAnsweredByGuard() override;
  void ObserveRefusedIncomplete() override;
  void SetOpenConnections(GuardPort port, int64_t open) override;

  // Bucket bounds, exposed for tests and the docs.
  static const prometheus::Histogram::BucketBoundaries& LatencyBuckets();

 private:
  struct Families;
  struct ModelSeries;
  ModelSeries& Series(const std::string& model);

  std::unique_ptr<Families> families_;
  // Built in the constructor, read-only afterwards.
  std::map<std::string, std::unique_ptr<ModelSeries>> models_;
  std::unique_ptr<ModelSeries> no_model_;
  std::array<std::array<prometheus::Counter*, kNumConnectionCloses>, kNumGuardPorts>
      connections_closed_{};
  prometheus::Counter* answered_by_guard_ = nullptr;
  prometheus::Counter* refused_incomplete_ = nullptr;
  std::array<prometheus::Gauge*, kNumGuardPorts> connections_open_{};
};

}  // namespace encoderd::server
