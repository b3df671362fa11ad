#include "server/metrics/prometheus_metrics.h"

namespace encoderd::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

constexpr int kNumCodes = 17;

double Seconds(int64_t us) { return static_cast<double>(us) * 1e-6; }

Histogram::BucketBoundaries PowersOfTwo(double first, double last) {
  Histogram::BucketBoundaries b;
  for (double v = first; v <= last; v *= 2) b.push_back(v);
  return b;
}

}  // namespace

struct PrometheusMetrics::Families {
  explicit Families(prometheus::Registry* r)
      : requests(BuildCounter()
                     .Name("encoderd_requests_total")
                     .Help("Requests answered, by model, RPC and gRPC status code.")
                     .Register(*r)),
        failures(BuildCounter()
                     .Name("encoderd_request_failures_total")
                     .Help("Failed requests by reason: invalid_argument, unauthenticated, "
                           "overloaded, deadline, cancelled, unavailable, internal.")
                     .Register(*r)),
        sequences(BuildCounter()
                      .Name("encoderd_sequences_total")
                      .Help("Sequences computed for successful model requests.")
                      .Register(*r)),
        tokens(BuildCounter()
                   .Name("encoderd_tokens_total")
                   .Help("Tokens computed for successful model requests (special tokens included).")
                   .Register(*r)),
        request_duration(BuildHistogram()
                             .Name("encoderd_request_duration_seconds")
                             .Help("Time from handler entry to answer, every status.")
                             .Register(*r)),
        tokenize_duration(BuildHistogram()
                              .Name("encoderd_tokenize_duration_seconds")
                              .Help("Tokenization time of successful requests.")
                              .Register(*r)),
        queue_duration(BuildHistogram()
                           .Name("encoderd_queue_duration_seconds")
                           .Help("Enqueue to first batch start, successful model requests.")
                           .Register(*r)),
        inference_duration(BuildHistogram()
                               .Name("encoderd_inference_duration_seconds")
                               .Help("Engine time of the batches of successful model requests.")
                               .Register(*r)),
        input_length(BuildHistogram()
                         .Name("encoderd_input_length_tokens")
                         .Help("Tokens per sequence of successful model requests.")
                         .Register(*r)),
        batch_sequences(BuildHistogram()
                            .Name("encoderd_batch_size_sequences")
                            .Help("Sequences per engine batch.")
                            .Register(*r)),
        batch_tokens_hist(BuildHistogram()
                              .Name("encoderd_batch_size_tokens")
                              .Help("Tokens per engine batch (packed, no padding).")
                              .Register(*r)),
        batch_seconds(BuildCounter()
                          .Name("encoderd_batch_seconds_total")
                          .Help("Engine time of the batches run, failed ones too: the executors' "
                                "busy seconds.")
                          .Register(*r)),
        batch_tokens(BuildCounter()
                         .Name("encoderd_batch_tokens_total")
                         .Help("Tokens computed by engine batches (packed).")
                         .Register(*r)),
        batch_padded_tokens(BuildCounter()
                                .Name("encoderd_batch_padded_tokens_total")
                                .Help("Tokens the same batches would have computed padded to "
                                      "their longest sequence.")
                                .Register(*r)),
        batch_failures(BuildCounter()
                           .Name("encoderd_batch_failures_total")
                           .Help("Engine batches that failed.")
                           .Register(*r)),
        batch_abandoned(BuildCounter()
                            .Name("encoderd_batch_abandoned_total")
                            .Help("Engine batches stopped before their last layer because every "
                                  "request in them was gone (cancelled, past its deadline, or "
                                  "failed); not counted as failures.")
                            .Register(*r)),
        in_flight(BuildGauge()
                      .Name("encoderd_in_flight_requests")
                      .Help("Requests submitted to the model's batcher and not yet answered.")
                      .Register(*r)),
        dropped(
            BuildCounter()
                .Name("encoderd_requests_dropped_total")
                .Help("Requests the batcher dropped without delivering a result, by reason: "
                      "deadline_before_queue, deadline_in_queue, deadline_while_running, "
                      "cancelled_in_queue, cancelled_while_running, refused_predicted_late, "
                      "refused_queue_time, refused_standing_queue, refused_queue_full (overload: "
                      "refused at once).")
                .Register(*r)),
        admitted(BuildCounter()
                     .Name("encoderd_requests_admitted_total")
                     .Help("Requests the model's batcher admitted into its queue.")
                     .Register(*r)),
        connections_closed(BuildCounter()
                               .Name("encoderd_connections_closed_total")
                               .Help("Connections a port's guard closed, by port (grpc, "
                                     "health) and reason: "
                                     "rapid_reset, too_many_streams, oversized_headers (abuse), "
                                     "preface_timeout, "
                                     "connection_cap (closed at once: listen.max_connections "
                                     "open, each with a stream), evicted_idle (had opened no "
                                     "stream when a new connection needed its place), "
                                     "bad_preface (not HTTP/2), bad_headers (header blocks "
                                     "the guard answering calls could no longer follow), "
                                     "incomplete_requests (too many calls whose requests had "
                                     "not fully arrived, where the guard could not refuse "
                                     "new ones), tls (on a TLS port: the handshake failed, "
                                     "e.g. a plaintext client or a client certificate "
                                     "refused, or a record did not decrypt), send_timeout "
                                     "(its client did not take all that was queued for it "
                                     "within listen.send_timeout_s), address_cap (closed at "
                                     "once: its address held "
                                     "listen.max_connections_per_address).")
                               .Register(*r)),
        answered_by_guard(BuildCounter()
                              .Name("encoderd_guard_answered_calls_total")
                              .Help("Calls the gRPC port's guard answered itself before gRPC "
                                    "parsed them (refused at once by the overload control, "
                                    "listen.refuse_in_guard); also in encoderd_requests_total.")
                              .Register(*r)),
        refused_incomplete(BuildCounter()
                               .Name("encoderd_guard_refused_incomplete_total")
                               .Help("New calls the gRPC port's guard refused "
                                     "(RESOURCE_EXHAUSTED) because their connection, or all "
                                     "connections, held too many calls whose requests had not "
                                     "fully arrived; not in encoderd_requests_total.")
                               .Register(*r)),
        connections_open(BuildGauge()
                             .Name("encoderd_open_connections")
                             .Help("Client connections open, by port (grpc, health; with the "
                                   "guard).")
                             .Register(*r)) {}

