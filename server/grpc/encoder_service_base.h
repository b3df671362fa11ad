// The encoderd.v1.Encoder service interface, registered with gRPC so that each
// request is parsed by SerializationTraits<its own message type>. The
// generated Encoder::Service (grpc 1.51) registers its unary handlers with
// BaseRequestType = protobuf::MessageLite, so a per-message specialization
// (server/grpc/request_serialization.h) would never be consulted and a request that
// does not parse would stay INTERNAL. Same method names, types and semantics
// as the generated class; only the handler types differ.
#pragma once

#include <grpcpp/impl/service_type.h>
#include <grpcpp/support/sync_stream.h>

#include "server/grpc/encoderd_grpc.h"

namespace encoderd::server {

class EncoderServiceBase : public grpc::Service {
 public:
  // Registers the six methods of encoderd.v1.Encoder (in .proto order).
  EncoderServiceBase();

  virtual grpc::Status Embed(grpc::ServerContext* context, const v1::EmbedRequest* request,
                             v1::EmbedResponse* response) = 0;
  virtual grpc::Status Classify(grpc::ServerContext* context, const v1::ClassifyRequest* request,
                                v1::ClassifyResponse* response) = 0;
  virtual grpc::Status Encode(grpc::ServerContext* context, const v1::EncodeRequest* request,
                              v1::EncodeResponse* response) = 0;
  virtual grpc::Status Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                                v1::TokenizeResponse* response) = 0;
  virtual grpc::Status ModelInfo(grpc::ServerContext* context, const v1::ModelInfoRequest* request,
                                 v1::ModelInfoResponse* response) = 0;
  virtual grpc::Status EmbedStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::EmbedResponse, v1::EmbedRequest>* stream) = 0;
};

}  // namespace encoderd::server
