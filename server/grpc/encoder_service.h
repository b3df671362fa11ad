// encoderd.v1.Encoder, every RPC on gRPC's callback API: the handler
// validates and tokenizes on a gRPC thread and submits to the model's
// DynamicBatcher; the thread that finishes the request answers (a stream:
// writes the message's response), and gRPC's cancellation (client gone,
// deadline passed) abandons it, so no thread waits for a call or a stream.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "proto/encoderd.pb.h"
#include "server/core/concurrency_limiter.h"
#include "server/core/model_registry.h"
#include "server/grpc/bearer_auth.h"
#include "server/grpc/encoder_service_base.h"
#include "server/grpc/request_serialization.h"
#include "server/metrics/request_observer.h"

namespace encoderd::server {

// The client connection of a call, as a key: a hash of gRPC's peer string
// (grpc::ServerContextBase::peer()), which names the connection
// ("ipv4:10.1.2.3:45678"; through the HTTP/2 guard "fd:17", the relay's
// socket, whose number a later connection may reuse: the queue forgets a
// peer with nothing queued).
uint64_t PeerKey(std::string_view peer);

class EncoderService final : public EncoderServiceBase {
 public:
  // `registry` and `metrics` (null: metrics off) must outlive the service.
  // Every answer carries its request id in the trailing metadata key
  // `x-request-id` (a stream: the id of the message that failed it).
  // At most `max_concurrent_requests` inference calls (Embed, Classify,
  // Encode, Tokenize, Rerank, open EmbedStreams) run at once; more get
  // RESOURCE_EXHAUSTED without waiting; with `fair_share`, shared between
  // client connections (concurrency_limiter.h). Every RPC of the service
  // needs the bearer token when `auth` is enabled (checked before anything
  // else).
  EncoderService(const ModelRegistry* registry, int64_t max_concurrent_requests,
                 ServingMetrics* metrics, double access_log_sample, BearerAuth auth,
                 bool fair_share, int64_t max_send_message_bytes)
      : registry_(registry),
        max_send_message_bytes_(max_send_message_bytes),
        limiter_(max_concurrent_requests, fair_share),
        sending_(ConcurrencyLimiter::ForAnswersSending(max_concurrent_requests, fair_share)),
        observer_(metrics, access_log_sample),
        auth_(std::move(auth)) {
    RouteProtobufLogsToSpdlog();  // request parse errors: debug level only
  }
  // Calls holding a slot or a place among the answers being sent.
  int64_t in_flight() const { return limiter_.in_flight() + sending_.in_flight(); }

  // The drain's end of the EmbedStreams (cli/serve_command.cc calls it every
  // 100 ms from the moment the gRPC port's GOAWAY went out): each open one
  // that waits for the client's next message ends UNAVAILABLE ("the server
  // is shutting down"); one holding a message is answered first and ended
  // by a later call, unless its client has ended its side by then (the
  // stream then ends OK, as always); one that starts from now on ends so at
  // once. Without it an idle stream, which a client may keep open for hours,
  // held the drain until shutdown.grace_s. Any thread.
  void EndStreams();
  // Streams EndStreams ended.
  int ended_streams() const { return ended_streams_.load(); }

  // The HTTP/2 guard's screen (server/net/call_gate.h), asked before gRPC
  // sees a call: refuses an Embed, Classify, Encode or Rerank call that the
  // handler would refuse once it has read the call's body and before
  // tokenizing it (DynamicBatcher::Precheck against its deadline,
  // `timeout` from now, and its connection's place in the queue:
  // RESOURCE_EXHAUSTED, or DEADLINE_EXCEEDED / UNAVAILABLE), recording the
  // refusal as the handler would (metrics, access log) under a request id
  // (`*request_id`). Only with one model configured (the model a call names
  // is in its body, which the guard does not read) and for a call that
  // carries the bearer token when auth is on; OK (the call goes on to gRPC)
  // for everything else. Since the body is not read, a call the handler
  // would reject as invalid is refused like any other under overload.
  // `forwarded_open`: the calls of this connection the screen admitted that
  // gRPC has not answered yet; those holding no handler's slot are still in
  // gRPC on their way to the queue, and count as queued ahead of this one
  // (else, while gRPC falls behind, the queue looks short, every call is
  // admitted, and they expire inside gRPC). `*forwarded_work` says this call
  // was admitted as such. Any thread.
  Status ScreenCall(std::string_view path, std::string_view authorization,
                    std::optional<std::chrono::nanoseconds> timeout, std::string_view peer,
                    int64_t forwarded_open, uint64_t* request_id, bool* forwarded_work);

  grpc::ServerUnaryReactor* Embed(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Classify(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Encode(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ModelInfo(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Rerank(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* EmbedStream(
      grpc::CallbackServerContext* context) override;

 private:
  class StreamCall;  // one EmbedStream (encoder_service.cc)

  // The bearer token, then (takes_slot) a concurrency slot for the client
  // connection `peer` into `slot`: UNAUTHENTICATED, or RESOURCE_EXHAUSTED
  // when every slot is taken, or every one the peer's share allows.
  Status Admit(grpc::ServerContextBase* context, uint64_t peer, bool takes_slot,
               std::optional<ConcurrencyLimiter::Slot>* slot);
  // What every unary RPC shares: Admit, a request id, parsing `request` as a
  // Request, then `body(request, response, call)` (the RPC's own work: it
  // returns the model work to submit, or nullopt when it answered itself),
  // the summary fields of a successful response, and the answer, recorded in
  // the metrics and logs with its request id.
  template <typename Request, typename Response, typename Body>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context, Rpc rpc, bool takes_slot,
                                  const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
                                  Body&& body);

  const ModelRegistry* registry_;
  // listen.max_send_message_bytes: Encode calls whose reply would be larger
  // are refused before they are queued.
  int64_t max_send_message_bytes_;
  ConcurrencyLimiter limiter_;
  // Places for unary calls answered and not yet sent, which gave their slot
  // back: as many as slots, shared between connections as they are
  // (UnaryCall::Answer in encoder_service.cc).
  ConcurrencyLimiter sending_;
  // The open EmbedStreams (each removes itself when gRPC is done with it);
  // ending_streams_: EndStreams was called. Lock order: streams_mu_, then a
  // stream's own.
  std::mutex streams_mu_;
  std::unordered_set<StreamCall*> streams_;
  bool ending_streams_ = false;
  std::atomic<int> ended_streams_{0};
  RequestObserver observer_;
  const BearerAuth auth_;
  std::atomic<uint64_t> next_request_id_{1};
};

}  // namespace encoderd::server