  Family<Counter>& requests;
  Family<Counter>& failures;
  Family<Counter>& sequences;
  Family<Counter>& tokens;
  Family<Histogram>& request_duration;
  Family<Histogram>& tokenize_duration;
  Family<Histogram>& queue_duration;
  Family<Histogram>& inference_duration;
  Family<Histogram>& input_length;
  Family<Histogram>& batch_sequences;
  Family<Histogram>& batch_tokens_hist;
  Family<Counter>& batch_seconds;
  Family<Counter>& batch_tokens;
  Family<Counter>& batch_padded_tokens;
  Family<Counter>& batch_failures;
  Family<Counter>& batch_abandoned;
  Family<Gauge>& in_flight;
  Family<Counter>& dropped;
  Family<Counter>& admitted;
  Family<Counter>& connections_closed;
  Family<Counter>& answered_by_guard;
  Family<Counter>& refused_incomplete;
  Family<Gauge>& connections_open;
};

struct PrometheusMetrics::ModelSeries {
  // `per_model`: false for kNoModelLabel, which has only the request series.
  ModelSeries(Families& f, const std::string& model, bool per_model) : families(f), name(model) {
    for (auto& row : requests)
      for (auto& slot : row) slot.store(nullptr);
    for (auto& row : failures)
      for (auto& slot : row) slot.store(nullptr);
    for (auto& slot : duration) slot.store(nullptr);
    if (!per_model) return;
    const prometheus::Labels labels = {{"model", model}};
    sequences = &f.sequences.Add(labels);
    tokens = &f.tokens.Add(labels);
    tokenize = &f.tokenize_duration.Add(labels, LatencyBuckets());
    queue = &f.queue_duration.Add(labels, LatencyBuckets());
    inference = &f.inference_duration.Add(labels, LatencyBuckets());
    input_length = &f.input_length.Add(labels, PowersOfTwo(4, 8192));
    batch_sequences = &f.batch_sequences.Add(labels, PowersOfTwo(1, 1024));
    batch_tokens_hist = &f.batch_tokens_hist.Add(labels, PowersOfTwo(16, 32768));
    batch_seconds = &f.batch_seconds.Add(labels);
    batch_tokens = &f.batch_tokens.Add(labels);
    batch_padded_tokens = &f.batch_padded_tokens.Add(labels);
    batch_failures = &f.batch_failures.Add(labels);
    batch_abandoned = &f.batch_abandoned.Add(labels);
    in_flight = &f.in_flight.Add(labels);
    admitted = &f.admitted.Add(labels);
    for (int i = 0; i < kNumDropReasons; ++i)
      dropped[i] = &f.dropped.Add(
          {{"model", model}, {"reason", DropReasonName(static_cast<DropReason>(i))}});
  }

