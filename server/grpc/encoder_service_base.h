// The encoderd.v1.Encoder service interface as registered with gRPC. The
// unary methods use gRPC's callback API on raw bytes: no thread waits for a
// call, and the service parses each request itself, so a request that does
// not parse is INVALID_ARGUMENT (gRPC's callback handlers answer a failed
// parse with an empty UNIMPLEMENTED). EmbedStream is synchronous, its
// requests parsed by SerializationTraits<EmbedRequest>
// (server/grpc/request_serialization.h; the generated Encoder::Service
// registers handlers with BaseRequestType = protobuf::MessageLite, for which
// a per-message specialization is never consulted). Same method names and
// semantics as the generated class; only the handler types differ.
#pragma once

#include <grpcpp/impl/service_type.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>
#include <grpcpp/support/sync_stream.h>

#include "server/grpc/encoderd_grpc.h"

namespace encoderd::server {

class EncoderServiceBase : public grpc::Service {
 public:
  // Registers the seven methods of encoderd.v1.Encoder (the unary ones, then
  // EmbedStream; gRPC routes by name).
  EncoderServiceBase();

  // The unary methods: `request` holds the request message's bytes; the
  // reactor writes the response message's bytes to `response` before it
  // finishes the call.
  virtual grpc::ServerUnaryReactor* Embed(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) = 0;
  virtual grpc::ServerUnaryReactor* Classify(grpc::CallbackServerContext* context,
                                             const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) = 0;
  virtual grpc::ServerUnaryReactor* Encode(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) = 0;
  virtual grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                             const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) = 0;
  virtual grpc::ServerUnaryReactor* ModelInfo(grpc::CallbackServerContext* context,
                                              const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) = 0;
  virtual grpc::ServerUnaryReactor* Rerank(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) = 0;
  virtual grpc::Status EmbedStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::EmbedResponse, v1::EmbedRequest>* stream) = 0;
};

}  // namespace encoderd::server
