// ServerConfig: setting values by key (shared by YAML, environment and flags),
// validation and the start-up summary.
#include "server/config/config.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <utility>

#include "core/listen_socket.h"
#include "engine/runtime/encoder.h"

namespace encoderd::server {

bool ParseInt(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool ParseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

namespace {

Status BadValue(const std::string& origin, const std::string& key, const std::string& value,
                const std::string& expected) {
  return InvalidArgument(origin + ": bad value '" + value + "' for '" + key + "' (expected " +
                         expected + ")");
}

bool ParseBool(const std::string& s, bool* out) {
  if (s == "true" || s == "1" || s == "yes" || s == "on") return *out = true, true;
  if (s == "false" || s == "0" || s == "no" || s == "off") return *out = false, true;
  return false;
}

// Parses `value` into the field at `key`; false when the key is unknown.
using Setter = std::function<Status(const std::string& value, const std::string& key,
                                    const std::string& origin)>;

// An integer that fits T: a value beyond it is refused, not wrapped (a port
// of 4294967296 became 0, a free port).
template <typename T>
Setter IntField(T* field) {
  return [field](const std::string& v, const std::string& key, const std::string& origin) {
    int64_t x = 0;
    if (!ParseInt(v, &x)) return BadValue(origin, key, v, "an integer");
    if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max()) {
      return BadValue(origin, key, v,
                      "an integer in " + std::to_string(std::numeric_limits<T>::min()) + ".." +
                          std::to_string(std::numeric_limits<T>::max()));
    }
    *field = static_cast<T>(x);
    return Status::Ok();
  };
}
Setter DoubleField(double* field) {
  return [field](const std::string& v, const std::string& key, const std::string& origin) {
    return ParseDouble(v, field) ? Status::Ok() : BadValue(origin, key, v, "a number");
  };
}
Setter BoolField(bool* field) {
  return [field](const std::string& v, const std::string& key, const std::string& origin) {
    return ParseBool(v, field) ? Status::Ok() : BadValue(origin, key, v, "true or false");
  };
}
Setter StringField(std::string* field) {
  return [field](const std::string& v, const std::string&, const std::string&) {
    *field = v;
    return Status::Ok();
  };
}

Setter DeviceField(Device* field) {
  return [field](const std::string& v, const std::string& key, const std::string& origin) {
    const auto device = ParseDevice(v);
    if (!device) return BadValue(origin, key, v, "cpu or cuda");
    *field = *device;
    return Status::Ok();
  };
}
Setter DTypeField(DType* field) {
  return [field](const std::string& v, const std::string& key, const std::string& origin) {
    // The dtypes some device serves; Validate checks the model's device
    // (CheckDeviceDType).
    const auto dtype = ParseDType(v);
    if (dtype != DType::kFloat32 && dtype != DType::kFloat16 && dtype != DType::kBFloat16 &&
        dtype != DType::kInt8) {
      return BadValue(origin, key, v, "float32, float16, bfloat16 or int8");
    }
    *field = *dtype;
    return Status::Ok();
  };
}

std::map<std::string, Setter> ModelFields(ModelConfig* m) {
  return {{"name", StringField(&m->name)},
          {"directory", StringField(&m->directory)},
          {"device", DeviceField(&m->device)},
          {"dtype", DTypeField(&m->dtype)},
          {"int8_fp32_linears", StringField(&m->int8_fp32_linears)},
          {"replicas", IntField(&m->replicas)},
          {"max_batch_tokens", IntField(&m->max_batch_tokens)},
          {"max_batch_sequences", IntField(&m->max_batch_sequences)},
          {"max_batch_time_us", IntField(&m->max_batch_time_us)},
          {"max_queue_delay_us", IntField(&m->max_queue_delay_us)},
          {"max_queue_size", IntField(&m->max_queue_size)},
          {"predict_deadlines", BoolField(&m->predict_deadlines)},
          {"max_queue_time_us", IntField(&m->max_queue_time_us)},
          {"overload_queue_time_us", IntField(&m->overload_queue_time_us)},
          {"calibration_budget_ms", IntField(&m->calibration_budget_ms)},
          {"max_client_batch_size", IntField(&m->max_client_batch_size)},
          {"max_tokens", IntField(&m->max_tokens)},
          {"num_threads", IntField(&m->num_threads)}};
}

std::map<std::string, Setter> TopLevelFields(ServerConfig* c) {
  return {{"listen.address", StringField(&c->listen.address)},
          {"listen.port", IntField(&c->listen.port)},
          {"listen.metrics_port", IntField(&c->listen.metrics_port)},
          {"listen.reflection", BoolField(&c->listen.reflection)},
          {"listen.max_concurrent_requests", IntField(&c->listen.max_concurrent_requests)},
          {"listen.fair_share", BoolField(&c->listen.fair_share)},
          {"listen.max_receive_message_bytes", IntField(&c->listen.max_receive_message_bytes)},
          {"listen.max_send_message_bytes", IntField(&c->listen.max_send_message_bytes)},
          {"listen.tls.cert_file", StringField(&c->listen.tls.cert_file)},
          {"listen.tls.key_file", StringField(&c->listen.tls.key_file)},
          {"listen.tls.client_ca_file", StringField(&c->listen.tls.client_ca_file)},
          {"listen.tls.require_client_cert", BoolField(&c->listen.tls.require_client_cert)},
          {"listen.health_port", IntField(&c->listen.health_port)},
          {"listen.auth.bearer_token_file", StringField(&c->listen.auth.bearer_token_file)},
          {"listen.http2_guard", BoolField(&c->listen.http2_guard)},
          {"listen.http2_max_reset_rate", DoubleField(&c->listen.http2_max_reset_rate)},
          {"listen.max_connections", IntField(&c->listen.max_connections)},
          {"listen.max_connections_per_address", IntField(&c->listen.max_connections_per_address)},
          {"listen.refuse_in_guard", BoolField(&c->listen.refuse_in_guard)},
          {"listen.max_connection_age_s", DoubleField(&c->listen.max_connection_age_s)},
          {"listen.max_connection_age_grace_s", DoubleField(&c->listen.max_connection_age_grace_s)},
          {"listen.max_connection_idle_s", DoubleField(&c->listen.max_connection_idle_s)},
          {"listen.keepalive_time_s", DoubleField(&c->listen.keepalive_time_s)},
          {"listen.keepalive_timeout_s", DoubleField(&c->listen.keepalive_timeout_s)},
          {"listen.send_timeout_s", DoubleField(&c->listen.send_timeout_s)},
          {"log.level", StringField(&c->log.level)},
          {"log.format", StringField(&c->log.format)},
          {"log.access_log_sample", DoubleField(&c->log.access_log_sample)},
          {"metrics.enabled", BoolField(&c->metrics.enabled)},
          {"shutdown.grace_s", DoubleField(&c->shutdown.grace_s)}};
}

// "off", "on", "on+client_ca" (client certificates verified when presented)
// or "mutual" (required).
const char* TlsMode(const TlsConfig& tls) {
  if (tls.cert_file.empty()) return "off";
  if (tls.client_ca_file.empty()) return "on";
  return tls.require_client_cert ? "mutual" : "on+client_ca";
}

Status UnknownKey(const std::string& origin, const std::string& key) {
  return InvalidArgument(origin + ": unknown key '" + key + "'");
}

}  // namespace

Status SetConfigValue(const std::string& key, const std::string& value, const std::string& origin,
                      ServerConfig* config) {
  // models[N].field
  if (key.rfind("models[", 0) == 0) {
    const size_t close = key.find("].");
    int64_t index = 0;
    if (close == std::string::npos || !ParseInt(key.substr(7, close - 7), &index) || index < 0)
      return UnknownKey(origin, key);
    // Models are numbered from 0 without gaps: at most the next one is new
    // (models[100000000000] made a vector of that many and aborted).
    const int64_t next = static_cast<int64_t>(config->models.size());
    if (index > next) {
      return InvalidArgument(origin + ": '" + key +
                             "': models are numbered from 0 without gaps (the next is models[" +
                             std::to_string(next) + "])");
    }
    if (index == next) config->models.emplace_back();
    auto fields = ModelFields(&config->models[index]);
    auto it = fields.find(key.substr(close + 2));
    if (it == fields.end()) return UnknownKey(origin, key);
    return it->second(value, key, origin);
  }
  // model.field: every model.
  if (key.rfind("model.", 0) == 0) {
    for (ModelConfig& m : config->models) {
      auto fields = ModelFields(&m);
      auto it = fields.find(key.substr(6));
      if (it == fields.end()) return UnknownKey(origin, key);
      RETURN_IF_ERROR(it->second(value, key, origin));
    }
    return Status::Ok();
  }
  auto fields = TopLevelFields(config);
  auto it = fields.find(key);
  if (it == fields.end()) return UnknownKey(origin, key);
  return it->second(value, key, origin);
}

Status ServerConfig::Validate() const {
  auto bad = [](const std::string& key, const std::string& why) {
    return InvalidArgument("config: '" + key + "' " + why);
  };
  if (listen.port < 0 || listen.port > 65535) return bad("listen.port", "must be in 0..65535");
  if (listen.metrics_port < 0 || listen.metrics_port > 65535)
    return bad("listen.metrics_port", "must be in 0..65535");
  if (listen.max_concurrent_requests < 1)
    return bad("listen.max_concurrent_requests", "must be at least 1");
  if (listen.max_receive_message_bytes < 1024)
    return bad("listen.max_receive_message_bytes", "must be at least 1024");
  // A reply may be as large as a request (Rerank's return_texts echoes its
  // texts), and an Encode reply keeps 64 KiB for framing.
  if (listen.max_send_message_bytes < std::max(1 << 20, listen.max_receive_message_bytes))
    return bad("listen.max_send_message_bytes",
               "must be at least 1048576 and at least listen.max_receive_message_bytes");
  if (listen.health_port < 0 || listen.health_port > 65535)
    return bad("listen.health_port", "must be in 0..65535");
  if (listen.health_port != 0 && listen.health_port == listen.port)
    return bad("listen.health_port", "must differ from listen.port");
  if (!(listen.http2_max_reset_rate >= 1))
    return bad("listen.http2_max_reset_rate", "must be at least 1 (resets a second)");
  if (listen.max_connections < 1) return bad("listen.max_connections", "must be at least 1");
  if (listen.max_connections_per_address < 0)
    return bad("listen.max_connections_per_address", "must be 0 (no limit) or more");
  // Below a second a client pausing for a moment would be reset.
  if (listen.send_timeout_s > 0 && listen.send_timeout_s < 1)
    return bad("listen.send_timeout_s", "must be 0 (never) or at least 1 second");
  // Seconds that become gRPC's (and the guard's) millisecond arguments: 0 or
  // more, at most a year (an int of milliseconds holds 24 days; longer means
  // never).
  for (const auto& [key, seconds] :
       {std::pair<const char*, double>{"listen.max_connection_age_s", listen.max_connection_age_s},
        {"listen.max_connection_age_grace_s", listen.max_connection_age_grace_s},
        {"listen.max_connection_idle_s", listen.max_connection_idle_s},
        {"listen.keepalive_time_s", listen.keepalive_time_s},
        {"listen.keepalive_timeout_s", listen.keepalive_timeout_s},
        {"listen.send_timeout_s", listen.send_timeout_s}}) {
    if (!(seconds >= 0 && seconds <= 365 * 24 * 3600.0))
      return bad(key, "must be in 0..31536000 seconds");
  }
  const TlsConfig& tls = listen.tls;
  if (tls.cert_file.empty() != tls.key_file.empty())
    return bad(tls.cert_file.empty() ? "listen.tls.cert_file" : "listen.tls.key_file",
               "must be set: listen.tls.cert_file and listen.tls.key_file go together");
  if (!tls.client_ca_file.empty() && tls.cert_file.empty())
    return bad("listen.tls.client_ca_file", "needs listen.tls.cert_file (TLS) as well");
  if (tls.require_client_cert && tls.client_ca_file.empty())
    return bad("listen.tls.require_client_cert", "needs listen.tls.client_ca_file");
  static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
  bool level_ok = false;
  for (const char* l : kLevels) level_ok |= log.level == l;
  if (!level_ok) return bad("log.level", "must be trace, debug, info, warn, error or off");
  if (log.format != "text" && log.format != "json")
    return bad("log.format", "must be text or json");
  if (!(log.access_log_sample >= 0 && log.access_log_sample <= 1))
    return bad("log.access_log_sample", "must be in 0..1");
  // Converted to nanoseconds for a deadline: at most a day (inf or 1e12
  // overflowed, and the drain ended at once).
  if (!(shutdown.grace_s >= 0 && shutdown.grace_s <= 86400))
    return bad("shutdown.grace_s", "must be in 0..86400 seconds");
  if (models.empty()) return bad("models", "must list at least one model");
  for (size_t i = 0; i < models.size(); ++i) {
    const ModelConfig& m = models[i];
    const std::string p = "models[" + std::to_string(i) + "].";
    if (m.name.empty()) return bad(p + "name", "must not be empty");
    // The metrics' label for calls that named no served model: a model of
    // that name shared its series with them.
    if (m.name == "(none)") return bad(p + "name", "must not be '(none)' (the metrics use it)");
    for (size_t j = 0; j < i; ++j)
      if (models[j].name == m.name) return bad(p + "name", "repeats '" + m.name + "'");
    if (m.directory.empty()) return bad(p + "directory", "must not be empty");
    if (Status s = CheckDeviceDType(m.device, m.dtype); !s.ok())
      return bad(p + "dtype", s.message());
    if (auto linears = ParseFp32Linears(m.int8_fp32_linears); !linears.ok())
      return bad(p + "int8_fp32_linears", linears.status().message());
    if (!m.int8_fp32_linears.empty() && m.dtype != DType::kInt8)
      return bad(p + "int8_fp32_linears", "applies only with dtype int8");
    if (m.replicas < 1) return bad(p + "replicas", "must be >= 1");
    if (m.max_batch_tokens < 1) return bad(p + "max_batch_tokens", "must be >= 1");
    if (m.max_batch_sequences < 1) return bad(p + "max_batch_sequences", "must be >= 1");
    // Larger batches would be refused whole by the CUDA encoder, failing
    // every request in them.
    if (m.device == Device::kCuda && m.max_batch_sequences > kMaxCudaBatchSequences)
      return bad(p + "max_batch_sequences",
                 "must be at most " + std::to_string(kMaxCudaBatchSequences) + " on cuda");
    if (m.max_batch_time_us < 0 || m.max_batch_time_us > 3600000000)
      return bad(p + "max_batch_time_us", "must be 0 (off) to 3600000000 (an hour)");
    // Microseconds that become nanoseconds: at most an hour (2^63 - 1, a
    // common "no limit", wrapped to a negative limit that refused every call).
    for (const auto& [key, us] :
         {std::pair<const char*, int64_t>{"max_queue_delay_us", m.max_queue_delay_us},
          {"max_queue_time_us", m.max_queue_time_us},
          {"overload_queue_time_us", m.overload_queue_time_us}}) {
      if (us < 0 || us > 3600000000) return bad(p + key, "must be 0 to 3600000000 (an hour)");
    }
    if (m.max_queue_size < 1) return bad(p + "max_queue_size", "must be >= 1");
    if (m.calibration_budget_ms < 0 || m.calibration_budget_ms > 3600000)
      return bad(p + "calibration_budget_ms", "must be 0 (none) to 3600000 (an hour)");
    if (m.max_client_batch_size < 1) return bad(p + "max_client_batch_size", "must be >= 1");
    if (m.max_tokens < 0) return bad(p + "max_tokens", "must be >= 0");
    if (m.max_tokens > m.max_batch_tokens)
      return bad(p + "max_tokens", "must not exceed max_batch_tokens");
    if (m.num_threads < 0) return bad(p + "num_threads", "must be >= 0");
  }
  return Status::Ok();
}

std::string ServerConfig::Summary() const {
  std::ostringstream s;
  s << "listen=" << HostPort(listen.address, listen.port) << " metrics_port=" << listen.metrics_port
    << " reflection=" << (listen.reflection ? "true" : "false")
    << " max_concurrent_requests=" << listen.max_concurrent_requests
    << " fair_share=" << (listen.fair_share ? "true" : "false")
    << " max_receive_message_bytes=" << listen.max_receive_message_bytes
    << " max_send_message_bytes=" << listen.max_send_message_bytes << " tls=" << TlsMode(listen.tls)
    << " health_port=" << listen.health_port
    << " auth=" << (listen.auth.bearer_token_file.empty() ? "off" : "bearer")
    << " http2_guard=" << (listen.http2_guard ? "true" : "false")
    << " http2_max_reset_rate=" << listen.http2_max_reset_rate
    << " max_connections=" << listen.max_connections
    << " max_connections_per_address=" << listen.max_connections_per_address
    << " refuse_in_guard=" << (listen.refuse_in_guard ? "true" : "false")
    << " max_connection_age_s=" << listen.max_connection_age_s
    << " max_connection_age_grace_s=" << listen.max_connection_age_grace_s
    << " max_connection_idle_s=" << listen.max_connection_idle_s
    << " keepalive_time_s=" << listen.keepalive_time_s
    << " keepalive_timeout_s=" << listen.keepalive_timeout_s
    << " send_timeout_s=" << listen.send_timeout_s << " log=" << log.level << "/" << log.format
    << " access_log_sample=" << log.access_log_sample
    << " metrics=" << (metrics.enabled ? "true" : "false")
    << " shutdown.grace_s=" << shutdown.grace_s;
  for (const ModelConfig& m : models) {
    s << " model{name=" << m.name << " directory=" << m.directory
      << " device=" << DeviceName(m.device) << " dtype=" << DTypeName(m.dtype)
      << (m.int8_fp32_linears.empty() ? "" : " int8_fp32_linears=" + m.int8_fp32_linears)
      << " replicas=" << m.replicas << " max_batch_tokens=" << m.max_batch_tokens
      << " max_batch_sequences=" << m.max_batch_sequences
      << " max_batch_time_us=" << m.max_batch_time_us
      << " max_queue_delay_us=" << m.max_queue_delay_us << " max_queue_size=" << m.max_queue_size
      << " predict_deadlines=" << (m.predict_deadlines ? "true" : "false")
      << " max_queue_time_us=" << m.max_queue_time_us
      << " overload_queue_time_us=" << m.overload_queue_time_us
      << " calibration_budget_ms=" << m.calibration_budget_ms
      << " max_client_batch_size=" << m.max_client_batch_size << " max_tokens=" << m.max_tokens
      << " num_threads=" << m.num_threads << "}";
  }
  return s.str();
}

}  // namespace encoderd::server
