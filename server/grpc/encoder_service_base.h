// The encoderd.v1.Encoder service interface as registered with gRPC. Every
// method uses gRPC's callback API on raw bytes: no thread waits for a call,
// and the service parses each request message itself, so one that does not
// parse is INVALID_ARGUMENT (gRPC's typed callback handlers answer a failed
// parse with an empty UNIMPLEMENTED, its synchronous ones with INTERNAL). Same
// method names and semantics as the generated Encoder::Service, which the
// daemon does not use; only the handler types differ.
#pragma once

#include <grpcpp/impl/service_type.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

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
  // EmbedStream: the reactor reads request messages' bytes and writes
  // response messages' bytes.
  virtual grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* EmbedStream(
      grpc::CallbackServerContext* context) = 0;
};

}  // namespace encoderd::server