  // The series of (rpc, code), created on first use. Family::Add returns the
  // existing series for the same labels, so racing creators agree.
  Counter& Requests(Rpc rpc, int code) {
    auto& slot = requests[static_cast<int>(rpc)][code];
    Counter* c = slot.load(std::memory_order_acquire);
    if (!c) {
      c = &families.requests.Add(
          {{"model", name}, {"rpc", RpcName(rpc)}, {"code", GrpcCodeName(code)}});
      slot.store(c, std::memory_order_release);
    }
    return *c;
  }
  Counter& Failures(Rpc rpc, int code) {
    auto& slot = failures[static_cast<int>(rpc)][code];
    Counter* c = slot.load(std::memory_order_acquire);
    if (!c) {
      c = &families.failures.Add(
          {{"model", name}, {"rpc", RpcName(rpc)}, {"reason", FailureReason(code)}});
      slot.store(c, std::memory_order_release);
    }
    return *c;
  }
  Histogram& Duration(Rpc rpc) {
    auto& slot = duration[static_cast<int>(rpc)];
    Histogram* h = slot.load(std::memory_order_acquire);
    if (!h) {
      h = &families.request_duration.Add({{"model", name}, {"rpc", RpcName(rpc)}},
                                         LatencyBuckets());
      slot.store(h, std::memory_order_release);
    }
    return *h;
  }

  Families& families;
  const std::string name;
  // Null for kNoModelLabel.
  Counter* sequences = nullptr;
  Counter* tokens = nullptr;
  Histogram* tokenize = nullptr;
  Histogram* queue = nullptr;
  Histogram* inference = nullptr;
  Histogram* input_length = nullptr;
  Histogram* batch_sequences = nullptr;
  Histogram* batch_tokens_hist = nullptr;
  Counter* batch_seconds = nullptr;
  Counter* batch_tokens = nullptr;
  Counter* batch_padded_tokens = nullptr;
  Counter* batch_failures = nullptr;
  Counter* batch_abandoned = nullptr;
  Gauge* in_flight = nullptr;
  Counter* admitted = nullptr;
  std::array<Counter*, kNumDropReasons> dropped = {};
  std::array<std::array<std::atomic<Counter*>, kNumCodes>, kNumRpcs> requests;
  std::array<std::array<std::atomic<Counter*>, kNumCodes>, kNumRpcs> failures;
  std::array<std::atomic<Histogram*>, kNumRpcs> duration;
};

const Histogram::BucketBoundaries& PrometheusMetrics::LatencyBuckets() {
  static const Histogram::BucketBoundaries kBuckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0,  10.0};
  return kBuckets;
}

