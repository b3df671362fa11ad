// How gRPC parses encoderd's request messages. gRPC's generic protobuf
// traits answer a request that does not parse (a proto3 `string` field holding
// invalid UTF-8, a truncated or garbage body) with INTERNAL before any handler
// runs. These explicit specializations answer INVALID_ARGUMENT instead, naming
// the message type; serialization is unchanged.
//
// An explicit specialization must be seen before the first use of
// SerializationTraits<XRequest> in every translation unit, or the program
// holds two different definitions (ODR) and the linker keeps either. So the
// daemon includes the generated service only through encoderd_grpc.h, which
// includes this header first, and compiles the generated .grpc.pb.cc itself
// (encoderd_grpc.cc). Do not include this header by hand.
#pragma once

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/status.h>

#include "proto/encoderd.pb.h"

namespace encoderd::server {

// The status of the last request on this thread that did not parse, and
// clears it. The sync server reads a stream's messages on the handler's
// thread, where ServerReaderWriter::Read() only returns false: a stream
// handler takes the reason from here (clear it once before the first Read).
inline grpc::Status& RequestParseErrorSlot() {
  static thread_local grpc::Status error;
  return error;
}
inline grpc::Status TakeRequestParseError() {
  grpc::Status error = RequestParseErrorSlot();
  RequestParseErrorSlot() = grpc::Status();
  return error;
}

// Parses `buffer` into `message` as grpc::GenericDeserialize does, but a body
// that does not parse is INVALID_ARGUMENT: "request is not a valid
// encoderd.v1.X: ...". A missing payload stays INTERNAL, as in gRPC. Clears
// `buffer`.
inline grpc::Status DeserializeRequest(grpc::ByteBuffer* buffer,
                                       google::protobuf::MessageLite* message) {
  if (buffer == nullptr) return grpc::Status(grpc::StatusCode::INTERNAL, "No payload");
  grpc::Status result;
  {
    grpc::ProtoBufferReader reader(buffer);
    if (!reader.status().ok()) return reader.status();
    if (!message->ParseFromZeroCopyStream(&reader)) {
      result = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "request is not a valid " + message->GetTypeName() +
                                ": a string field holds invalid UTF-8 or the message is "
                                "malformed");
      RequestParseErrorSlot() = result;
    }
  }
  buffer->Clear();
  return result;
}

// Routes libprotobuf's log lines (among them one per string field with invalid
// UTF-8 in a parsed request) to spdlog at debug level, so a hostile client
// cannot fill the log. Idempotent; call once at start-up (the EncoderService
// constructor does). Defined in request_serialization.cc.
void RouteProtobufLogsToSpdlog();

}  // namespace encoderd::server

namespace grpc {

#define ENCODERD_REQUEST_SERIALIZATION_TRAITS(Message)                                            \
  template <>                                                                                     \
  class SerializationTraits<Message, void> {                                                      \
   public:                                                                                        \
    static grpc::Status Serialize(const grpc::protobuf::MessageLite& msg, grpc::ByteBuffer* bb,   \
                                  bool* own_buffer) {                                             \
      return grpc::GenericSerialize<grpc::ProtoBufferWriter, Message>(msg, bb, own_buffer);       \
    }                                                                                             \
    static grpc::Status Deserialize(grpc::ByteBuffer* buffer, grpc::protobuf::MessageLite* msg) { \
      return encoderd::server::DeserializeRequest(buffer, msg);                                   \
    }                                                                                             \
  };

ENCODERD_REQUEST_SERIALIZATION_TRAITS(encoderd::v1::EmbedRequest)
ENCODERD_REQUEST_SERIALIZATION_TRAITS(encoderd::v1::ClassifyRequest)
ENCODERD_REQUEST_SERIALIZATION_TRAITS(encoderd::v1::EncodeRequest)
ENCODERD_REQUEST_SERIALIZATION_TRAITS(encoderd::v1::TokenizeRequest)
ENCODERD_REQUEST_SERIALIZATION_TRAITS(encoderd::v1::ModelInfoRequest)
ENCODERD_REQUEST_SERIALIZATION_TRAITS(encoderd::v1::RerankRequest)

#undef ENCODERD_REQUEST_SERIALIZATION_TRAITS

}  // namespace grpc
