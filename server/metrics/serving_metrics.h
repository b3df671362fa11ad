// What the serving path reports to metrics, free of any metrics library: the
// gRPC handlers report once per request (each message of a stream), the
// executors once per batch. A null ServingMetrics* means metrics are off.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "proto/grpc_code_name.h"  // GrpcCodeName, used with RequestSample::grpc_code

namespace encoderd::server {

enum class Rpc { kEmbed, kClassify, kEncode, kTokenize, kModelInfo, kEmbedStream, kRerank };
inline constexpr int kNumRpcs = 7;
const char* RpcName(Rpc rpc);

// The failure reason a gRPC code counts under: invalid_argument (INVALID_ARGUMENT,
// NOT_FOUND, FAILED_PRECONDITION, OUT_OF_RANGE), overloaded (RESOURCE_EXHAUSTED),
// deadline, cancelled, unavailable, unauthenticated (UNAUTHENTICATED),
// internal (every other code); "" for OK.
const char* FailureReason(int code);

// Why a request left the batcher without its result being delivered.
enum class DropReason {
  kDeadlineBeforeQueue,    // the deadline had passed when it was submitted
  kDeadlineInQueue,        // the deadline passed while it waited: never computed
  kDeadlineWhileRunning,   // the deadline passed during its batch: result discarded
  kCancelledInQueue,       // the client went away while it waited: never computed
  kCancelledWhileRunning,  // the client went away during its batch: result discarded
  kRefusedPredictedLate,   // refused at once: predicted to finish after its deadline
  kRefusedQueueTime,       // refused at once: no deadline, predicted to wait too long
  kRefusedStandingQueue,   // refused at once: sustained overload, predicted to wait too long
  kRefusedQueueFull,       // refused at once: max_queue_size requests were queued
};
inline constexpr int kNumDropReasons = 9;
// "deadline_before_queue", "deadline_in_queue", ...
const char* DropReasonName(DropReason reason);

// The port whose guard (server/net/connection_guard.h) reports a connection:
// the metrics' `port` label.
enum class GuardPort { kGrpc, kHealth };
inline constexpr int kNumGuardPorts = 2;
// "grpc", "health".
const char* GuardPortName(GuardPort port);

// Why a port's guard closed a connection (server/net/connection_guard.h).
enum class ConnectionClose {
  kRapidReset,        // most of its streams reset by the client right after opening
  kTooManyStreams,    // more streams open at once than allowed
  kPrefaceTimeout,    // no HTTP/2 preface in time
  kConnectionCap,     // opened while listen.max_connections, each with a stream, were open
  kEvictedIdle,       // had opened no stream when a new connection needed its place
  kBadPreface,        // sent something other than the HTTP/2 preface
  kOversizedHeaders,  // a header block over 64 KiB or 64 frames (HEADERS + CONTINUATION)
  kBadHeaders,        // header blocks the guard answering calls could no longer follow
  // more calls whose requests had not fully arrived than allowed, with the
  // guard unable to refuse new ones (http2_guard.h)
  kIncompleteRequests,
  // on a TLS port: the handshake failed (a plaintext client, a client
  // certificate refused) or a record did not decrypt
  kTls,
  // its client did not take all that was queued for it within
  // listen.send_timeout_s (it stopped reading, or reads a trickle)
  kSendTimeout,
  // opened while its address held listen.max_connections_per_address
  kAddressCap,
};
inline constexpr int kNumConnectionCloses = 12;
// "rapid_reset", "too_many_streams", "preface_timeout", "connection_cap",
// "evicted_idle", "bad_preface", "oversized_headers", "bad_headers",
// "incomplete_requests", "tls", "send_timeout", "address_cap".
const char* ConnectionCloseName(ConnectionClose reason);

struct RequestSample {
  Rpc rpc = Rpc::kEmbed;
  int grpc_code = 0;  // grpc::StatusCode value
  // Sequences and tokens of the request (counted as processed when ran_model).
  int64_t sequences = 0;
  int64_t tokens = 0;
  // Token count of each sequence (for the input-length histogram).
  std::vector<int32_t> lengths;
  // Phases, microseconds; queue and inference are 0 unless the model ran it.
  int64_t total_us = 0;
  int64_t tokenize_us = 0;
  int64_t queue_us = 0;
  int64_t inference_us = 0;
  // The request went through the batcher (Embed, Classify, Encode, EmbedStream).
  bool ran_model = false;
};

struct BatchSample {
  int64_t sequences = 0;
  // Tokens computed (packed) and tokens a padded batch would have computed.
  int64_t tokens = 0;
  int64_t padded_tokens = 0;
  int64_t inference_us = 0;
  bool ok = true;
  // Not ok: ended early because every request of the batch was gone.
  bool abandoned = false;
};

class ServingMetrics {
 public:
  virtual ~ServingMetrics() = default;
  // Any thread. `model`: the served model's name, or "" when the request did
  // not resolve to one (unknown name, ModelInfo for all models).
  virtual void ObserveRequest(const std::string& model, const RequestSample& sample) = 0;
  // Executor threads, after each batch (failed ones too).
  virtual void ObserveBatch(const std::string& model, const BatchSample& sample) = 0;
  // Any thread: a request entered (+1) or left (-1) the model's batcher.
  virtual void AddInFlight(const std::string& model, int delta) = 0;
  // Any thread: the batcher dropped a request (once per request at most).
  virtual void ObserveDrop(const std::string& /*model*/, DropReason /*reason*/) {}
  // Any thread: the batcher admitted a request into its queue.
  virtual void ObserveAdmitted(const std::string& /*model*/) {}
  // A connection guard's thread: it closed a connection of its port, and
  // how many are open there (SetOpenConnections).
  virtual void ObserveConnectionClosed(GuardPort /*port*/, ConnectionClose /*reason*/) {}
  // The guard answered a call itself (server/net/call_gate.h).
  virtual void ObserveAnsweredByGuard() {}
  // The guard refused a new call: its connection, or all of them, held too
  // many calls whose requests had not fully arrived (call_gate.h).
  virtual void ObserveRefusedIncomplete() {}
  virtual void SetOpenConnections(GuardPort /*port*/, int64_t /*open*/) {}
};

}  // namespace encoderd::server