PrometheusMetrics::PrometheusMetrics(prometheus::Registry* registry,
                                     const std::vector<std::string>& models)
    : families_(std::make_unique<Families>(registry)) {
  for (int p = 0; p < kNumGuardPorts; ++p) {
    const std::string port = GuardPortName(static_cast<GuardPort>(p));
    for (int i = 0; i < kNumConnectionCloses; ++i) {
      connections_closed_[p][i] = &families_->connections_closed.Add(
          {{"port", port}, {"reason", ConnectionCloseName(static_cast<ConnectionClose>(i))}});
    }
    connections_open_[p] = &families_->connections_open.Add({{"port", port}});
  }
  answered_by_guard_ = &families_->answered_by_guard.Add({});
  refused_incomplete_ = &families_->refused_incomplete.Add({});
  for (const std::string& m : models)
    models_[m] = std::make_unique<ModelSeries>(*families_, m, true);
  no_model_ = std::make_unique<ModelSeries>(*families_, kNoModelLabel, false);
}

PrometheusMetrics::~PrometheusMetrics() = default;

PrometheusMetrics::ModelSeries& PrometheusMetrics::Series(const std::string& model) {
  auto it = models_.find(model);
  return it == models_.end() ? *no_model_ : *it->second;
}

void PrometheusMetrics::ObserveRequest(const std::string& model, const RequestSample& sample) {
  ModelSeries& s = Series(model);
  const int code = sample.grpc_code >= 0 && sample.grpc_code < kNumCodes ? sample.grpc_code : 2;
  s.Requests(sample.rpc, code).Increment();
  s.Duration(sample.rpc).Observe(Seconds(sample.total_us));
  if (code != 0) {
    s.Failures(sample.rpc, code).Increment();
    return;
  }
  if (!s.tokenize) return;  // kNoModelLabel
  if (sample.rpc != Rpc::kModelInfo) s.tokenize->Observe(Seconds(sample.tokenize_us));
  if (!sample.ran_model) return;
  s.sequences->Increment(static_cast<double>(sample.sequences));
  s.tokens->Increment(static_cast<double>(sample.tokens));
  s.queue->Observe(Seconds(sample.queue_us));
  s.inference->Observe(Seconds(sample.inference_us));
  for (int32_t length : sample.lengths) s.input_length->Observe(length);
}

void PrometheusMetrics::ObserveBatch(const std::string& model, const BatchSample& sample) {
  ModelSeries& s = Series(model);
  if (!s.batch_failures) return;  // kNoModelLabel
  s.batch_seconds->Increment(Seconds(sample.inference_us));
  if (!sample.ok) {
    (sample.abandoned ? s.batch_abandoned : s.batch_failures)->Increment();
    return;
  }
  s.batch_sequences->Observe(static_cast<double>(sample.sequences));
  s.batch_tokens_hist->Observe(static_cast<double>(sample.tokens));
  s.batch_tokens->Increment(static_cast<double>(sample.tokens));
  s.batch_padded_tokens->Increment(static_cast<double>(sample.padded_tokens));
}

void PrometheusMetrics::AddInFlight(const std::string& model, int delta) {
  ModelSeries& s = Series(model);
  if (s.in_flight) s.in_flight->Increment(delta);
}

void PrometheusMetrics::ObserveAdmitted(const std::string& model) {
  Counter* c = Series(model).admitted;
  if (c) c->Increment();
}

void PrometheusMetrics::ObserveConnectionClosed(GuardPort port, ConnectionClose reason) {
  connections_closed_[static_cast<int>(port)][static_cast<int>(reason)]->Increment();
}

void PrometheusMetrics::ObserveAnsweredByGuard() { answered_by_guard_->Increment(); }
void PrometheusMetrics::ObserveRefusedIncomplete() { refused_incomplete_->Increment(); }

void PrometheusMetrics::SetOpenConnections(GuardPort port, int64_t open) {
  connections_open_[static_cast<int>(port)]->Set(static_cast<double>(open));
}

void PrometheusMetrics::ObserveDrop(const std::string& model, DropReason reason) {
  Counter* c = Series(model).dropped[static_cast<int>(reason)];
  if (c) c->Increment();  // null for kNoModelLabel
}

}  // namespace encoderd::server
