// encoderd.v1.Encoder over the synchronous gRPC API. Handlers validate and
// tokenize on the gRPC thread, submit to the model's DynamicBatcher and wait
// for the result (cancelling the request if the client goes away: one
// CancellationWatcher thread watches every waiting call's client).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <utility>

#include "server/core/cancellation_watcher.h"
#include "server/core/concurrency_limiter.h"
#include "server/core/model_registry.h"
#include "server/grpc/bearer_auth.h"
#include "server/grpc/encoder_service_base.h"
// Brings server/grpc/request_serialization.h too: requests that do not parse
// are INVALID_ARGUMENT.
#include "server/grpc/encoderd_grpc.h"
#include "server/metrics/request_observer.h"

namespace encoderd::server {

class EncoderService final : public EncoderServiceBase {
 public:
  // `registry` and `metrics` (null: metrics off) must outlive the service.
  // Every answer carries its request id in the trailing metadata key
  // `x-request-id` (a stream: the id of the message that failed it).
  // At most `max_concurrent_requests` inference calls (Embed, Classify,
  // Encode, Tokenize, open EmbedStreams) run at once; more get
  // RESOURCE_EXHAUSTED without waiting. Every RPC of the service needs the
  // bearer token when `auth` is enabled (checked before anything else).
  EncoderService(const ModelRegistry* registry, int64_t max_concurrent_requests,
                 ServingMetrics* metrics = nullptr, double access_log_sample = 0,
                 BearerAuth auth = BearerAuth())
      : registry_(registry),
        limiter_(max_concurrent_requests),
        observer_(metrics, access_log_sample),
        auth_(std::move(auth)) {
    RouteProtobufLogsToSpdlog();  // request parse errors: debug level only
  }
  int64_t in_flight() const { return limiter_.in_flight(); }

  grpc::Status Embed(grpc::ServerContext* context, const v1::EmbedRequest* request,
                     v1::EmbedResponse* response) override;
  grpc::Status Classify(grpc::ServerContext* context, const v1::ClassifyRequest* request,
                        v1::ClassifyResponse* response) override;
  grpc::Status Encode(grpc::ServerContext* context, const v1::EncodeRequest* request,
                      v1::EncodeResponse* response) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response) override;
  grpc::Status ModelInfo(grpc::ServerContext* context, const v1::ModelInfoRequest* request,
                         v1::ModelInfoResponse* response) override;
  grpc::Status EmbedStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::EmbedResponse, v1::EmbedRequest>* stream) override;

 private:
  // The bearer token, then (takes_slot) a concurrency slot into `slot`:
  // UNAUTHENTICATED, or RESOURCE_EXHAUSTED when every slot is taken.
  Status Admit(grpc::ServerContext* context, bool takes_slot,
               std::optional<ConcurrencyLimiter::Slot>* slot);
  // What every unary RPC shares: Admit, a request id, then `body(id, call)`
  // (the RPC's own work), the summary fields of a successful response, and
  // the answer, recorded in the metrics and logs with its request id.
  template <typename Response, typename Body>
  grpc::Status Handle(grpc::ServerContext* context, Rpc rpc, bool takes_slot, Response* response,
                      Body&& body);

  const ModelRegistry* registry_;
  ConcurrencyLimiter limiter_;
  RequestObserver observer_;
  const BearerAuth auth_;
  // Watches the clients of waiting calls: a cancel is seen within 16 ms, or
  // n / 16,000 s with n > 256 calls waiting (~0.1 cores of checks at most).
  CancellationWatcher watcher_{std::chrono::milliseconds(16), 16000};
  std::atomic<uint64_t> next_request_id_{1};
};

}  // namespace encoderd::server
