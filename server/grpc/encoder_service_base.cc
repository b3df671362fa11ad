#include "server/grpc/encoder_service_base.h"

#include <grpcpp/impl/codegen/server_callback_handlers.h>
#include <grpcpp/impl/rpc_service_method.h>

#include <utility>

namespace encoderd::server {
namespace {

using Base = EncoderServiceBase;
using RawUnaryMethod = grpc::ServerUnaryReactor* (Base::*)(grpc::CallbackServerContext*,
                                                           const grpc::ByteBuffer*,
                                                           grpc::ByteBuffer*);

// A unary method over gRPC's callback API on raw bytes.
grpc::internal::MethodHandler* RawCallback(Base* service, RawUnaryMethod method) {
  return new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
      [service, method](grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                        grpc::ByteBuffer* response) {
        return (service->*method)(context, request, response);
      });
}

}  // namespace

EncoderServiceBase::EncoderServiceBase() {
  const std::pair<const char*, RawUnaryMethod> unary[] = {
      {"/encoderd.v1.Encoder/Embed", &Base::Embed},
      {"/encoderd.v1.Encoder/Classify", &Base::Classify},
      {"/encoderd.v1.Encoder/Encode", &Base::Encode},
      {"/encoderd.v1.Encoder/Tokenize", &Base::Tokenize},
      {"/encoderd.v1.Encoder/ModelInfo", &Base::ModelInfo},
      {"/encoderd.v1.Encoder/Rerank", &Base::Rerank},
  };
  int index = 0;
  for (const auto& [name, method] : unary) {
    AddMethod(
        new grpc::internal::RpcServiceMethod(name, grpc::internal::RpcMethod::NORMAL_RPC, nullptr));
    MarkMethodRawCallback(index++, RawCallback(this, method));
  }
  AddMethod(new grpc::internal::RpcServiceMethod(
      "/encoderd.v1.Encoder/EmbedStream", grpc::internal::RpcMethod::BIDI_STREAMING, nullptr));
  MarkMethodRawCallback(
      index, new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
                 [this](grpc::CallbackServerContext* context) { return EmbedStream(context); }));
}

}  // namespace encoderd::server
