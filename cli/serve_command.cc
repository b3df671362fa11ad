#include "cli/serve_command.h"

#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_posix.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cli/flags.h"
#include "cli/shutdown_signals.h"
#include "core/listen_socket.h"
#include "kernels/cpu_features.h"
#include "server/config/access_secrets.h"
#include "server/config/config_loader.h"
#include "server/core/model_registry.h"
#include "server/exporter/metrics_endpoint.h"
#include "server/grpc/bearer_auth.h"
#include "server/grpc/encoder_service.h"
#include "server/grpc/health_service.h"
#include "server/metrics/json_log_format.h"
#include "server/net/connection_guard.h"

namespace encoderd::server {
namespace {

// Synchronous server threads beyond max_concurrent_requests (the quota below):
// pollers and reflection.
constexpr int kSpareServerThreads = 32;
// SETTINGS_MAX_CONCURRENT_STREAMS the server advertises.
constexpr int kMaxConcurrentStreams = 1000;
// Health Watch streams one client connection may hold open at once
// (HealthService).
constexpr int kWatchesPerConnection = 4;
// Connections the health port's guard keeps open at most (or
// listen.max_connections if lower): probes and load balancers' health
// checkers, not clients. Its own small share of the fd limit, so that
// connections to the health port cannot take the gRPC port's.
constexpr int kHealthMaxConnections = 256;

int HealthMaxConnections(const ListenConfig& listen) {
  return std::min(listen.max_connections, kHealthMaxConnections);
}

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

// Removes the server reflection plugin from a builder. Loading
// libgrpc++_reflection registers the plugin for every ServerBuilder (a static
// initializer calls InitProtoReflectionServerBuilderPlugin), so reflection is
// off only where this option takes it out again.
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                                    return p->name() == "proto_server_reflection";
                                  }),
                   plugins->end());
  }
};

// Plaintext, or TLS with the configured certificate, verifying client
// certificates against the client CA when one is set (required for mutual TLS).
std::shared_ptr<grpc::ServerCredentials> MainPortCredentials(const TlsConfig& tls,
                                                             const AccessSecrets& secrets) {
  if (secrets.tls_cert_pem.empty()) return grpc::InsecureServerCredentials();
  grpc_ssl_client_certificate_request_type request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  if (!secrets.tls_client_ca_pem.empty()) {
    request = tls.require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                      : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  grpc::SslServerCredentialsOptions options(request);
  options.pem_root_certs = secrets.tls_client_ca_pem;
  options.pem_key_cert_pairs.push_back({secrets.tls_key_pem, secrets.tls_cert_pem});
  return grpc::SslServerCredentials(options);
}

// Seconds of the config (0 to a year: ServerConfig::Validate) as the
// guard's milliseconds.
std::chrono::milliseconds SecondsToMs(double seconds) {
  return std::chrono::milliseconds(std::llround(seconds * 1000.0));
}

// listen.max_connection_* and listen.keepalive_* as gRPC's arguments (ms).
void SetConnectionLifetime(const ListenConfig& listen, grpc::ServerBuilder* builder) {
  const auto ms = [](double seconds) {
    return static_cast<int>(std::min(seconds * 1000.0, static_cast<double>(INT_MAX)));
  };
  if (listen.max_connection_age_s > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, ms(listen.max_connection_age_s));
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                                ms(listen.max_connection_age_grace_s));
  }
  if (listen.max_connection_idle_s > 0)
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, ms(listen.max_connection_idle_s));
  if (listen.keepalive_time_s > 0)
    builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, ms(listen.keepalive_time_s));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ms(listen.keepalive_timeout_s));
}

