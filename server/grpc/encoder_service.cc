#include "server/grpc/encoder_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "core/dtype.h"
#include "server/core/request_validation.h"
#include "server/grpc/grpc_status.h"

namespace encoderd::server {
namespace {

int64_t MicrosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
}

// The call's deadline on the steady clock (max when the client set none).
Clock::time_point SteadyDeadline(const grpc::ServerContext* context) {
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
};

// Records the answer (metrics, logs) and attaches the request id; returns
// `status` as a grpc::Status.
grpc::Status Answer(RequestObserver& observer, grpc::ServerContext* context, Rpc rpc, uint64_t id,
                    const Call& call, const Status& status, bool add_metadata = true) {
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

// Submits `sequences` and waits for the result, cancelling the request when
// the client goes away (`watcher` watches the client).
Status RunOnModel(grpc::ServerContext* context, uint64_t id,
                  std::vector<std::vector<int32_t>> sequences, OutputSpec spec, Call* call,
                  CancellationWatcher& watcher, ServingMetrics* metrics) {
  for (const auto& s : sequences) call->token_count += static_cast<int64_t>(s.size());
  auto request = std::make_shared<InferenceRequest>(id, std::move(sequences), spec, Clock::now(),
                                                    SteadyDeadline(context));
  call->request = request;
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
                      if (Clock::now() >= request->deadline())
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
    if (!ready) {
      batcher.Abandon(request,
                      DeadlineExceeded("the deadline passed before the request was computed"));
    }
  }
  if (metrics) metrics->AddInFlight(model, -1);
  return done.get();
}

// Looks up the model and tokenizes `texts` into `sequences`, unless the
// model's batcher would refuse a call due at `deadline` anyway.
Status Prepare(const ModelRegistry& registry, const std::string& model_name,
               const google::protobuf::RepeatedPtrField<std::string>& texts, bool truncate,
               Clock::time_point deadline, Call* call,
               std::vector<std::vector<int32_t>>* sequences) {
  ASSIGN_OR_RETURN(call->model, registry.Find(model_name));
  RETURN_IF_ERROR(call->model->batcher().Precheck(deadline));
  const Clock::time_point t = Clock::now();
  ASSIGN_OR_RETURN(std::vector<Encoding> encodings,
                   call->model->Tokenize({texts.begin(), texts.end()}, truncate));
  call->tokenize_us = MicrosSince(t);
  for (Encoding& e : encodings) sequences->push_back(std::move(e.ids));
  return Status::Ok();
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

Status EmbedOne(const ModelRegistry& registry, uint64_t id, grpc::ServerContext* context,
                const v1::EmbedRequest& request, v1::EmbedResponse* response, Call& call,
                CancellationWatcher& watcher, ServingMetrics* metrics) {
  RETURN_IF_ERROR(CheckPooling(request.pooling()));
  std::vector<std::vector<int32_t>> sequences;
  RETURN_IF_ERROR(Prepare(registry, request.model(), request.texts(), request.truncate(),
                          SteadyDeadline(context), &call, &sequences));
  OutputSpec spec{OutputKind::kEmbedding, call.model->encoder_config().default_pooling,
                  request.normalize()};
  if (request.pooling() == v1::POOLING_CLS) spec.pooling = Pooling::kCls;
  if (request.pooling() == v1::POOLING_MEAN) spec.pooling = Pooling::kMean;
  RETURN_IF_ERROR(RunOnModel(context, id, std::move(sequences), spec, &call, watcher, metrics));
  for (const auto& values : call.request->results())
    response->add_embeddings()->mutable_values()->Assign(values.begin(), values.end());
  return Status::Ok();
}

// ModelInfo's response carries no summary.
void FillSummary(const Call&, v1::ModelInfoResponse*) {}

}  // namespace

Status EncoderService::Admit(grpc::ServerContext* context, bool takes_slot,
                             std::optional<ConcurrencyLimiter::Slot>* slot) {
  RETURN_IF_ERROR(auth_.Check(*context));
  if (!takes_slot) return Status::Ok();
  slot->emplace(limiter_.TryAcquire());
  if ((*slot)->held()) return Status::Ok();
  return ResourceExhausted("server is at max_concurrent_requests (" +
                           std::to_string(limiter_.limit()) + " calls in progress)");
}

template <typename Response, typename Body>
grpc::Status EncoderService::Handle(grpc::ServerContext* context, Rpc rpc, bool takes_slot,
                                    Response* response, Body&& body) {
  std::optional<ConcurrencyLimiter::Slot> slot;
  Status status = Admit(context, takes_slot, &slot);
  const uint64_t id = next_request_id_++;
  Call call;
  if (status.ok()) status = body(id, call);
  if (status.ok()) FillSummary(call, response);
  return Answer(observer_, context, rpc, id, call, status);
}

grpc::Status EncoderService::Embed(grpc::ServerContext* context, const v1::EmbedRequest* request,
                                   v1::EmbedResponse* response) {
  return Handle(context, Rpc::kEmbed, /*takes_slot=*/true, response, [&](uint64_t id, Call& call) {
    return EmbedOne(*registry_, id, context, *request, response, call, watcher_,
                    observer_.metrics());
  });
}

grpc::Status EncoderService::EmbedStream(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::EmbedResponse, v1::EmbedRequest>* stream) {
  std::optional<ConcurrencyLimiter::Slot> slot;
  Status admitted = Admit(context, /*takes_slot=*/true, &slot);
  if (!admitted.ok()) {
    return Answer(observer_, context, Rpc::kEmbedStream, next_request_id_++, Call(), admitted);
  }
  v1::EmbedRequest request;
  (void)TakeRequestParseError();  // only this stream's Reads count below
  while (stream->Read(&request)) {
    v1::EmbedResponse response;
    const uint64_t id = next_request_id_++;
    Call call;
    Status status =
        EmbedOne(*registry_, id, context, request, &response, call, watcher_, observer_.metrics());
    if (!status.ok()) return Answer(observer_, context, Rpc::kEmbedStream, id, call, status);
    FillSummary(call, &response);
    (void)Answer(observer_, context, Rpc::kEmbedStream, id, call, status, false);
    if (!stream->Write(response)) return ToGrpcStatus(Cancelled("write failed"));
  }
  // Read() also ends on a message that does not parse: INVALID_ARGUMENT.
  return TakeRequestParseError();
}

grpc::Status EncoderService::Classify(grpc::ServerContext* context,
                                      const v1::ClassifyRequest* request,
                                      v1::ClassifyResponse* response) {
  return Handle(
      context, Rpc::kClassify, /*takes_slot=*/true, response,
      [&](uint64_t id, Call& call) -> Status {
        std::vector<std::vector<int32_t>> sequences;
        RETURN_IF_ERROR(Prepare(*registry_, request->model(), request->texts(), request->truncate(),
                                SteadyDeadline(context), &call, &sequences));
        const EncoderConfig& config = call.model->encoder_config();
        if (config.num_labels <= 0)
          return FailedPrecondition("model '" + call.model->config().name +
                                    "' has no classification head");
        RETURN_IF_ERROR(RunOnModel(context, id, std::move(sequences),
                                   {OutputKind::kClassification, Pooling::kCls, false}, &call,
                                   watcher_, observer_.metrics()));
        for (const auto& scores : call.request->results()) {
          v1::Classification* result = response->add_results();
          result->mutable_scores()->Assign(scores.begin(), scores.end());
          size_t best = 0;
          for (size_t i = 1; i < scores.size(); ++i)
            if (scores[i] > scores[best]) best = i;
          if (best < config.labels.size()) result->set_label(config.labels[best]);
        }
        return Status::Ok();
      });
}

grpc::Status EncoderService::Encode(grpc::ServerContext* context, const v1::EncodeRequest* request,
                                    v1::EncodeResponse* response) {
  return Handle(
      context, Rpc::kEncode, /*takes_slot=*/true, response, [&](uint64_t id, Call& call) -> Status {
        RETURN_IF_ERROR(CheckEncodeInputs(request->texts_size(), request->token_ids_size()));
        std::vector<std::vector<int32_t>> sequences;
        if (request->token_ids_size() > 0) {
          ASSIGN_OR_RETURN(call.model, registry_->Find(request->model()));
          for (const v1::TokenIds& ids : request->token_ids())
            sequences.emplace_back(ids.ids().begin(), ids.ids().end());
          RETURN_IF_ERROR(call.model->CheckTokenIds(sequences));
        } else {
          RETURN_IF_ERROR(Prepare(*registry_, request->model(), request->texts(),
                                  request->truncate(), SteadyDeadline(context), &call, &sequences));
        }
        std::vector<int32_t> lengths;
        for (const auto& s : sequences) lengths.push_back(static_cast<int32_t>(s.size()));
        RETURN_IF_ERROR(RunOnModel(context, id, std::move(sequences),
                                   {OutputKind::kHiddenStates, Pooling::kCls, false}, &call,
                                   watcher_, observer_.metrics()));
        const int32_t hidden = static_cast<int32_t>(call.model->encoder_config().hidden_size);
        for (size_t i = 0; i < lengths.size(); ++i) {
          const auto& values = call.request->results()[i];
          v1::TokenStates* states = response->add_sequences();
          states->mutable_values()->Assign(values.begin(), values.end());
          states->set_num_tokens(lengths[i]);
          states->set_hidden_size(hidden);
        }
        return Status::Ok();
      });
}

grpc::Status EncoderService::Tokenize(grpc::ServerContext* context,
                                      const v1::TokenizeRequest* request,
                                      v1::TokenizeResponse* response) {
  return Handle(
      context, Rpc::kTokenize, /*takes_slot=*/true, response, [&](uint64_t, Call& call) -> Status {
        ASSIGN_OR_RETURN(call.model, registry_->Find(request->model()));
        ASSIGN_OR_RETURN(std::vector<Encoding> encodings,
                         call.model->Tokenize({request->texts().begin(), request->texts().end()},
                                              request->truncate()));
        for (const Encoding& e : encodings) {
          v1::Tokenization* t = response->add_tokenizations();
          t->mutable_ids()->Assign(e.ids.begin(), e.ids.end());
          for (const std::string& piece : e.pieces) t->add_pieces(piece);
          t->set_untruncated_length(e.untruncated_length);
          call.token_count += static_cast<int64_t>(e.ids.size());
        }
        call.tokenize_us = MicrosSince(call.start);
        return Status::Ok();
      });
}

grpc::Status EncoderService::ModelInfo(grpc::ServerContext* context,
                                       const v1::ModelInfoRequest* request,
                                       v1::ModelInfoResponse* response) {
  // Takes no concurrency slot: answering it costs no model time.
  return Handle(context, Rpc::kModelInfo, /*takes_slot=*/false, response,
                [&](uint64_t, Call& call) -> Status {
                  std::vector<std::shared_ptr<ServedModel>> models;
                  if (!request->model().empty()) {
                    ASSIGN_OR_RETURN(call.model, registry_->Find(request->model()));
                    models.push_back(call.model);
                  } else {
                    if (registry_->draining()) return Unavailable("the server is shutting down");
                    models = registry_->Loaded();
                  }
                  for (const auto& m : models) {
                    const EncoderConfig& c = m->encoder_config();
                    v1::Model* info = response->add_models();
                    info->set_name(m->config().name);
                    info->set_family(ModelFamilyName(c.family));
                    info->set_hidden_size(c.hidden_size);
                    info->set_max_tokens(m->max_tokens());
                    for (const std::string& label : c.labels) info->add_labels(label);
                    info->set_dtype(std::string(DTypeName(m->config().dtype)));
                    info->set_device(DeviceName(m->config().device));
                    info->set_default_pooling(PoolingName(c.default_pooling));
                    info->set_replicas(m->config().replicas);
                    info->set_max_client_batch_size(m->config().max_client_batch_size);
                  }
                  return Status::Ok();
                });
}

}  // namespace encoderd::server
