// Gauges read when Prometheus scrapes rather than on the request path: queue
// depth and capacity, model readiness and info, build info, live request
// objects and held concurrency slots, and the process' memory and CPU time
// from /proc.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <string>
#include <vector>

#include "server/config/config.h"
#include "server/core/model_registry.h"

namespace encoderd::server {

class ServerStateCollector final : public prometheus::Collectable {
 public:
  // `registry` must outlive the collector (and the exposer scraping it).
  ServerStateCollector(const ServerConfig& config, const ModelRegistry* registry,
                       std::string version);

  // Called on the exposer's HTTP threads.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::vector<ModelConfig> models_;
  const ModelRegistry* registry_;
  const std::string version_;
};

}  // namespace encoderd::server