// The plaintext port listen.health_port: a server with `health` (which must
// outlive it) and nothing else: no reflection; gRPC answers every other
// method UNIMPLEMENTED. With listen.http2_guard, behind a connection guard of
// its own, as the gRPC port is: the same connection cap and HTTP/2 checks
// (gRPC 1.51 listening itself had neither: no cap on connections, and a
// rapid-reset client could keep its threads busy), with a cap of its own
// (HealthMaxConnections). Its connections are counted with port="health"
// in encoderd_open_connections and encoderd_connections_closed_total (until
// 2026-12-02 they were in neither); the guard's warnings name the health
// port.
struct HealthPort {
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<ConnectionGuard> guard;  // declared after the server: destroyed first
  int port = 0;
};

StatusOr<HealthPort> StartHealthPort(const ListenConfig& listen, HealthService* health,
                                     int grpc_port_connections, ServingMetrics* metrics) {
  const std::string address = HostPort(listen.address, listen.health_port);
  grpc::ServerBuilder builder;
  builder.SetOption(std::make_unique<WithoutReflection>());
  builder.RegisterService(health);
  HealthPort started;
  if (!listen.http2_guard)
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &started.port);
  builder.SetMaxReceiveMessageSize(64 * 1024);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams);
  started.server = builder.BuildAndStart();
  if (!started.server) return Unavailable("cannot start the health server (listen.health_port)");
  if (listen.http2_guard) {
    ConnectionGuardOptions options;
    options.name = "health port";
    options.port = GuardPort::kHealth;
    options.cap_setting = "listen.max_connections, at most " +
                          std::to_string(kHealthMaxConnections) + " on the health port";
    options.max_connections = HealthMaxConnections(listen);
    // The gRPC port's guard, started first, and the connections it may hold.
    options.others_connections = grpc_port_connections;
    options.http2.premature_reset_rate = listen.http2_max_reset_rate;
    options.send_timeout = SecondsToMs(listen.send_timeout_s);
    auto guard = ConnectionGuard::Start(
        listen.address, listen.health_port,
        [s = started.server.get()](int fd) { grpc::AddInsecureChannelFromFd(s, fd); }, options,
        metrics);
    if (!guard.ok()) {
      started.server->Shutdown(std::chrono::system_clock::now());
      return Status(guard.status().code(),
                    "health port: " + guard.status().message() + " (listen.health_port)");
    }
    started.guard = std::move(guard).value();
    started.port = started.guard->port();
  }
  if (started.port == 0) {
    started.server->Shutdown(std::chrono::system_clock::now());
    return Unavailable("cannot listen on " + address + " (listen.health_port)");
  }
  return started;
}

// Sets `service` ("" for the whole server) to `serving` on every server's
// health service; the health port mirrors the gRPC port this way.
void SetServing(const std::vector<HealthService*>& health, const std::string& service,
                bool serving) {
  for (HealthService* h : health) h->SetServingStatus(service, serving);
}

void SetHealth(const std::vector<HealthService*>& health, const ServerConfig& config,
               bool serving) {
  SetServing(health, "", serving);
  for (const ModelConfig& m : config.models) SetServing(health, m.name, serving);
}

