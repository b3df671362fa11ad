#include "server/exporter/metrics_endpoint.h"

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <string>
#include <vector>

#include "server/exporter/metrics_http_server.h"
#include "server/exporter/server_state_collector.h"
#include "server/metrics/prometheus_metrics.h"

#ifndef ENCODERD_VERSION
#define ENCODERD_VERSION "unknown"
#endif

namespace encoderd::server {

struct MetricsEndpoint::Impl {
  prometheus::Registry registry;
  std::unique_ptr<ServerStateCollector> state;
  std::unique_ptr<PrometheusMetrics> metrics;
  // Declared last: destroyed (joined) first, so no scrape runs during teardown.
  std::unique_ptr<MetricsHttpServer> http;

  // The exposition text of every metric (called on the HTTP thread).
  std::string Render() const {
    std::vector<prometheus::MetricFamily> families = registry.Collect();
    for (auto& f : state->Collect()) families.push_back(std::move(f));
    return prometheus::TextSerializer().Serialize(families);
  }
};

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsEndpoint::~MetricsEndpoint() = default;

StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const ServerConfig& config,
                                                                  const ModelRegistry* registry) {
  auto impl = std::make_unique<Impl>();
  std::vector<std::string> names;
  for (const ModelConfig& m : config.models) names.push_back(m.name);
  impl->metrics = std::make_unique<PrometheusMetrics>(&impl->registry, names);
  impl->state = std::make_unique<ServerStateCollector>(config, registry, ENCODERD_VERSION);
  const Impl* self = impl.get();
  ASSIGN_OR_RETURN(impl->http,
                   MetricsHttpServer::Start(config.listen.address, config.listen.metrics_port,
                                            [self] { return self->Render(); }));
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(impl)));
}

ServingMetrics* MetricsEndpoint::metrics() { return impl_->metrics.get(); }
int MetricsEndpoint::port() const { return impl_->http->port(); }

}  // namespace encoderd::server
