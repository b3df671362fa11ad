#include "server/grpc/encoder_service.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <mutex>

#include "core/dtype.h"
#include "server/core/request_validation.h"
#include "server/grpc/grpc_status.h"
#include "server/grpc/request_serialization.h"

namespace encoderd::server {
namespace {

int64_t MicrosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
}

// The call's deadline on the steady clock (max when the client set none).
Clock::time_point SteadyDeadline(const grpc::ServerContextBase* context) {
  const auto deadline = context->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return Clock::time_point::max();
  return DeadlineAfter(Clock::now(), std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         deadline - std::chrono::system_clock::now()));
}

// One model call in flight: tokenized sequences, the batcher's request and
// the timing so far.
struct Call {
  std::shared_ptr<ServedModel> model;
  std::shared_ptr<InferenceRequest> request;
  Clock::time_point start = Clock::now();
  int64_t tokenize_us = 0;
  int64_t token_count = 0;
  // The client connection (PeerKey): whose share the call takes.
  uint64_t peer = 0;
};

uint64_t PeerKey(const grpc::ServerContextBase& context) {
  return ::encoderd::server::PeerKey(std::string_view(context.peer()));
}

// What a call asks of the model: the sequences, what to compute for them,
// and how the results fill the response once the request is done.
struct ModelWork {
  std::vector<std::vector<int32_t>> sequences;
  // Empty, or one per sequence (a text pair's segments; each may be empty).
  std::vector<std::vector<int32_t>> token_types;
  OutputSpec spec;
  std::function<void(const InferenceRequest&)> fill;
};

// Records the answer (metrics, logs) and attaches the request id; returns
// `status` as a grpc::Status.
grpc::Status Answer(RequestObserver& observer, grpc::ServerContextBase* context, Rpc rpc,
                    uint64_t id, const Call& call, const Status& status, bool add_metadata = true) {
  if (add_metadata) context->AddTrailingMetadata("x-request-id", std::to_string(id));
  grpc::Status answer = ToGrpcStatus(status);
  RequestSample sample;
  sample.rpc = rpc;
  sample.grpc_code = static_cast<int>(answer.error_code());
  sample.tokens = call.token_count;
  sample.total_us = MicrosSince(call.start);
  sample.tokenize_us = call.tokenize_us;
  if (call.request) {
    sample.ran_model = true;
    sample.sequences = call.request->num_sequences();
    if (observer.metrics()) {
      sample.lengths.reserve(sample.sequences);
      for (int32_t i = 0; i < call.request->num_sequences(); ++i)
        sample.lengths.push_back(static_cast<int32_t>(call.request->sequence(i).size()));
    }
    if (status.ok()) {
      sample.queue_us = call.request->queue_us();
      sample.inference_us = call.request->inference_us();
    }
  }
  observer.Finish(id, call.model ? call.model->config().name : "", sample, status.message());
  return answer;
}

// Tokens of all of a call's sequences.
int64_t TokenCount(const std::vector<std::vector<int32_t>>& sequences) {
  int64_t tokens = 0;
  for (const std::vector<int32_t>& ids : sequences) tokens += static_cast<int64_t>(ids.size());
  return tokens;
}

// The batcher's request for `work`, recorded in `call`.
std::shared_ptr<InferenceRequest> MakeRequest(grpc::ServerContextBase* context, uint64_t id,
                                              ModelWork& work, Call* call) {
  call->token_count += TokenCount(work.sequences);
  call->request =
      std::make_shared<InferenceRequest>(id, std::move(work.sequences), work.spec, Clock::now(),
                                         SteadyDeadline(context), std::move(work.token_types));
  call->request->peer = call->peer;
  return call->request;
}

// Why a waiting request is given up when its call is cancelled: its deadline
// passed, or the client went away.
Status GiveUpReason(const InferenceRequest& request) {
  if (request.DeadlineReachedAt(Clock::now()))
    return DeadlineExceeded("the deadline passed before the request was computed");
  return Cancelled("the client cancelled the request");
}

// Submits call.request to its model's batcher; `on_finish` runs once, on the
// thread that finishes the request, after the in-flight gauge is lowered. A
// refused request was never shared: its status is returned, and on_finish
// never runs.
Status SubmitRequest(const Call& call, ServingMetrics* metrics,
                     std::function<void(const Status&)> on_finish) {
  const std::string model = call.model->config().name;
  call.request->SetOnFinish(
      [metrics, model, on_finish = std::move(on_finish)](const Status& status) {
        if (metrics) metrics->AddInFlight(model, -1);
        on_finish(status);
      });
  if (metrics) metrics->AddInFlight(model, 1);
  Status submitted = call.model->batcher().Submit(call.request);
  if (!submitted.ok()) {
    call.request->SetOnFinish(nullptr);
    if (metrics) metrics->AddInFlight(model, -1);
  }
  return submitted;
}