// The streams open on the connections of every gRPC server in the process:
// what channelz counts for each connection, streams started less those that
// succeeded or failed. -1 when channelz does not tell, or lists fewer than
// `servers` servers (channelz off for one of them).
int64_t OpenStreams(size_t servers) {
  const auto parse = [](char* text) {
    nlohmann::json j = nlohmann::json::parse(text ? text : "", nullptr, /*allow_exceptions=*/false);
    gpr_free(text);
    return j;
  };
  // channelz writes int64 fields as strings and leaves out those that are 0.
  const auto count = [](const nlohmann::json& data, const char* field) -> int64_t {
    auto it = data.find(field);
    if (it == data.end()) return 0;
    if (it->is_string()) return std::stoll(it->get<std::string>());
    return it->is_number_integer() ? it->get<int64_t>() : 0;
  };
  try {
    const nlohmann::json listed = parse(grpc_channelz_get_servers(0));
    if (!listed.is_object()) return -1;
    const nlohmann::json server_list = listed.value("server", nlohmann::json::array());
    if (server_list.size() < servers) return -1;
    int64_t open = 0;
    for (const nlohmann::json& server : server_list) {
      const intptr_t id = std::stoll(server.at("ref").at("serverId").get<std::string>());
      for (intptr_t start = 0;;) {
        const nlohmann::json sockets = parse(grpc_channelz_get_server_sockets(id, start, 100));
        if (!sockets.is_object()) return -1;
        const nlohmann::json refs = sockets.value("socketRef", nlohmann::json::array());
        for (const nlohmann::json& ref : refs) {
          const intptr_t socket_id = std::stoll(ref.at("socketId").get<std::string>());
          const nlohmann::json socket = parse(grpc_channelz_get_socket(socket_id));
          if (!socket.is_object() || !socket.contains("socket")) continue;  // closed meanwhile
          const nlohmann::json data = socket["socket"].value("data", nlohmann::json::object());
          open += count(data, "streamsStarted") - count(data, "streamsSucceeded") -
                  count(data, "streamsFailed");
          start = socket_id + 1;
        }
        if (refs.empty() || sockets.value("end", false)) break;
      }
    }
    return open;
  } catch (const std::exception&) {
    return -1;
  }
}

// How long after a server's GOAWAY went out its connections may be closed,
// as the connection guard closes idle ones (ConnectionGuard::Drain).
constexpr std::chrono::seconds kCloseIdleAfter{1};

