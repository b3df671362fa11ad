// encoderd.v1.Encoder over the synchronous gRPC API. Handlers validate and
// tokenize on the gRPC thread, submit to the model's DynamicBatcher and wait
// for the result (cancelling the request if the client goes away).
#pragma once

#include <atomic>
#include <memory>

#include "proto/encoderd.grpc.pb.h"
#include "server/model_registry.h"

namespace encoderd::server {

class EncoderService final : public encoderd::v1::Encoder::Service {
 public:
  // `registry` must outlive the service.
  explicit EncoderService(const ModelRegistry* registry) : registry_(registry) {}

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
  const ModelRegistry* registry_;
  std::atomic<uint64_t> next_request_id_{1};
};

}  // namespace encoderd::server