// gRPC cancelled the call of `request` (the client went away or the deadline
// passed): gives the request up in `batcher` unless it has finished.
void AbandonCancelled(DynamicBatcher& batcher, const std::shared_ptr<InferenceRequest>& request) {
  if (!request || request->finished()) return;
  Status reason = GiveUpReason(*request);
  if (reason.code() == StatusCode::kCancelled) request->Cancel();
  batcher.Abandon(request, reason);
}

using Texts = std::vector<std::string>;

// The ids and token types of `encodings` as the sequences of `work`.
void TakeEncodings(std::vector<Encoding> encodings, ModelWork* work) {
  const bool typed = std::any_of(encodings.begin(), encodings.end(),
                                 [](const Encoding& e) { return !e.token_types.empty(); });
  for (Encoding& e : encodings) {
    work->sequences.push_back(std::move(e.ids));
    if (typed) work->token_types.push_back(std::move(e.token_types));
  }
}

using Strings = google::protobuf::RepeatedPtrField<std::string>;

Texts ToTexts(const Strings& texts) { return {texts.begin(), texts.end()}; }

// The counts `model` takes, checked before a request's strings are copied
// out of it: a 4 MB request of 2,000,000 empty texts was copied whole
// before its count was read. The same answers as the checks after
// (request_validation.h), which still run.
Status CheckCounts(const ServedModel& model, int texts, int pairs) {
  const RequestLimits limits = model.limits();
  RETURN_IF_ERROR(CheckCount(static_cast<size_t>(texts), limits));
  if (pairs > limits.max_client_batch_size)
    return CheckCount(static_cast<size_t>(pairs), limits, "text_pairs");
  return Status::Ok();
}

// Runs `tokenize` on call->model (timed into the call) and makes its
// encodings the sequences and token types of `work`, unless the model's
// batcher would refuse a call due at `deadline` anyway, or the model
// cannot run them (ServedModel::CheckPadKeys).
Status TokenizeInto(Clock::time_point deadline, Call* call, ModelWork* work,
                    const std::function<StatusOr<std::vector<Encoding>>()>& tokenize) {
  RETURN_IF_ERROR(call->model->batcher().Precheck(deadline, call->peer));
  const Clock::time_point t = Clock::now();
  ASSIGN_OR_RETURN(std::vector<Encoding> encodings, tokenize());
  call->tokenize_us = MicrosSince(t);
  RETURN_IF_ERROR(call->model->CheckPadKeys(encodings));
  TakeEncodings(std::move(encodings), work);
  return Status::Ok();
}

// Makes `model` the call's and tokenizes `texts` on it (with `pairs`, when
// not empty: one sequence per pair; the prompt `prompt_name` names in front)
// into `work` (TokenizeInto).
Status PrepareOn(std::shared_ptr<ServedModel> model, const Strings& texts, const Strings& pairs,
                 bool truncate, const std::string& prompt_name, Clock::time_point deadline,
                 Call* call, ModelWork* work) {
  call->model = std::move(model);
  RETURN_IF_ERROR(CheckCounts(*call->model, texts.size(), pairs.size()));
  return TokenizeInto(deadline, call, work, [&] {
    return call->model->Tokenize(ToTexts(texts), ToTexts(pairs), truncate, prompt_name);
  });
}

// PrepareOn the model `model_name` names.
Status Prepare(const ModelRegistry& registry, const std::string& model_name, const Strings& texts,
               const Strings& pairs, bool truncate, const std::string& prompt_name,
               Clock::time_point deadline, Call* call, ModelWork* work) {
  ASSIGN_OR_RETURN(std::shared_ptr<ServedModel> model, registry.Find(model_name));
  return PrepareOn(std::move(model), texts, pairs, truncate, prompt_name, deadline, call, work);
}

// The fields every successful response carries: token count, model name and
// the timing breakdown. `call.model` must be set.
template <typename Response>
void FillSummary(const Call& call, Response* response) {
  response->set_token_count(call.token_count);
  response->set_model(call.model->config().name);
  v1::Timing* timing = response->mutable_timing();
  timing->set_tokenize_us(call.tokenize_us);
  if (call.request) {
    timing->set_queue_us(call.request->queue_us());
    timing->set_inference_us(call.request->inference_us());
  }
  timing->set_total_us(MicrosSince(call.start));
}

// ModelInfo's response carries no summary.
void FillSummary(const Call&, v1::ModelInfoResponse*) {}

