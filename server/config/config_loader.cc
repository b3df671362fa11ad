#include "server/config/config_loader.h"

#include <cstdlib>
#include <sstream>
#include <utility>

#include "core/file.h"

namespace encoderd::server {
namespace {

struct Option {
  const char* flag;  // --port
  const char* env;   // ENCODERD_PORT
  const char* key;   // listen.port
  const char* help;
};

// Every option settable from the environment and the command line. "model.*"
// keys apply to every configured model; --model-dir/--model-name to the first.
constexpr Option kOptions[] = {
    {"--address", "ENCODERD_ADDRESS", "listen.address", "address to bind"},
    {"--port", "ENCODERD_PORT", "listen.port", "gRPC port (0: any free port)"},
    {"--metrics-port", "ENCODERD_METRICS_PORT", "listen.metrics_port", "metrics port"},
    {"--reflection", "ENCODERD_REFLECTION", "listen.reflection", "true|false"},
    {"--max-concurrent-requests", "ENCODERD_MAX_CONCURRENT_REQUESTS",
     "listen.max_concurrent_requests", "inference calls served at once"},
    {"--fair-share", "ENCODERD_FAIR_SHARE", "listen.fair_share",
     "true|false: fair queuing and slot shares per client connection"},
    {"--max-receive-message-bytes", "ENCODERD_MAX_RECEIVE_MESSAGE_BYTES",
     "listen.max_receive_message_bytes", "largest request message"},
    {"--max-send-message-bytes", "ENCODERD_MAX_SEND_MESSAGE_BYTES", "listen.max_send_message_bytes",
     "largest reply message (Encode calls beyond it refused)"},
    {"--tls-cert-file", "ENCODERD_TLS_CERT_FILE", "listen.tls.cert_file",
     "PEM certificate chain: TLS on"},
    {"--tls-key-file", "ENCODERD_TLS_KEY_FILE", "listen.tls.key_file", "PEM private key"},
    {"--tls-client-ca-file", "ENCODERD_TLS_CLIENT_CA_FILE", "listen.tls.client_ca_file",
     "PEM CA that signs client certificates"},
    {"--tls-require-client-cert", "ENCODERD_TLS_REQUIRE_CLIENT_CERT",
     "listen.tls.require_client_cert", "true|false: mutual TLS"},
    {"--health-port", "ENCODERD_HEALTH_PORT", "listen.health_port",
     "plaintext port serving only grpc.health.v1.Health (0: off)"},
    {"--bearer-token-file", "ENCODERD_BEARER_TOKEN_FILE", "listen.auth.bearer_token_file",
     "file holding the bearer token inference calls need"},
    {"--http2-guard", "ENCODERD_HTTP2_GUARD", "listen.http2_guard",
     "true|false: relay the gRPC port through the rapid-reset guard (TLS: it terminates it)"},
    {"--http2-max-reset-rate", "ENCODERD_HTTP2_MAX_RESET_RATE", "listen.http2_max_reset_rate",
     "streams the connections of one client address may reset right after opening them, "
     "together, a second (guard)"},
    {"--max-connections", "ENCODERD_MAX_CONNECTIONS", "listen.max_connections",
     "client connections open at once (with the guard)"},
    {"--max-connections-per-address", "ENCODERD_MAX_CONNECTIONS_PER_ADDRESS",
     "listen.max_connections_per_address",
     "client connections one address (IPv6: its /64) may hold at once (guard; 0: no limit)"},
    {"--refuse-in-guard", "ENCODERD_REFUSE_IN_GUARD", "listen.refuse_in_guard",
     "true|false: the guard answers calls the overload control refuses (one model)"},
    {"--max-connection-age-s", "ENCODERD_MAX_CONNECTION_AGE_S", "listen.max_connection_age_s",
     "GOAWAY after this long, so clients reconnect and re-resolve (0: never)"},
    {"--max-connection-age-grace-s", "ENCODERD_MAX_CONNECTION_AGE_GRACE_S",
     "listen.max_connection_age_grace_s", "time calls in flight get after that GOAWAY"},
    {"--max-connection-idle-s", "ENCODERD_MAX_CONNECTION_IDLE_S", "listen.max_connection_idle_s",
     "close a connection without calls after this long (0: never)"},
    {"--keepalive-time-s", "ENCODERD_KEEPALIVE_TIME_S", "listen.keepalive_time_s",
     "ping a quiet client after this long (0: gRPC's 2 h)"},
    {"--keepalive-timeout-s", "ENCODERD_KEEPALIVE_TIMEOUT_S", "listen.keepalive_timeout_s",
     "close the connection when a ping is unanswered this long"},
    {"--send-timeout-s", "ENCODERD_SEND_TIMEOUT_S", "listen.send_timeout_s",
     "close a connection whose client does not take what waits for it within this long "
     "(guard; 0: never)"},
    {"--log-level", "ENCODERD_LOG_LEVEL", "log.level", "trace|debug|info|warn|error|off"},
    {"--log-format", "ENCODERD_LOG_FORMAT", "log.format", "text|json"},
    {"--access-log-sample", "ENCODERD_ACCESS_LOG_SAMPLE", "log.access_log_sample",
     "fraction of requests logged (0..1)"},
    {"--metrics", "ENCODERD_METRICS", "metrics.enabled", "true|false: serve /metrics"},
    {"--shutdown-grace-s", "ENCODERD_SHUTDOWN_GRACE_S", "shutdown.grace_s", "seconds"},
    {"--model-name", "ENCODERD_MODEL_NAME", "models[0].name", "name of the first model"},
    {"--model-dir", "ENCODERD_MODEL_DIR", "models[0].directory", "directory of the first model"},
    {"--device", "ENCODERD_DEVICE", "model.device", "cpu|cuda"},
    {"--dtype", "ENCODERD_DTYPE", "model.dtype", "float32|float16|bfloat16|int8 (int8: cpu)"},
    {"--replicas", "ENCODERD_REPLICAS", "model.replicas", "executors per model"},
    {"--max-batch-tokens", "ENCODERD_MAX_BATCH_TOKENS", "model.max_batch_tokens", "tokens"},
    {"--max-batch-sequences", "ENCODERD_MAX_BATCH_SEQUENCES", "model.max_batch_sequences",
     "sequences"},
    {"--max-batch-time-us", "ENCODERD_MAX_BATCH_TIME_US", "model.max_batch_time_us",
     "longest predicted batch (microseconds); 0: no limit"},
    {"--max-queue-delay-us", "ENCODERD_MAX_QUEUE_DELAY_US", "model.max_queue_delay_us",
     "microseconds"},
    {"--max-queue-size", "ENCODERD_MAX_QUEUE_SIZE", "model.max_queue_size", "requests"},
    {"--predict-deadlines", "ENCODERD_PREDICT_DEADLINES", "model.predict_deadlines",
     "true|false: refuse calls predicted to miss their deadline"},
    {"--max-queue-time-us", "ENCODERD_MAX_QUEUE_TIME_US", "model.max_queue_time_us",
     "microseconds a call without a deadline may be predicted to wait; 0: no limit"},
    {"--overload-queue-time-us", "ENCODERD_OVERLOAD_QUEUE_TIME_US", "model.overload_queue_time_us",
     "longest wait admitted under sustained overload (or one batch); 0: off"},
    {"--calibration-budget-ms", "ENCODERD_CALIBRATION_BUDGET_MS", "model.calibration_budget_ms",
     "time a model may spend timing its batch sizes as it loads; 0: none"},
    {"--max-client-batch-size", "ENCODERD_MAX_CLIENT_BATCH_SIZE", "model.max_client_batch_size",
     "texts per request"},
    {"--max-tokens", "ENCODERD_MAX_TOKENS", "model.max_tokens", "tokens per sequence"},
    {"--num-threads", "ENCODERD_NUM_THREADS", "model.num_threads", "CPU threads per executor"},
};

const Option* FindFlag(const std::string& flag) {
  for (const Option& o : kOptions)
    if (flag == o.flag) return &o;
  return nullptr;
}

}  // namespace

const char* ProcessEnv(const char* name) { return std::getenv(name); }

std::string ConfigFlagsUsage() {
  std::ostringstream s;
  s << "  --config FILE                 YAML config (env ENCODERD_CONFIG)\n"
    << "  --set KEY=VALUE               any key, e.g. models[0].max_tokens=128\n";
  for (const Option& o : kOptions) {
    // A flag too long for the column gets a line of its own (they were cut
    // to 30 columns: "--max-connection-age-grace-s Vtime calls...").
    const std::string f = std::string(o.flag) + " V";
    s << "  " << f;
    if (f.size() < 30)
      s << std::string(30 - f.size(), ' ');
    else
      s << "\n" << std::string(32, ' ');
    s << o.help << " (" << o.key << ", env " << o.env << ")\n";
  }
  return s.str();
}

StatusOr<ServerConfig> LoadServerConfig(const std::vector<std::string>& args,
                                        const EnvLookup& env) {
  // Flags are parsed first (they are applied last) so that --config is known.
  std::string config_file;
  if (const char* f = env("ENCODERD_CONFIG")) config_file = f;
  std::vector<std::pair<std::string, std::string>> flag_values;  // key, value
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    const size_t eq = flag.find('=');
    const bool inline_value = flag.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    const bool known = flag == "--config" || flag == "--set" || FindFlag(flag) != nullptr;
    if (!known) return InvalidArgument("unknown flag '" + args[i] + "'");
    if (!inline_value) {
      if (i + 1 >= args.size()) return InvalidArgument("flag '" + flag + "' needs a value");
      value = args[++i];
    }
    if (flag == "--config") {
      config_file = value;
    } else if (flag == "--set") {
      const size_t kv = value.find('=');
      if (kv == std::string::npos)
        return InvalidArgument("--set expects KEY=VALUE, got '" + value + "'");
      flag_values.emplace_back(value.substr(0, kv), value.substr(kv + 1));
    } else {
      flag_values.emplace_back(FindFlag(flag)->key, value);
    }
  }

