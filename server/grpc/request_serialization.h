// How the service parses encoderd's request messages from their bytes: a
// request that does not parse (a proto3 `string` field holding invalid
// UTF-8, a truncated or garbage body) is INVALID_ARGUMENT, naming the message
// type (gRPC's own protobuf handling would answer INTERNAL).
#pragma once

#include <google/protobuf/message_lite.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/status.h>

namespace encoderd::server {

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