// Embed's work (shared by Embed and EmbedStream).
StatusOr<ModelWork> EmbedWork(const ModelRegistry& registry, const v1::EmbedRequest& request,
                              Clock::time_point deadline, v1::EmbedResponse* response, Call& call) {
  ASSIGN_OR_RETURN(const std::optional<Pooling> pooling, CheckPooling(request.pooling()));
  // dimensions is checked before the texts are tokenized, on the model that
  // then computes them.
  ASSIGN_OR_RETURN(const std::shared_ptr<ServedModel> model, registry.Find(request.model()));
  const EncoderConfig& config = model->encoder_config();
  ASSIGN_OR_RETURN(const int64_t kept,
                   KeptDimensions(request.dimensions(), config.served_dimensions(),
                                  config.pooled_width(), model->config().name));
  ModelWork work;
  RETURN_IF_ERROR(PrepareOn(model, request.texts(), request.text_pairs(), request.truncate(),
                            request.prompt_name(), deadline, &call, &work));
  // A model whose folder normalizes (sentence-transformers' Normalize) always does.
  const bool normalize = request.normalize() || config.default_normalize;
  work.spec = {OutputKind::kEmbedding, pooling.value_or(config.default_pooling), normalize};
  ASSIGN_OR_RETURN(work.spec.pool_start, model->PoolStart(request.prompt_name()));
  work.fill = [response, kept, normalize](const InferenceRequest& done) {
    for (const auto& values : done.results()) {
      auto* out = response->add_embeddings()->mutable_values();
      const int64_t n = static_cast<int64_t>(values.size());
      if (kept >= n) {
        out->Assign(values.begin(), values.end());
      } else {
        const std::vector<float> cut = KeptValues(values.data(), n, kept, normalize);
        out->Assign(cut.begin(), cut.end());
      }
    }
  };
  return work;
}

// One unary call over gRPC's callback API. The handler admits it, parses
// and tokenizes on the gRPC thread and submits it to the batcher; the thread
// that finishes the request (an executor, the batcher dropping it, or the cancellation below) fills
// the response and answers. No thread waits for the call meanwhile: gRPC
// cancels it when the client goes away or its deadline passes (OnCancel),
// which abandons the request. Deletes itself when gRPC is done with it.
class UnaryCall final : public grpc::ServerUnaryReactor {
 public:
  UnaryCall(grpc::CallbackServerContext* context, Rpc rpc, uint64_t id, RequestObserver& observer,
            ConcurrencyLimiter& sending)
      : context_(context), rpc_(rpc), id_(id), observer_(observer), sending_(sending) {}

  Call& call() { return call_; }
  uint64_t id() const { return id_; }
  std::optional<ConcurrencyLimiter::Slot>* slot() { return &slot_; }

  // Answers now with `status` (the response bytes, when OK, are written).
  // The call's concurrency slot goes back before the answer is handed to
  // gRPC, in exchange for a place among the answers being sent (`sending_`,
  // held until OnDone): a client that calls again as soon as it has its
  // answer finds the slot free (when the slot went back in OnDone, a moment
  // after the client had the answer, the next call could find it taken:
  // e2e_serve's check_calls_after_answers). Without a place the call keeps
  // its slot until gRPC is done with it (OnDone: the answer sent, or the
  // call cancelled): a client that never takes its answers (a flow-control
  // window of 0, no deadline) holds at most its connection's share of the
  // places and of the slots, where its replies piled up in gRPC's queues
  // without bound when the slot went back unconditionally.
  void Answer(const Status& status) {
    const grpc::Status answer =
        encoderd::server::Answer(observer_, context_, rpc_, id_, call_, status);
    if (slot_ && slot_->held()) {
      ConcurrencyLimiter::Slot place = sending_.TryAcquire(call_.peer);
      if (place.held()) slot_.emplace(std::move(place));  // the slot goes back first
    }
    Finish(answer);
  }

  // Submits `work`; `respond` writes the response once the request is done.
  // The call may be answered (and this object gone) before Submit returns.
  void Submit(ModelWork work, std::function<Status()> respond) {
    MakeRequest(context_, id_, work, &call_);
    Status submitted = SubmitRequest(
        call_, observer_.metrics(),
        [this, respond](const Status& status) { Answer(status.ok() ? respond() : status); });
    if (!submitted.ok()) Answer(submitted);
  }

  void OnCancel() override {
    if (call_.request) AbandonCancelled(call_.model->batcher(), call_.request);
  }

  void OnDone() override { delete this; }

