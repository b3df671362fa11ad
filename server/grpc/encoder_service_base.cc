#include "server/grpc/encoder_service_base.h"

#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/support/method_handler.h>

namespace encoderd::server {
namespace {

using Base = EncoderServiceBase;

// A unary method whose handler parses with SerializationTraits<Request>
// (BaseRequestType defaults to Request).
template <typename Request, typename Response>
grpc::internal::RpcServiceMethod* Unary(const char* name, Base* service,
                                        grpc::Status (Base::*method)(grpc::ServerContext*,
                                                                     const Request*, Response*)) {
  return new grpc::internal::RpcServiceMethod(
      name, grpc::internal::RpcMethod::NORMAL_RPC,
      new grpc::internal::RpcMethodHandler<Base, Request, Response>(
          [method](Base* s, grpc::ServerContext* context, const Request* request,
                   Response* response) { return (s->*method)(context, request, response); },
          service));
}

}  // namespace

EncoderServiceBase::EncoderServiceBase() {
  AddMethod(Unary("/encoderd.v1.Encoder/Embed", this, &Base::Embed));
  AddMethod(Unary("/encoderd.v1.Encoder/Classify", this, &Base::Classify));
  AddMethod(Unary("/encoderd.v1.Encoder/Encode", this, &Base::Encode));
  AddMethod(Unary("/encoderd.v1.Encoder/Tokenize", this, &Base::Tokenize));
  AddMethod(Unary("/encoderd.v1.Encoder/ModelInfo", this, &Base::ModelInfo));
  AddMethod(new grpc::internal::RpcServiceMethod(
      "/encoderd.v1.Encoder/EmbedStream", grpc::internal::RpcMethod::BIDI_STREAMING,
      new grpc::internal::BidiStreamingHandler<Base, v1::EmbedRequest, v1::EmbedResponse>(
          [](Base* s, grpc::ServerContext* context,
             grpc::ServerReaderWriter<v1::EmbedResponse, v1::EmbedRequest>* stream) {
            return s->EmbedStream(context, stream);
          },
          this)));
}

}  // namespace encoderd::server