  std::string yaml;
  if (!config_file.empty()) {
    ASSIGN_OR_RETURN(yaml, ReadWholeFile(config_file, "config file", FileKind::kAnyStream));
  }
  // YAML < environment < flags. An empty ENCODERD_* variable is unset, so
  // that `docker run -e ENCODERD_DTYPE=` clears an image's preset (it was
  // refused as a bad value until 2026-12-04). `models_after`: the models
  // the sources make, which a model.* key then sets, whichever source made
  // them and wherever the key comes (until 2026-12-04 it set only the
  // models made before it: ENCODERD_DTYPE missed `--set models[1].name=b`).
  const auto apply = [&](size_t models_after, ServerConfig* config) -> Status {
    if (!config_file.empty()) RETURN_IF_ERROR(ApplyYaml(yaml, config_file, config));
    while (config->models.size() < models_after) config->models.emplace_back();
    for (const Option& o : kOptions) {
      const char* v = env(o.env);
      if (v != nullptr && *v != '\0')
        RETURN_IF_ERROR(SetConfigValue(o.key, v, std::string("environment ") + o.env, config));
    }
    for (const auto& [key, value] : flag_values)
      RETURN_IF_ERROR(SetConfigValue(key, value, "command line", config));
    return Status::Ok();
  };
  ServerConfig first;
  RETURN_IF_ERROR(apply(0, &first));
  ServerConfig config;
  RETURN_IF_ERROR(apply(first.models.size(), &config));
  RETURN_IF_ERROR(config.Validate());
  return config;
}

}  // namespace encoderd::server