 private:
  grpc::CallbackServerContext* const context_;
  const Rpc rpc_;
  const uint64_t id_;
  RequestObserver& observer_;
  ConcurrencyLimiter& sending_;
  Call call_;
  // A concurrency slot from Admit; once answered, maybe a place in sending_.
  std::optional<ConcurrencyLimiter::Slot> slot_;
};

// Parses a request message from its bytes: INVALID_ARGUMENT when they do not
// parse (request_serialization.h).
template <typename Request>
Status ParseRequest(const grpc::ByteBuffer* bytes, Request* request) {
  // A stream that ended (or was reset) before its message arrived: the
  // handler still runs, with no bytes.
  if (!bytes->Valid()) return InvalidArgument("the call carries no request message");
  grpc::ByteBuffer copy = *bytes;  // shares the slices
  const grpc::Status parsed = DeserializeRequest(&copy, request);
  if (parsed.ok()) return Status::Ok();
  return parsed.error_code() == grpc::StatusCode::INVALID_ARGUMENT
             ? InvalidArgument(parsed.error_message())
             : Internal(parsed.error_message());
}

template <typename Response>
Status SerializeResponse(const Response& response, grpc::ByteBuffer* bytes) {
  bool own = false;
  const grpc::Status s =
      grpc::GenericSerialize<grpc::ProtoBufferWriter, Response>(response, bytes, &own);
  return s.ok() ? Status::Ok() : Internal("serializing the response: " + s.error_message());
}

}  // namespace

// One EmbedStream over gRPC's callback API: it reads a message, parses and
// tokenizes it on the gRPC thread, submits it, and the thread that finishes
// the request (an executor, the batcher dropping it, or the cancellation below) writes the
// response; the next message is read once that write is done, so a stream's messages are answered
// one at a time and in order, as before. No thread waits for a stream: gRPC cancels it when the
// client goes away or its deadline passes (OnCancel), which abandons the message in flight. The
// first message that fails ends the stream with its status and request id; the stream ends OK when
// the client closes its side, and UNAVAILABLE when the drain ends it (EndStreams). Holds a
// concurrency slot while open. Deletes itself when gRPC is done with it.
class EncoderService::StreamCall final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamCall(grpc::CallbackServerContext* context, EncoderService* service)
      : context_(context), service_(*service), peer_(PeerKey(*context)) {}

  // Admits the stream and asks for its first message (or ends it).
  void Start() {
    const Status admitted = service_.Admit(context_, peer_, /*takes_slot=*/true, &slot_);
    if (!admitted.ok()) {
      Call none;
      return End(service_.next_request_id_++, none, admitted);
    }
    std::lock_guard<std::mutex> streams(service_.streams_mu_);
    service_.streams_.insert(this);
    std::lock_guard<std::mutex> lock(mu_);
    if (service_.ending_streams_) {
      EndForDrainLocked();
    } else {
      ReadLocked();
    }
  }

  // The drain: ends the stream if it waits for a message (else a later
  // call does, once the message it holds is answered). Under the service's
  // streams_mu_.
  void Drain() {
    std::lock_guard<std::mutex> lock(mu_);
    if (reading_) EndForDrainLocked();
  }

  void OnReadDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      reading_ = false;
      if (finished_) return;  // the drain ended it while the read was outstanding
    }
    if (!ok) return End(0, call_, Status::Ok(), /*record=*/false);  // the client closed its side
    id_ = service_.next_request_id_++;
    call_ = Call();
    call_.peer = peer_;
    response_ = v1::EmbedResponse();
    StatusOr<ModelWork> work = [&]() -> StatusOr<ModelWork> {
      v1::EmbedRequest request;
      RETURN_IF_ERROR(ParseRequest(&request_bytes_, &request));
      return EmbedWork(*service_.registry_, request, SteadyDeadline(context_), &response_, call_);
    }();
    if (!work.ok()) return End(id_, call_, work.status());
    auto fill = std::move(work->fill);
    auto request = MakeRequest(context_, id_, *work, &call_);
    Status submitted;
    {
      // Under mu_: a cancel either comes before (and the message is not
      // submitted) or sees the request to abandon.
      std::lock_guard<std::mutex> lock(mu_);
      submitted = cancelled_ ? GiveUpReason(*request)
                             : SubmitRequest(call_, service_.observer_.metrics(),
                                             [this, fill = std::move(fill)](const Status& status) {
                                               Respond(fill, status);
                                             });
      if (submitted.ok()) in_flight_ = {request, call_.model};
    }
    if (!submitted.ok()) End(id_, call_, submitted);
  }

  // Reads on even while draining: a client that half-closed after its last
  // message then ends the stream OK; one that did not is ended by the
  // drain's next EndStreams.
  void OnWriteDone(bool ok) override {
    if (!ok) return End(0, call_, Cancelled("write failed"), /*record=*/false);
    std::lock_guard<std::mutex> lock(mu_);
    ReadLocked();
  }

  void OnCancel() override {
    InFlight in_flight;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      in_flight = in_flight_;
    }
    if (in_flight.request) AbandonCancelled(in_flight.model->batcher(), in_flight.request);
  }

  void OnDone() override {
    {
      std::lock_guard<std::mutex> streams(service_.streams_mu_);
      service_.streams_.erase(this);
    }
    delete this;
  }

 private:
  void ReadLocked() {
    if (finished_) return;
    reading_ = true;
    StartRead(&request_bytes_);
  }

  void EndForDrainLocked() {
    if (FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down")))
      ++service_.ended_streams_;
  }

  // False when the stream had finished already.
  bool FinishLocked(const grpc::Status& status) {
    if (finished_) return false;
    finished_ = true;
    slot_.reset();
    Finish(status);
    return true;
  }

  // The message in flight finished with `status`: writes its response, or
  // ends the stream.
  void Respond(const std::function<void(const InferenceRequest&)>& fill, const Status& status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_flight_ = InFlight();
    }
    if (!status.ok()) return End(id_, call_, status);
    fill(*call_.request);
    FillSummary(call_, &response_);
    response_bytes_.Clear();  // the previous message's response (written)
    const Status serialized = SerializeResponse(response_, &response_bytes_);
    if (!serialized.ok()) return End(id_, call_, serialized);
    (void)Answer(service_.observer_, context_, Rpc::kEmbedStream, id_, call_, status,
                 /*add_metadata=*/false);
    StartWrite(&response_bytes_);
  }

  // Ends the stream with `status`; unless `record` is false, the answer of
  // message `id` is recorded and its request id added to the trailers.
  void End(uint64_t id, const Call& call, const Status& status, bool record = true) {
    grpc::Status answer = ToGrpcStatus(status);
    if (record) answer = Answer(service_.observer_, context_, Rpc::kEmbedStream, id, call, status);
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(answer);
  }

  grpc::CallbackServerContext* const context_;
  EncoderService& service_;
  const uint64_t peer_;
  std::optional<ConcurrencyLimiter::Slot> slot_;
  // The message being answered (one at a time).
  uint64_t id_ = 0;
  Call call_;
  grpc::ByteBuffer request_bytes_, response_bytes_;
  v1::EmbedResponse response_;
  // The message submitted and not finished, with its model (OnCancel reads
  // it on any thread, so not from call_).
  struct InFlight {
    std::shared_ptr<InferenceRequest> request;
    std::shared_ptr<ServedModel> model;
  };
  std::mutex mu_;  // guards what follows
  bool cancelled_ = false;
  InFlight in_flight_;
  bool reading_ = false;  // a read is outstanding: no message held
  bool finished_ = false;
};