// Shuts the servers down one after the other by `deadline` (`flushed_by`
// is the same instant on the steady clock, for the guards' flush at the
// end): each refuses new
// calls (GOAWAY) and waits for the calls in flight, cancelling what is left
// at the deadline. gRPC's Shutdown also waits for every connection to
// close: it closes one itself once the client has answered the PING that
// follows its GOAWAY and has no stream open, but a client that answers late
// or not at all held the exit (an idle grpcio channel 4.1 s; a client that
// answers nothing 20 s, or the grace if shorter). The connection guard
// closes idle connections on its port (ConnectionGuard::Drain), plaintext or
// TLS; a port without the guard is gRPC's. So once a server's GOAWAY
// went out kCloseIdleAfter ago and no stream is open on any connection of
// any server (OpenStreams: gRPC's own count, which holds a call from its
// headers until its status is sent, a request still arriving and an answer
// still being written included), its connections are closed
// (grpc_server_cancel_all_calls, which then finds no call to cancel). Only
// for the servers without a guard (`guards[i]` null): the connections a
// guard hands its server (AddInsecureChannelFromFd) are the guard's to
// close, and are not in channelz's count. A server's guard stops accepting
// and starts draining (ConnectionGuard::StopAccepting, Drain) just before
// that server's Shutdown: the health port takes new connections (and
// answers NOT_SERVING) while the gRPC port drains.
// `/usr/bin/python3 loadtest/scripts/drain_time.py --no-guard [--tls]`,
// one idle grpcio channel: exit 4.13 s after SIGTERM before, 1.22-1.27 s
// then, 1.47-1.58 s (guarded) since the guard waits for the client's kernel
// to acknowledge what it was sent (docs/reliability.md).
//
// Each server's health Watch streams are ended (HealthService::EndWatches)
// once its GOAWAY went out, within 100 ms: before it, a client with
// client-side health checking would open another Watch at once. So are the
// gRPC port's EmbedStreams (EncoderService::EndStreams, every 100 ms from
// then on), each once the message it holds is answered: a client may keep
// one open for hours. The health
// port's Watches stay open (NOT_SERVING) while the gRPC port drains, so
// they are left out of the count then (they are the only long streams the
// health port serves; read after channelz, so that a Watch ending in
// between is counted open, not left out twice).
void ShutDown(const std::vector<grpc::Server*>& servers,
              const std::vector<ConnectionGuard*>& guards,
              const std::vector<HealthService*>& health, EncoderService& service,
              std::chrono::system_clock::time_point deadline,
              std::chrono::steady_clock::time_point flushed_by) {
  std::mutex mu;
  std::condition_variable cv;
  size_t current = 0;  // the server shutting down; servers.size() once all are done
  std::chrono::steady_clock::time_point goaway = std::chrono::steady_clock::now();
  std::thread closer([&] {
    std::unique_lock<std::mutex> lock(mu);
    size_t closed = servers.size();  // the server whose connections were closed
    size_t ended = servers.size();   // the server whose Watch streams were ended
    // Readings of no open stream in a row: channelz reads a connection's
    // counters one after the other, so a stream that starts and ends
    // between two of its reads could hide one still open; two readings,
    // 100 ms apart, must agree.
    int quiet = 0;
    while (current < servers.size()) {
      cv.wait_for(lock, std::chrono::milliseconds(100));
      if (current < servers.size() && ended != current) {
        health[current]->EndWatches();
        ended = current;
      }
      // Every tick: a stream that held a message reads again once it is
      // answered, and is ended then.
      if (current == 0 && ended == 0) service.EndStreams();
      if (current >= servers.size() || closed == current || guards[current] ||
          std::chrono::steady_clock::now() - goaway < kCloseIdleAfter) {
        quiet = 0;
        continue;
      }
      // A call holding a slot or a place among the answers being sent is a
      // stream open: the channelz walk, which renders every connection's
      // JSON, waits until none does.
      int64_t open = service.in_flight() == 0 ? OpenStreams(servers.size()) : -1;
      for (size_t i = current + 1; i < servers.size() && open > 0; ++i)
        open -= health[i]->open_watches();
      quiet = open == 0 ? quiet + 1 : 0;
      if (quiet >= 2) {
        grpc_server_cancel_all_calls(servers[current]->c_server());
        closed = current;
        quiet = 0;
        spdlog::info("{}: no stream open {} s after the GOAWAY; closing its connections",
                     current == 0 ? "gRPC port" : "health port", kCloseIdleAfter.count());
      }
    }
  });
  for (size_t i = 0; i < servers.size(); ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      current = i;
      goaway = std::chrono::steady_clock::now();
    }
    if (guards[i]) {
      guards[i]->StopAccepting();
      guards[i]->Drain();
    }
    servers[i]->Shutdown(deadline);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    current = servers.size();
  }
  cv.notify_one();
  closer.join();
  // gRPC is done with its calls once their answers are with the guard, not
  // with the client: each guard's connections flush and close before the
  // process ends them (ConnectionGuard::AwaitClosed), by the same deadline.
  for (size_t i = 0; i < guards.size(); ++i) {
    if (guards[i] && !guards[i]->AwaitClosed(flushed_by))
      spdlog::warn("{}: connections still flushing at the end of shutdown.grace_s; closing them",
                   i == 0 ? "gRPC port" : "health port");
  }
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
  auto secrets = ReadAccessSecrets(config.listen);
  if (!secrets.ok()) {
    std::fprintf(stderr, "encoderd serve: %s\n", secrets.status().ToString().c_str());
    return 2;
  }
  SetUpLogging(config.log);
  spdlog::info("encoderd serve: {}", config.Summary());
  spdlog::info("{}", kernels::DescribeCpuFeatures());
  std::vector<std::string> names;
  for (const ModelConfig& m : config.models) names.push_back(m.name);
  ModelRegistry registry(names);
  // A signal while the models load: with none serving yet, nothing is in
  // flight, and the process exits at once (until 2026-12-04 it finished
  // loading first, 40 s for 200 replicas, past any grace); with some
  // serving, the loop below loads no more and they drain.
  // (A flag the watcher thread shares, not the registry, which a return
  // before WaitForShutdownSignal destroys while the thread lives on.)
  auto serving_any = std::make_shared<std::atomic<bool>>(false);
  InstallShutdownSignalHandlers([serving_any](int signal_number) {
    if (serving_any->load()) return;
    spdlog::info("signal {} while loading the models: exiting", signal_number);
    spdlog::default_logger()->flush();
    std::_Exit(0);
  });
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
    spdlog::info("metrics on http://{}/metrics", HostPort(config.listen.address, metrics->port()));
  }
  ServingMetrics* sink = metrics ? metrics->metrics() : nullptr;
  EncoderService service(&registry, config.listen.max_concurrent_requests, sink,
                         config.log.access_log_sample, BearerAuth(secrets->bearer_token),
                         config.listen.fair_share, config.listen.max_send_message_bytes);

  // Declared before the servers, which must be gone before it is. Health
  // Watch streams: a client-side health checker opens one per connection
  // and service name it watches; kWatchesPerConnection on each, for as
  // many connections as the gRPC port's guard allows.
  const int64_t max_watches = int64_t{kWatchesPerConnection} * config.listen.max_connections;
  HealthService health(max_watches, kWatchesPerConnection);
  HealthService health_port_health(
      int64_t{kWatchesPerConnection} * HealthMaxConnections(config.listen), kWatchesPerConnection);
  // NOT_SERVING from the start, until the models are loaded.
  SetHealth({&health, &health_port_health}, config, false);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (!config.listen.reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  int port = 0;
  const std::string address = HostPort(config.listen.address, config.listen.port);
  // The guard listens and hands gRPC each connection it accepts, as
  // plaintext: on a TLS port it terminates TLS itself (tls_terminator.h).
  const bool guarded = config.listen.http2_guard;
  std::shared_ptr<TlsContext> guard_tls;
  if (guarded && !secrets->tls_cert_pem.empty()) {
    TlsServerOptions tls;
    tls.cert_chain_pem = secrets->tls_cert_pem;
    tls.key_pem = secrets->tls_key_pem;
    tls.client_ca_pem = secrets->tls_client_ca_pem;
    tls.require_client_cert = config.listen.tls.require_client_cert;
    auto context = TlsContext::Create(tls);
    if (!context.ok()) {
      spdlog::error("{}", context.status().message());
      return 1;
    }
    guard_tls = std::move(context).value();
  }
  if (!guarded)
    builder.AddListeningPort(address, MainPortCredentials(config.listen.tls, *secrets), &port);
  builder.RegisterService(&service);
  builder.RegisterService(&health);
  builder.SetMaxReceiveMessageSize(config.listen.max_receive_message_bytes);
  builder.SetMaxSendMessageSize(config.listen.max_send_message_bytes);
  SetConnectionLifetime(config.listen, &builder);
  // Streams a client may open at once on one connection (gRPC 1.51 sets no
  // limit); more wait in the client. The HTTP/2 guard closes a connection
  // that goes past twice this.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams);
  // Every encoderd.v1 and grpc.health.v1 RPC runs on the callback API and
  // holds no thread; reflection, the synchronous service left, holds one of
  // the synchronous server's threads per call. The quota is a backstop that
  // keeps a flood of those from growing the thread count without bound.
  grpc::ResourceQuota quota("encoderd");
  quota.SetMaxThreads(config.listen.max_concurrent_requests + kSpareServerThreads);
  builder.SetResourceQuota(quota);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  // Declared after the server: destroyed first, it attaches nothing to a
  // server that is gone.
  std::unique_ptr<ConnectionGuard> guard;
  if (server && guarded) {
    ConnectionGuardOptions options;
    options.max_connections = config.listen.max_connections;
    options.max_connections_per_address = config.listen.max_connections_per_address;
    if (config.listen.health_port != 0)
      options.others_connections = HealthMaxConnections(config.listen);
    options.http2.premature_reset_rate = config.listen.http2_max_reset_rate;
    options.send_timeout = SecondsToMs(config.listen.send_timeout_s);
    options.tls = guard_tls;
    // An EmbedStream holds a concurrency slot from its start, which bounds
    // the open ones (call_gate.h).
    options.incomplete_requests.uncounted_paths = {"/encoderd.v1.Encoder/EmbedStream"};
    if (config.listen.refuse_in_guard)
      options.screen = [&service](const CallHead& call) {
        CallVerdict verdict;
        verdict.status =
            service.ScreenCall(call.path, call.authorization, call.timeout, call.peer,
                               call.forwarded_open, &verdict.request_id, &verdict.forwarded_work);
        return verdict;
      };
    auto started = ConnectionGuard::Start(
        config.listen.address, config.listen.port,
        [s = server.get()](int fd) { grpc::AddInsecureChannelFromFd(s, fd); }, options, sink);
    if (!started.ok()) {
      spdlog::error("{} (listen.http2_guard)", started.status().message());
      server->Shutdown(std::chrono::system_clock::now());
      return 1;
    }
    guard = std::move(started).value();
    port = guard->port();
  }
  if (!server || port == 0) {
    spdlog::error(
        "cannot listen on {}{}", address,
        secrets->tls_cert_pem.empty()
            ? ""
            : " (TLS: are listen.tls.cert_file and listen.tls.key_file a matching pair?)");
    return 1;
  }
  std::vector<grpc::Server*> servers = {server.get()};
  std::vector<HealthService*> health_services = {&health};
  std::vector<ConnectionGuard*> guards = {guard.get()};
  HealthPort health_port;
  if (config.listen.health_port != 0) {
    auto started = StartHealthPort(config.listen, &health_port_health,
                                   guard ? guard->max_connections() : 0, sink);
    if (!started.ok()) {
      spdlog::error("{}", started.status().message());
      server->Shutdown(std::chrono::system_clock::now());
      return 1;
    }
    health_port = std::move(started).value();
    servers.push_back(health_port.server.get());
    guards.push_back(health_port.guard.get());
    health_services.push_back(&health_port_health);
    spdlog::info("health (plaintext, grpc.health.v1.Health only) on {}{}",
                 HostPort(config.listen.address, health_port.port),
                 health_port.guard
                     ? " (HTTP/2 guard, at most " +
                           std::to_string(health_port.guard->max_connections()) + " connections)"
                     : std::string());
  }
  std::string how;
  if (!secrets->tls_cert_pem.empty()) how = " (TLS)";
  if (guard)
    how = std::string(guard_tls ? " (TLS, terminated by the HTTP/2 guard" : " (HTTP/2 guard") +
          ", at most " + std::to_string(guard->max_connections()) + " connections)";
  spdlog::info("listening on {}{}", HostPort(config.listen.address, port), how);

  for (const ModelConfig& m : config.models) {
    if (ShutdownSignalReceived() != 0) break;
    auto model = ServedModel::Load(m, sink, config.listen.fair_share);
    if (!model.ok()) {
      spdlog::error("{}", model.status().ToString());
      for (grpc::Server* s : servers) s->Shutdown(std::chrono::system_clock::now());
      for (const auto& loaded : registry.Loaded()) loaded->batcher().Stop();
      return 1;
    }
    registry.Add(std::shared_ptr<ServedModel>(std::move(model).value()));
    serving_any->store(true);
    SetServing(health_services, m.name, true);
  }
  if (ShutdownSignalReceived() == 0) {
    SetServing(health_services, "", true);
    spdlog::info("serving {} model(s)", config.models.size());
  }

  const int signal_number = WaitForShutdownSignal();
  const auto grace = std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::duration<double>(config.shutdown.grace_s));
  spdlog::info("signal {}: draining (grace {} s)", signal_number, config.shutdown.grace_s);
  registry.StartDraining();
  SetHealth(health_services, config, false);
  const auto start = std::chrono::steady_clock::now();
  // Refuses new calls and waits for in-flight ones, cancelling what is left
  // at the deadline; the health port answers NOT_SERVING until the gRPC port
  // has drained.
  ShutDown(servers, guards, health_services, service, std::chrono::system_clock::now() + grace,
           std::chrono::steady_clock::now() + grace);
  for (const auto& model : registry.Loaded()) model->batcher().Stop();
  int ended_watches = 0;
  for (HealthService* h : health_services) ended_watches += h->ended_watches();
  if (ended_watches > 0)
    spdlog::info("health: {} Watch stream(s) ended by the drain", ended_watches);
  if (service.ended_streams() > 0)
    spdlog::info("{} EmbedStream(s) ended by the drain", service.ended_streams());
  spdlog::info("stopped after {:.3f} s",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return 0;
}

