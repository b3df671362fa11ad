#include "server/serve_command.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "server/config_loader.h"
#include "server/encoder_service.h"
#include "server/json_log_format.h"
#include "server/metrics_endpoint.h"
#include "server/model_registry.h"
#include "server/shutdown_signals.h"

namespace encoderd::server {
namespace {

// Server threads beyond max_concurrent_requests: pollers, health checks,
// ModelInfo and the refusals themselves.
constexpr int kSpareServerThreads = 32;

void SetUpLogging(const LogConfig& log) {
  auto logger = spdlog::stderr_logger_mt("encoderd");
  if (log.format == "json") {
    logger->set_formatter(MakeJsonLogFormatter());
  } else {
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %L %v");
  }
  logger->set_level(spdlog::level::from_str(log.level));
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

void SetHealth(grpc::Server* server, const ServerConfig& config, bool serving) {
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  if (!health) return;
  health->SetServingStatus("", serving);
  for (const ModelConfig& m : config.models) health->SetServingStatus(m.name, serving);
}

}  // namespace

int RunServeCommand(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "-h" || a == "--help") {
      std::printf("usage: encoderd serve [flags]\nflags:\n%s", ConfigFlagsUsage().c_str());
      return 0;
    }
  }
  auto loaded = LoadServerConfig(args);
  if (!loaded.ok()) {
    std::fprintf(stderr, "encoderd serve: %s\n", loaded.status().ToString().c_str());
    return 2;
  }
  const ServerConfig config = std::move(loaded).value();
  SetUpLogging(config.log);
  spdlog::info("encoderd serve: {}", config.Summary());
  InstallShutdownSignalHandlers();

  std::vector<std::string> names;
  for (const ModelConfig& m : config.models) names.push_back(m.name);
  ModelRegistry registry(names);
  // Declared after the registry (its collector reads it) and before the
  // service and the server (which report to it).
  std::unique_ptr<MetricsEndpoint> metrics;
  if (config.metrics.enabled) {
    auto started = MetricsEndpoint::Start(config, &registry);
    if (!started.ok()) {
      spdlog::error("{}", started.status().ToString());
      return 1;
    }
    metrics = std::move(started).value();
    spdlog::info("metrics on http://{}:{}/metrics", config.listen.address, metrics->port());
  }
  ServingMetrics* sink = metrics ? metrics->metrics() : nullptr;
  EncoderService service(&registry, config.listen.max_concurrent_requests, sink,
                         config.log.access_log_sample);

  grpc::EnableDefaultHealthCheckService(true);
  if (config.listen.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string address = config.listen.address + ":" + std::to_string(config.listen.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(config.listen.max_receive_message_bytes);
  // Each call in progress holds a thread of the synchronous server. The
  // service admits at most max_concurrent_requests inference calls (refusing
  // the rest at once); the quota is a backstop that keeps a flood of cheap
  // calls from growing the thread count without bound.
  grpc::ResourceQuota quota("encoderd");
  quota.SetMaxThreads(config.listen.max_concurrent_requests + kSpareServerThreads);
  builder.SetResourceQuota(quota);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    spdlog::error("cannot listen on {}", address);
    return 1;
  }
  SetHealth(server.get(), config, false);
  spdlog::info("listening on {}:{}", config.listen.address, port);

  for (const ModelConfig& m : config.models) {
    auto model = ServedModel::Load(m, sink);
    if (!model.ok()) {
      spdlog::error("{}", model.status().ToString());
      server->Shutdown(std::chrono::system_clock::now());
      for (const auto& loaded : registry.Loaded()) loaded->batcher().Stop();
      return 1;
    }
    registry.Add(std::shared_ptr<ServedModel>(std::move(model).value()));
    if (auto* health = server->GetHealthCheckService()) health->SetServingStatus(m.name, true);
  }
  if (auto* health = server->GetHealthCheckService()) health->SetServingStatus("", true);
  spdlog::info("serving {} model(s)", config.models.size());

  const int signal_number = WaitForShutdownSignal();
  const auto grace = std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::duration<double>(config.shutdown.grace_s));
  spdlog::info("signal {}: draining (grace {} s)", signal_number, config.shutdown.grace_s);
  registry.StartDraining();
  SetHealth(server.get(), config, false);
  const auto start = std::chrono::steady_clock::now();
  // Refuses new calls and waits for in-flight ones, cancelling what is left
  // at the deadline.
  server->Shutdown(std::chrono::system_clock::now() + grace);
  for (const auto& model : registry.Loaded()) model->batcher().Stop();
  spdlog::info("stopped after {:.3f} s",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return 0;
}

}  // namespace encoderd::server