void EncoderService::EndStreams() {
  std::lock_guard<std::mutex> lock(streams_mu_);
  ending_streams_ = true;
  for (StreamCall* stream : streams_) stream->Drain();
}

uint64_t PeerKey(std::string_view peer) { return std::hash<std::string_view>()(peer); }

Status EncoderService::ScreenCall(std::string_view path, std::string_view authorization,
                                  std::optional<std::chrono::nanoseconds> timeout,
                                  std::string_view peer, int64_t forwarded_open,
                                  uint64_t* request_id, bool* forwarded_work) {
  *forwarded_work = false;
  static constexpr std::string_view kService = "/encoderd.v1.Encoder/";
  if (path.substr(0, kService.size()) != kService) return Status::Ok();
  const std::string_view method = path.substr(kService.size());
  Rpc rpc;
  if (method == "Embed") {
    rpc = Rpc::kEmbed;
  } else if (method == "Classify") {
    rpc = Rpc::kClassify;
  } else if (method == "Encode") {
    rpc = Rpc::kEncode;
  } else if (method == "Rerank") {
    rpc = Rpc::kRerank;
  } else {
    return Status::Ok();
  }
  if (auth_.enabled() && !auth_.CheckHeader(authorization.empty() ? nullptr : &authorization).ok())
    return Status::Ok();  // the handler answers UNAUTHENTICATED
  StatusOr<std::shared_ptr<ServedModel>> model = registry_->Find("");
  if (!model.ok()) return Status::Ok();  // several models, or none ready
  const Clock::time_point now = Clock::now();
  const Clock::time_point deadline =
      timeout ? DeadlineAfter(now, *timeout) : Clock::time_point::max();
  // This connection's admitted calls that hold no handler's slot yet, nor
  // a place among the answers being sent (its slots and places: with
  // fair_share off, every peer's, which can only make this smaller).
  const uint64_t peer_key = PeerKey(peer);
  const int64_t in_grpc = std::max<int64_t>(
      0, forwarded_open - limiter_.held_by(peer_key) - sending_.held_by(peer_key));
  Status refused = (*model)->batcher().Precheck(deadline, peer_key, in_grpc);
  if (refused.ok()) {
    *forwarded_work = true;
    return refused;
  }
  RequestSample sample;
  sample.rpc = rpc;
  sample.grpc_code = ToGrpcStatus(refused).error_code();
  sample.total_us = MicrosSince(now);
  *request_id = next_request_id_.fetch_add(1);
  observer_.Finish(*request_id, (*model)->config().name, sample, refused.message());
  return refused;
}

