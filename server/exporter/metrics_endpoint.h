// The Prometheus pull endpoint: an HTTP server on listen.address:metrics_port
// serving /metrics from a registry that holds the request/batch metrics
// (PrometheusMetrics) and the scrape-time gauges (ServerStateCollector).
// Serialization uses prometheus-cpp core; the HTTP side is MetricsHttpServer.
#pragma once

#include <memory>

#include "server/config/config.h"
#include "server/core/model_registry.h"
#include "server/metrics/serving_metrics.h"

namespace encoderd::server {

class MetricsEndpoint {
 public:
  // Binds listen.address:listen.metrics_port (0 picks a free port). UNAVAILABLE
  // when the port cannot be bound. `registry` must outlive the endpoint.
  static StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const ServerConfig& config,
                                                          const ModelRegistry* registry);
  ~MetricsEndpoint();

  // Where handlers and batchers report; valid as long as the endpoint.
  ServingMetrics* metrics();
  // The bound port.
  int port() const;

 private:
  struct Impl;
  explicit MetricsEndpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace encoderd::server
