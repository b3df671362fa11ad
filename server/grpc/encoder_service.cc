#include "server/grpc/encoder_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>

#include "core/dtype.h"
#include "server/core/request_validation.h"
#include "server/grpc/grpc_status.h"

namespace encoderd::server {
namespace {

int64_t MicrosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
}

// The call's deadline on the steady clock (max when the client set none).
Clock::time_point SteadyDeadline(const grpc::ServerContextBase* context) {
  const auto deadline = context->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return Clock::time_point::max();
  const auto left = deadline - std::chrono::system_clock::now();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(left);
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

// The client connection of a call, as a key: a hash of gRPC's peer string,
// which names the connection ("ipv4:10.1.2.3:45678"; through the HTTP/2
// guard "fd:17", the relay's socket, whose number a later connection may
// reuse: the queue forgets a peer with nothing queued).
uint64_t PeerKey(const grpc::ServerContextBase& context) {
  return std::hash<std::string>()(context.peer());
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

// The batcher's request for `work`, recorded in `call`.
std::shared_ptr<InferenceRequest> MakeRequest(grpc::ServerContextBase* context, uint64_t id,
                                              ModelWork& work, Call* call) {
  for (const auto& s : work.sequences) call->token_count += static_cast<int64_t>(s.size());
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

// Submits `work` and waits for the result, cancelling the request when the
// client goes away (`watcher` watches the client): the streaming RPC's way,
// where a thread serves the stream anyway.
Status RunOnModel(grpc::ServerContext* context, uint64_t id, ModelWork& work, Call* call,
                  CancellationWatcher& watcher, ServingMetrics* metrics) {
  auto request = MakeRequest(context, id, work, call);
  // Submit refuses a request whose deadline already passed (DEADLINE_EXCEEDED,
  // counted as deadline_before_queue) before it takes a queue entry.
  DynamicBatcher& batcher = call->model->batcher();
  RETURN_IF_ERROR(batcher.Submit(request));
  const std::string& model = call->model->config().name;
  if (metrics) metrics->AddInFlight(model, 1);
  // The handler answers as soon as the result is there, the deadline passed
  // (checked first: gRPC also cancels the call when it expires) or the client
  // is gone; the batcher removes an abandoned request from its queue at once
  // and discards the results of a running one. Abandon() fails the request,
  // which makes done() ready.
  auto done = request->done();
  {
    CancellationWatcher::Watch watch =
        watcher.Add([context] { return context->IsCancelled(); },
                    [&batcher, request] {
                      if (request->DeadlineReachedAt(Clock::now()))
                        return;  // the deadline's answer, below
                      request->Cancel();
                      batcher.Abandon(request, Cancelled("the client cancelled the request"));
                    });
    bool ready = true;
    if (request->deadline() == Clock::time_point::max()) {
      done.wait();
    } else {
      ready = done.wait_until(request->deadline()) == std::future_status::ready;
    }
    if (!ready) batcher.Abandon(request, GiveUpReason(*request));
  }
  if (metrics) metrics->AddInFlight(model, -1);
  RETURN_IF_ERROR(done.get());
  work.fill(*request);
  return Status::Ok();
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

Texts ToTexts(const google::protobuf::RepeatedPtrField<std::string>& texts) {
  return {texts.begin(), texts.end()};
}

// Runs `tokenize` on call->model (timed into the call) and makes its
// encodings the sequences and token types of `work`, unless the model's
// batcher would refuse a call due at `deadline` anyway.
Status TokenizeInto(Clock::time_point deadline, Call* call, ModelWork* work,
                    const std::function<StatusOr<std::vector<Encoding>>()>& tokenize) {
  RETURN_IF_ERROR(call->model->batcher().Precheck(deadline, call->peer));
  const Clock::time_point t = Clock::now();
  ASSIGN_OR_RETURN(std::vector<Encoding> encodings, tokenize());
  call->tokenize_us = MicrosSince(t);
  TakeEncodings(std::move(encodings), work);
  return Status::Ok();
}

// Looks up the model and tokenizes `texts` (with `pairs`, when not empty:
// one sequence per pair) into `work` (TokenizeInto).
Status Prepare(const ModelRegistry& registry, const std::string& model_name, const Texts& texts,
               const Texts& pairs, bool truncate, Clock::time_point deadline, Call* call,
               ModelWork* work) {
  ASSIGN_OR_RETURN(call->model, registry.Find(model_name));
  return TokenizeInto(deadline, call, work,
                      [&] { return call->model->Tokenize(texts, pairs, truncate); });
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
  ModelWork work;
  RETURN_IF_ERROR(Prepare(registry, request.model(), ToTexts(request.texts()),
                          ToTexts(request.text_pairs()), request.truncate(), deadline, &call,
                          &work));
  const EncoderConfig& config = call.model->encoder_config();
  // A model whose folder normalizes (sentence-transformers' Normalize) always does.
  work.spec = {OutputKind::kEmbedding, pooling.value_or(config.default_pooling),
               request.normalize() || config.default_normalize};
  work.fill = [response](const InferenceRequest& done) {
    for (const auto& values : done.results())
      response->add_embeddings()->mutable_values()->Assign(values.begin(), values.end());
  };
  return work;
}

// One unary call over gRPC's callback API. The handler admits it, parses
// and tokenizes on the gRPC thread and submits it to the batcher; the thread
// that finishes the request (an executor, or the cancellation below) fills
// the response and answers. No thread waits for the call meanwhile: gRPC
// cancels it when the client goes away or its deadline passes (OnCancel),
// which abandons the request. Deletes itself when gRPC is done with it.
class UnaryCall final : public grpc::ServerUnaryReactor {
 public:
  UnaryCall(grpc::CallbackServerContext* context, Rpc rpc, uint64_t id, RequestObserver& observer)
      : context_(context), rpc_(rpc), id_(id), observer_(observer) {}

  Call& call() { return call_; }
  uint64_t id() const { return id_; }
  std::optional<ConcurrencyLimiter::Slot>* slot() { return &slot_; }

  // Answers now with `status` (the response bytes, when OK, are written).
  void Answer(const Status& status) {
    const grpc::Status answer =
        encoderd::server::Answer(observer_, context_, rpc_, id_, call_, status);
    slot_.reset();
    Finish(answer);
  }

  // Submits `work`; `respond` writes the response once the request is done.
  // The call may be answered (and this object gone) before Submit returns.
  void Submit(ModelWork work, std::function<Status()> respond) {
    auto request = MakeRequest(context_, id_, work, &call_);
    ServingMetrics* metrics = observer_.metrics();
    const std::string model = call_.model->config().name;
    request->SetOnFinish(
        [this, respond = std::move(respond), metrics, model](const Status& status) {
          if (metrics) metrics->AddInFlight(model, -1);
          Answer(status.ok() ? respond() : status);
        });
    if (metrics) metrics->AddInFlight(model, 1);
    Status submitted = call_.model->batcher().Submit(request);
    if (!submitted.ok()) {
      request->SetOnFinish(nullptr);  // never shared: refused before the queue
      if (metrics) metrics->AddInFlight(model, -1);
      Answer(submitted);
    }
  }

  void OnCancel() override {
    std::shared_ptr<InferenceRequest> request = call_.request;
    if (!request || request->finished()) return;
    Status reason = GiveUpReason(*request);
    if (reason.code() == StatusCode::kCancelled) request->Cancel();
    call_.model->batcher().Abandon(request, reason);
  }

  void OnDone() override { delete this; }

 private:
  grpc::CallbackServerContext* const context_;
  const Rpc rpc_;
  const uint64_t id_;
  RequestObserver& observer_;
  Call call_;
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
  (void)TakeRequestParseError();  // a unary call reports it here, not on the thread
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

Status EncoderService::Admit(grpc::ServerContextBase* context, uint64_t peer, bool takes_slot,
                             std::optional<ConcurrencyLimiter::Slot>* slot) {
  RETURN_IF_ERROR(auth_.Check(*context));
  if (!takes_slot) return Status::Ok();
  bool over_share = false;
  slot->emplace(limiter_.TryAcquire(peer, &over_share));
  if ((*slot)->held()) return Status::Ok();
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
  auto* reactor = new UnaryCall(context, rpc, next_request_id_++, observer_);
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

grpc::Status EncoderService::EmbedStream(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::EmbedResponse, v1::EmbedRequest>* stream) {
  std::optional<ConcurrencyLimiter::Slot> slot;
  const uint64_t peer = PeerKey(*context);
  Status admitted = Admit(context, peer, /*takes_slot=*/true, &slot);
  if (!admitted.ok()) {
    return Answer(observer_, context, Rpc::kEmbedStream, next_request_id_++, Call(), admitted);
  }
  v1::EmbedRequest request;
  (void)TakeRequestParseError();  // only this stream's Reads count below
  while (stream->Read(&request)) {
    v1::EmbedResponse response;
    const uint64_t id = next_request_id_++;
    Call call;
    call.peer = peer;
    auto run = [&]() -> Status {
      ASSIGN_OR_RETURN(ModelWork work,
                       EmbedWork(*registry_, request, SteadyDeadline(context), &response, call));
      return RunOnModel(context, id, work, &call, watcher_, observer_.metrics());
    };
    Status status = run();
    if (!status.ok()) return Answer(observer_, context, Rpc::kEmbedStream, id, call, status);
    FillSummary(call, &response);
    (void)Answer(observer_, context, Rpc::kEmbedStream, id, call, status, false);
    if (!stream->Write(response)) return ToGrpcStatus(Cancelled("write failed"));
  }
  // Read() also ends on a message that does not parse: INVALID_ARGUMENT.
  return TakeRequestParseError();
}

grpc::ServerUnaryReactor* EncoderService::Classify(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request,
                                                   grpc::ByteBuffer* response) {
  return Unary<v1::ClassifyRequest, v1::ClassifyResponse>(
      context, Rpc::kClassify, /*takes_slot=*/true, request, response,
      [&](const v1::ClassifyRequest& r, v1::ClassifyResponse* out,
          Call& call) -> StatusOr<std::optional<ModelWork>> {
        ModelWork work;
        RETURN_IF_ERROR(Prepare(*registry_, r.model(), ToTexts(r.texts()), ToTexts(r.text_pairs()),
                                r.truncate(), SteadyDeadline(context), &call, &work));
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
        Texts texts = ToTexts(r.texts());
        ModelWork work;
        RETURN_IF_ERROR(TokenizeInto(SteadyDeadline(context), &call, &work, [&] {
          return call.model->TokenizeQueryPairs(r.query(), texts, r.truncate());
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
        ModelWork work;
        if (r.token_ids_size() > 0) {
          ASSIGN_OR_RETURN(call.model, registry_->Find(r.model()));
          for (const v1::TokenIds& ids : r.token_ids())
            work.sequences.emplace_back(ids.ids().begin(), ids.ids().end());
          RETURN_IF_ERROR(call.model->CheckTokenIds(work.sequences));
        } else {
          RETURN_IF_ERROR(Prepare(*registry_, r.model(), ToTexts(r.texts()),
                                  ToTexts(r.text_pairs()), r.truncate(), SteadyDeadline(context),
                                  &call, &work));
        }
        work.spec = {OutputKind::kHiddenStates, Pooling::kCls, false};
        const int32_t hidden = static_cast<int32_t>(call.model->encoder_config().hidden_size);
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
        ASSIGN_OR_RETURN(
            std::vector<Encoding> encodings,
            call.model->Tokenize(ToTexts(r.texts()), ToTexts(r.text_pairs()), r.truncate()));
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
          info->set_embedding_size(c.pooled_width());
          info->set_replicas(m->config().replicas);
          info->set_max_client_batch_size(m->config().max_client_batch_size);
          info->set_text_pairs(m->reads_text_pairs());
          info->set_rerank(m->serves_rerank());
          if (c.num_labels > 0) info->set_head_output(HeadOutputName(c.head_output()));
        }
        return std::optional<ModelWork>();
      });
}

}  // namespace encoderd::server