Status EncoderService::Admit(grpc::ServerContextBase* context, uint64_t peer, bool takes_slot,
                             std::optional<ConcurrencyLimiter::Slot>* slot) {
  RETURN_IF_ERROR(auth_.Check(*context));
  if (!takes_slot) return Status::Ok();
  bool over_share = false;
  slot->emplace(limiter_.TryAcquire(peer, &over_share));
  if ((*slot)->held()) return Status::Ok();
  // No slot for the call: the calls outgrew what the server accepts (from
  // this connection, or at all), which makes a queue that stands one of
  // sustained overload.
  for (const auto& model : registry_->Loaded()) model->batcher().ObserveOverflow();
  if (over_share)
    return ResourceExhausted("this connection holds its share of max_concurrent_requests (" +
                             std::to_string(limiter_.limit()) +
                             "), and the rest is kept for other clients; retry later");
  return ResourceExhausted("server is at max_concurrent_requests (" +
                           std::to_string(limiter_.limit()) + " calls in progress)");
}

template <typename Request, typename Response, typename Body>
grpc::ServerUnaryReactor* EncoderService::Unary(grpc::CallbackServerContext* context, Rpc rpc,
                                                bool takes_slot, const grpc::ByteBuffer* bytes,
                                                grpc::ByteBuffer* response_bytes, Body&& body) {
  auto* reactor = new UnaryCall(context, rpc, next_request_id_++, observer_, sending_);
  Call& call = reactor->call();
  call.peer = PeerKey(*context);
  // The response outlives this function when the call waits for the model.
  auto response = std::make_shared<Response>();
  auto respond = [response, response_bytes, &call]() {
    FillSummary(call, response.get());
    return SerializeResponse(*response, response_bytes);
  };
  auto run = [&]() -> StatusOr<std::optional<ModelWork>> {
    RETURN_IF_ERROR(Admit(context, call.peer, takes_slot, reactor->slot()));
    Request request;
    RETURN_IF_ERROR(ParseRequest(bytes, &request));
    return body(request, response.get(), call);
  };
  StatusOr<std::optional<ModelWork>> work = run();
  if (!work.ok()) {
    reactor->Answer(work.status());
  } else if (!work->has_value()) {
    reactor->Answer(respond());
  } else {
    ModelWork& model_work = **work;
    auto fill = std::move(model_work.fill);
    reactor->Submit(std::move(model_work), [fill = std::move(fill), respond, &call]() {
      fill(*call.request);
      return respond();
    });
  }
  return reactor;
}