int RunHealthCommand(const std::vector<std::string>& args) {
  std::string address = "127.0.0.1";
  std::string service;
  // The plaintext health port when the daemon has one (with TLS on the gRPC
  // port needs it), else the gRPC port, read as `serve` reads them without
  // flags (ENCODERD_CONFIG's file, then ENCODERD_* variables), at the
  // daemon's address unless it listens on every address (until 2026-12-04
  // only ENCODERD_PORT and ENCODERD_HEALTH_PORT were read, so a listen.port
  // in the config file failed the images' HEALTHCHECK).
  int64_t port = 50051;
  if (const StatusOr<ServerConfig> config = LoadServerConfig({}); config.ok()) {
    const ListenConfig& listen = config->listen;
    const int configured = listen.health_port > 0 ? listen.health_port : listen.port;
    if (configured > 0) port = configured;
    // "::" takes IPv4 too.
    if (listen.address != "0.0.0.0" && listen.address != "::") address = listen.address;
  } else {
    for (const char* name : {"ENCODERD_PORT", "ENCODERD_HEALTH_PORT"}) {
      int64_t value = 0;
      const char* text = std::getenv(name);
      if (text != nullptr && ParseInt(text, &value) && value > 0 && value <= 65535) port = value;
    }
  }
  double timeout_s = 2;
  Flags flags;
  flags.String("--address", &address);
  flags.Value("--port", "a port in 1..65535", [&port](const std::string& v) {
    return ParseInt(v, &port) && port >= 1 && port <= 65535;
  });
  flags.String("--service", &service);
  flags.Value("--timeout", "seconds in 0.001..3600", [&timeout_s](const std::string& v) {
    return ParseDouble(v, &timeout_s) && timeout_s >= 0.001 && timeout_s <= 3600;
  });
  if (const std::string error = flags.Parse(args); !error.empty()) {
    std::fprintf(stderr,
                 "encoderd health: %s\nusage: encoderd health [--address HOST] [--port PORT] "
                 "[--service NAME] [--timeout S]\n",
                 error.c_str());
    return 2;
  }
  if (service.size() > 127) {
    std::fprintf(stderr, "encoderd health: --service longer than 127 bytes\n");
    return 2;
  }
  // HealthCheckRequest{service = 1}, encoded by hand: no generated stubs.
  std::string request_bytes;
  if (!service.empty())
    request_bytes = std::string{'\x0a', static_cast<char>(service.size())} + service;
  const std::string target = HostPort(address, port);
  grpc::ChannelArguments channel_args;
  channel_args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);  // never through $http_proxy
  grpc::GenericStub stub(
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), channel_args));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6)));
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status status) { done.set_value(std::move(status)); });
  const grpc::Status status = done.get_future().get();
  if (!status.ok()) {
    std::fprintf(stderr, "encoderd health: %s: %s\n", target.c_str(),
                 status.error_message().c_str());
    return 1;
  }
  // HealthCheckResponse{status = 1 (varint)}: SERVING is 1, absent UNKNOWN.
  std::vector<grpc::Slice> slices;
  std::string reply;
  if (response.Dump(&slices).ok())
    for (const grpc::Slice& s : slices)
      reply.append(reinterpret_cast<const char*>(s.begin()), s.size());
  const int serving_status = reply.size() >= 2 && reply[0] == '\x08' ? reply[1] : 0;
  const char* names[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
  std::printf("%s\n", serving_status >= 0 && serving_status <= 3 ? names[serving_status] : "?");
  return serving_status == 1 ? 0 : 1;
}

}  // namespace encoderd::server
