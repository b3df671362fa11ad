// The daemon's configuration: one typed struct per subsystem, defaults in the
// structs. Sources, lowest precedence first: these defaults, the YAML file
// (config_yaml.cc), ENCODERD_* environment variables, command-line flags
// (config_loader.cc). The defaults describe config/default.yaml.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/op_types.h"
#include "core/status.h"

namespace encoderd::server {

struct TlsConfig {
  // PEM certificate chain of the server; set: the gRPC port speaks TLS only.
  std::string cert_file;
  // PEM private key of cert_file; required with it.
  std::string key_file;
  // PEM CA bundle that client certificates are verified against; set: a
  // client that presents a certificate must present one this CA signed.
  std::string client_ca_file;
  // With client_ca_file: refuse clients without a valid certificate (mutual TLS).
  bool require_client_cert = false;
};

struct AuthConfig {
  // File holding the bearer token inference calls must carry as metadata
  // `authorization: Bearer <token>`; empty: no token needed.
  std::string bearer_token_file;
};

struct ListenConfig {
  // Address the gRPC server binds.
  std::string address = "0.0.0.0";
  // gRPC port; 0 picks a free port (logged at start-up).
  int port = 50051;
  // Port of the Prometheus /metrics endpoint (metrics.enabled); 0 picks a
  // free port (logged at start-up).
  int metrics_port = 9400;
  // Register the gRPC server reflection service (off unless set: it lists
  // the API to anyone who can connect).
  bool reflection = false;
  // Inference calls (Embed, Classify, Encode, Tokenize, open EmbedStreams)
  // worked on at once; more are refused at once with RESOURCE_EXHAUSTED.
  // Each holds a sleeping gRPC thread (~240 KB of RSS while it waits, no
  // CPU); 1024 absorbs 1.5-2 s of backlog at a 2-core server's saturation.
  int max_concurrent_requests = 1024;
  // Fairness between client connections: each model's queue is ordered by
  // start-time fair queuing (a client's call goes before the backlog of
  // another that floods; server/core/batch_policy.h), admission predicts a
  // call's wait behind its own connection's share, and the last quarter of
  // max_concurrent_requests goes only to connections under their share
  // (server/core/concurrency_limiter.h). Off: first come, first served, as
  // behind a proxy that multiplexes every client onto a few connections.
  bool fair_share = true;
  // Largest request message accepted, in bytes; a larger one is refused
  // (RESOURCE_EXHAUSTED) before it is parsed.
  int max_receive_message_bytes = 4 * 1024 * 1024;
  // Largest reply message sent, in bytes: at least 1 MiB and at least
  // max_receive_message_bytes (Rerank's return_texts echoes a request's
  // texts). An Encode call whose hidden states would not fit (tokens x
  // hidden_size x 4 bytes, and 64 KiB and 16 bytes a sequence of framing) is
  // refused with INVALID_ARGUMENT before it is queued: a 300 KB request of
  // 256 x 512 token ids would otherwise make a BERT-base reply of 400 MB,
  // held about three times over (results, message, serialized bytes) until
  // it is sent. Other replies are not checked: Embed's and Classify's hold a
  // vector or scores a text, Rerank's at most its request's texts, and
  // Tokenize's ids and pieces for at most max_client_batch_size x
  // max_tokens tokens.
  int max_send_message_bytes = 64 * 1024 * 1024;
  // TLS on the gRPC port (off while tls.cert_file is empty).
  TlsConfig tls;
  // Plaintext port serving only grpc.health.v1.Health, mirroring the gRPC
  // port's status (for probes that cannot speak TLS); 0: off.
  int health_port = 0;
  // Bearer-token authentication of the inference calls.
  AuthConfig auth;
  // Relay the gRPC port, and the health port if set, through the HTTP/2
  // guard (server/net/): connections whose client resets most streams right
  // after opening them (rapid reset) or opens too many at once are closed,
  // and at most max_connections are open (on the health port at most 256).
  // With TLS on, the guard terminates it (off: gRPC listens itself, TLS or
  // not).
  bool http2_guard = true;
  // Rapid reset is a connection resetting at least half its streams within
  // 1 s of opening them while its address resets more than this many such
  // streams a second (all its connections together).
  double http2_max_reset_rate = 2000;
  // Also bounds the health Watch streams open at once on each port: 4 times
  // this, and 4 a connection (server/grpc/health_service.h).
  int max_connections = 4096;
  // With the guard: connections one client address (an IPv6 client's /64)
  // may hold at once on the gRPC port; 0: no limit. Without one, clients of
  // one address holding a stream on every connection can fill
  // max_connections and keep everyone else out.
  int max_connections_per_address = 0;
  // The guard answers the calls the server would refuse at once (overload:
  // predicted late, standing queue) itself, before gRPC parses them, so a
  // refusal costs the daemon a few microseconds instead of a call
  // (server/net/call_gate.h). Needs the guard and one configured model.
  bool refuse_in_guard = true;
  // Connection lifetime. A client keeps its HTTP/2 connection for as long as
  // it can, so behind a load balancer that picks a backend per connection
  // (a Kubernetes Service, DNS with round_robin) new replicas get no calls
  // from existing clients. After max_connection_age_s (+-10% jitter, gRPC
  // proposal A9) the server sends GOAWAY: the client opens a new connection,
  // re-resolving first, while calls already in flight have
  // max_connection_age_grace_s to finish before the connection is closed.
  // 0: connections live for ever.
  double max_connection_age_s = 0;
  double max_connection_age_grace_s = 30;
  // A connection with no call for this long is closed (GOAWAY); the client
  // reconnects on its next call. 0: never.
  double max_connection_idle_s = 0;
  // After this long without traffic the server pings the client, and closes
  // the connection if no answer comes within keepalive_timeout_s: a client
  // that vanished (a pod killed, a NAT entry dropped) frees its connection.
  // 0: gRPC's default (2 hours).
  double keepalive_time_s = 0;
  double keepalive_timeout_s = 20;
  // With the guard: once bytes wait for a client in the guard (the
  // kernel's buffer for it full), or the kernel queues more than the
  // guard's buffer for it, it must take all that was queued for it then
  // within this long, or its connection is reset: it stopped reading or
  // reads a trickle, and gRPC frees the answers it held for it. 0: never;
  // else at least 1.
  double send_timeout_s = 30;
};

struct ModelConfig {
  // Name clients use in the `model` field.
  std::string name = "langid";
  // Model directory (see `encoderd inspect`); relative to the working directory.
  std::string directory = "models/langid";
  // cpu or cuda.
  Device device = Device::kCpu;
  // float32, bfloat16 or int8 on cpu, float16 or bfloat16 on cuda
  // (Validate() asks the engine, CheckDeviceDType); also written fp32, fp16,
  // bf16.
  DType dtype = DType::kFloat32;
  // With dtype int8: the encoder's Linear layers kept in fp32, comma-separated
  // (a slot in every layer, e.g. "ffn.out", or one layer's,
  // "layers.11.ffn.out"; engine/runtime/encoder.h ParseFp32Linears).
  std::string int8_fp32_linears;
  // Executors (engine instances), each with its own thread.
  int replicas = 1;
  // Most tokens (sum of sequence lengths) in one engine batch.
  int64_t max_batch_tokens = 8192;
  // Most sequences in one engine batch.
  int64_t max_batch_sequences = 256;
  // Longest an engine batch is predicted to take (from the throughput learned
  // on this machine): fewer than max_batch_tokens when those would take
  // longer; 0: no limit (the default, docs/reliability.md says why).
  int64_t max_batch_time_us = 0;
  // Longest wait for more work before running a batch that is not full.
  int64_t max_queue_delay_us = 2000;
  // Most requests waiting in the queue; more are RESOURCE_EXHAUSTED.
  int64_t max_queue_size = 1024;
  // Refuse at once (RESOURCE_EXHAUSTED) a call that is predicted, from the
  // queued tokens and the throughput measured on this machine, to finish
  // after its deadline: under overload the queue then holds only work that
  // can still succeed.
  bool predict_deadlines = true;
  // The same for a call without a deadline predicted to wait longer than this
  // in the queue; 0: no limit.
  int64_t max_queue_time_us = 2000000;
  // Under sustained overload (the queue stood above this wait, or one batch
  // if longer, for 500 ms: CoDel's test, not a burst), refuse every call
  // predicted to wait longer than that, whatever its deadline, until an
  // executor is idle again: the queue stays short and answers keep slack
  // before their deadlines. 0: off.
  int64_t overload_queue_time_us = 100000;
  // The time a model may spend, as it loads, timing one batch of each size
  // (32 to 2,048 tokens) for the rules above, which then predict from the
  // first call (docs/reliability.md, "Overload control"); a size predicted to
  // take it past this is estimated instead, until calls of its size have
  // run. 0: none timed.
  int64_t calibration_budget_ms = 10000;
  // Most texts in one client request.
  int64_t max_client_batch_size = 256;
  // Longest sequence accepted, special tokens included; 0: the model's limit.
  int64_t max_tokens = 0;
  // CPU threads per executor; 0: the CPUs this process may use (its affinity
  // mask, capped by the cgroup CPU quota, i.e. a container's CPU limit)
  // divided among the replicas.
  int num_threads = 0;
};

struct LogConfig {
  // "trace", "debug", "info", "warn", "error" or "off".
  std::string level = "info";
  // "text" or "json".
  std::string format = "text";
  // Fraction of requests (0..1) logged as one access line each (request id,
  // model, RPC, status, tokens, timing); 0: none.
  double access_log_sample = 0.0;
};

struct MetricsConfig {
  // Serve Prometheus metrics on listen.address:listen.metrics_port.
  bool enabled = true;
};

struct ShutdownConfig {
  // Seconds in-flight calls get to finish after SIGTERM/SIGINT.
  double grace_s = 10.0;
};

struct ServerConfig {
  ListenConfig listen;
  std::vector<ModelConfig> models = {ModelConfig{}};
  LogConfig log;
  MetricsConfig metrics;
  ShutdownConfig shutdown;

  // Checks every value; the error names the key ("models[0].replicas").
  Status Validate() const;
  // One line for the start-up log.
  std::string Summary() const;
};

// The whole of `s` as a decimal integer / a number (strtoll / strtod, no
// trailing characters, in range); false otherwise. Config values and the
// commands' flags (cli/flags.h) are read with these.
bool ParseInt(const std::string& s, int64_t* out);
bool ParseDouble(const std::string& s, double* out);

// Applies a YAML document over `config`; `source` names it in errors, which
// carry the key and the line ("config.yaml:7: unknown key 'models[0].foo'").
Status ApplyYaml(const std::string& yaml_text, const std::string& source, ServerConfig* config);

// Sets one value by its dotted key ("listen.port", "models[0].replicas", or
// "model.max_batch_tokens" for every model); `origin` names the source in errors.
Status SetConfigValue(const std::string& key, const std::string& value, const std::string& origin,
                      ServerConfig* config);

}  // namespace encoderd::server