grpc::ServerUnaryReactor* EncoderService::Embed(grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response) {
  return Unary<v1::EmbedRequest, v1::EmbedResponse>(
      context, Rpc::kEmbed, /*takes_slot=*/true, request, response,
      [&](const v1::EmbedRequest& r, v1::EmbedResponse* out,
          Call& call) -> StatusOr<std::optional<ModelWork>> {
        ASSIGN_OR_RETURN(ModelWork work,
                         EmbedWork(*registry_, r, SteadyDeadline(context), out, call));
        return std::optional<ModelWork>(std::move(work));
      });
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* EncoderService::EmbedStream(
    grpc::CallbackServerContext* context) {
  auto* stream = new StreamCall(context, this);
  stream->Start();
  return stream;
}

grpc::ServerUnaryReactor* EncoderService::Classify(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request,
                                                   grpc::ByteBuffer* response) {
  return Unary<v1::ClassifyRequest, v1::ClassifyResponse>(
      context, Rpc::kClassify, /*takes_slot=*/true, request, response,
      [&](const v1::ClassifyRequest& r, v1::ClassifyResponse* out,
          Call& call) -> StatusOr<std::optional<ModelWork>> {
        ModelWork work;
        RETURN_IF_ERROR(Prepare(*registry_, r.model(), r.texts(), r.text_pairs(), r.truncate(),
                                r.prompt_name(), SteadyDeadline(context), &call, &work));
        const EncoderConfig& config = call.model->encoder_config();
        if (config.num_labels <= 0)
          return FailedPrecondition("model '" + call.model->config().name +
                                    "' has no classification head");
        work.spec = {OutputKind::kClassification, Pooling::kCls, false};
        work.fill = [out, labels = config.labels](const InferenceRequest& done) {
          for (const auto& scores : done.results()) {
            v1::Classification* result = out->add_results();
            result->mutable_scores()->Assign(scores.begin(), scores.end());
            size_t best = 0;
            for (size_t i = 1; i < scores.size(); ++i)
              if (scores[i] > scores[best]) best = i;
            if (best < labels.size()) result->set_label(labels[best]);
          }
        };
        return std::optional<ModelWork>(std::move(work));
      });
}

grpc::ServerUnaryReactor* EncoderService::Rerank(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  return Unary<v1::RerankRequest, v1::RerankResponse>(
      context, Rpc::kRerank, /*takes_slot=*/true, request, response,
      [&](const v1::RerankRequest& r, v1::RerankResponse* out,
          Call& call) -> StatusOr<std::optional<ModelWork>> {
        ASSIGN_OR_RETURN(call.model, registry_->Find(r.model()));
        const EncoderConfig& config = call.model->encoder_config();
        if (!call.model->serves_rerank()) {
          return FailedPrecondition(
              "model '" + call.model->config().name +
              "' is not a cross-encoder (Rerank needs a text-pair model whose classification "
              "head has one output; it has " +
              std::to_string(config.num_labels) + "): use Classify with text_pairs");
        }
        if (r.top_n() < 0)
          return InvalidArgument("top_n must not be negative, got " + std::to_string(r.top_n()));
        RETURN_IF_ERROR(CheckCounts(*call.model, r.texts_size(), 0));
        Texts texts = ToTexts(r.texts());
        ModelWork work;
        RETURN_IF_ERROR(TokenizeInto(SteadyDeadline(context), &call, &work, [&] {
          return call.model->TokenizeQueryPairs(r.query(), texts, r.truncate(), r.prompt_name());
        }));
        if (!r.return_texts()) texts.clear();
        work.spec = {OutputKind::kClassification, Pooling::kCls, false};
        work.fill = [out, top_n = r.top_n(),
                     texts = std::move(texts)](const InferenceRequest& done) {
          std::vector<int32_t> order(done.results().size());
          for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
          // A NaN score (a damaged head) sorts last instead of breaking the order.
          const auto score = [&done](int32_t i) {
            const float s = done.results()[i].at(0);
            return std::isnan(s) ? -std::numeric_limits<float>::infinity() : s;
          };
          std::stable_sort(order.begin(), order.end(),
                           [&](int32_t a, int32_t b) { return score(a) > score(b); });
          if (top_n > 0 && static_cast<size_t>(top_n) < order.size()) order.resize(top_n);
          for (int32_t i : order) {
            v1::RerankResult* result = out->add_results();
            result->set_index(i);
            result->set_score(done.results()[i].at(0));
            if (!texts.empty()) result->set_text(texts[i]);
          }
        };
        return std::optional<ModelWork>(std::move(work));
      });
}

grpc::ServerUnaryReactor* EncoderService::Encode(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  return Unary<v1::EncodeRequest, v1::EncodeResponse>(
      context, Rpc::kEncode, /*takes_slot=*/true, request, response,
      [&](const v1::EncodeRequest& r, v1::EncodeResponse* out,
          Call& call) -> StatusOr<std::optional<ModelWork>> {
        RETURN_IF_ERROR(CheckEncodeInputs(r.texts_size(), r.token_ids_size()));
        if (r.token_ids_size() > 0 && r.text_pairs_size() > 0)
          return InvalidArgument("text_pairs go with texts, not with token_ids");
        if (r.token_ids_size() > 0 && !r.prompt_name().empty())
          return InvalidArgument("prompt_name goes with texts, not with token_ids");
        ModelWork work;
        if (r.token_ids_size() > 0) {
          ASSIGN_OR_RETURN(call.model, registry_->Find(r.model()));
          RETURN_IF_ERROR(CheckCount(r.token_ids_size(), call.model->limits(), "token_ids"));
          for (const v1::TokenIds& ids : r.token_ids())
            work.sequences.emplace_back(ids.ids().begin(), ids.ids().end());
          RETURN_IF_ERROR(call.model->CheckTokenIds(work.sequences));
        } else {
          RETURN_IF_ERROR(Prepare(*registry_, r.model(), r.texts(), r.text_pairs(), r.truncate(),
                                  r.prompt_name(), SteadyDeadline(context), &call, &work));
        }
        work.spec = {OutputKind::kHiddenStates, Pooling::kCls, false};
        const int32_t hidden = static_cast<int32_t>(call.model->encoder_config().hidden_size);
        RETURN_IF_ERROR(CheckEncodeReplySize(TokenCount(work.sequences),
                                             static_cast<int64_t>(work.sequences.size()), hidden,
                                             max_send_message_bytes_));
        work.fill = [out, hidden](const InferenceRequest& done) {
          for (int32_t i = 0; i < done.num_sequences(); ++i) {
            const auto& values = done.results()[i];
            v1::TokenStates* states = out->add_sequences();
            states->mutable_values()->Assign(values.begin(), values.end());
            states->set_num_tokens(static_cast<int32_t>(done.sequence(i).size()));
            states->set_hidden_size(hidden);
          }
        };
        return std::optional<ModelWork>(std::move(work));
      });
}

grpc::ServerUnaryReactor* EncoderService::Tokenize(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request,
                                                   grpc::ByteBuffer* response) {
  return Unary<v1::TokenizeRequest, v1::TokenizeResponse>(
      context, Rpc::kTokenize, /*takes_slot=*/true, request, response,
      [&](const v1::TokenizeRequest& r, v1::TokenizeResponse* out,
          Call& call) -> StatusOr<std::optional<ModelWork>> {
        ASSIGN_OR_RETURN(call.model, registry_->Find(r.model()));
        RETURN_IF_ERROR(CheckCounts(*call.model, r.texts_size(), r.text_pairs_size()));
        ASSIGN_OR_RETURN(std::vector<Encoding> encodings,
                         call.model->Tokenize(ToTexts(r.texts()), ToTexts(r.text_pairs()),
                                              r.truncate(), r.prompt_name()));
        for (const Encoding& e : encodings) {
          v1::Tokenization* t = out->add_tokenizations();
          t->mutable_ids()->Assign(e.ids.begin(), e.ids.end());
          for (const std::string& piece : e.pieces) t->add_pieces(piece);
          t->set_untruncated_length(e.untruncated_length);
          t->mutable_token_type_ids()->Assign(e.token_types.begin(), e.token_types.end());
          call.token_count += static_cast<int64_t>(e.ids.size());
        }
        call.tokenize_us = MicrosSince(call.start);
        return std::optional<ModelWork>();
      });
}

grpc::ServerUnaryReactor* EncoderService::ModelInfo(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response) {
  // Takes no concurrency slot: answering it costs no model time.
  return Unary<v1::ModelInfoRequest, v1::ModelInfoResponse>(
      context, Rpc::kModelInfo, /*takes_slot=*/false, request, response,
      [&](const v1::ModelInfoRequest& r, v1::ModelInfoResponse* out,
          Call& call) -> StatusOr<std::optional<ModelWork>> {
        std::vector<std::shared_ptr<ServedModel>> models;
        if (!r.model().empty()) {
          ASSIGN_OR_RETURN(call.model, registry_->Find(r.model()));
          models.push_back(call.model);
        } else {
          if (registry_->draining()) return Unavailable("the server is shutting down");
          models = registry_->Loaded();
        }
        for (const auto& m : models) {
          const EncoderConfig& c = m->encoder_config();
          v1::Model* info = out->add_models();
          info->set_name(m->config().name);
          info->set_family(ModelFamilyName(c.family));
          info->set_hidden_size(c.hidden_size);
          info->set_max_tokens(m->max_tokens());
          for (const std::string& label : c.labels) info->add_labels(label);
          info->set_dtype(std::string(DTypeName(m->config().dtype)));
          info->set_device(DeviceName(m->config().device));
          info->set_default_pooling(PoolingName(c.default_pooling));
          info->set_default_normalize(c.default_normalize);
          info->set_embedding_size(c.served_dimensions());
          info->set_max_dimensions(c.pooled_width());
          info->set_replicas(m->config().replicas);
          info->set_max_client_batch_size(m->config().max_client_batch_size);
          info->set_text_pairs(m->reads_text_pairs());
          info->set_rerank(m->serves_rerank());
          if (c.num_labels > 0) info->set_head_output(HeadOutputName(c.head_output()));
          info->set_default_prompt(m->default_prompt());
          info->set_default_prompt_name(m->default_prompt_name());
          info->set_prompt_excluded_from_pooling(!m->include_prompt());
          info->mutable_prompts()->insert(m->prompts().begin(), m->prompts().end());
        }
        return std::optional<ModelWork>();
      });
}

}  // namespace encoderd::server
