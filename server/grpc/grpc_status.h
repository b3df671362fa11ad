// The one place an engine Status becomes a grpc::Status.
#pragma once

#include <grpcpp/support/status.h>

#include "core/status.h"

namespace encoderd::server {

// Bad input -> INVALID_ARGUMENT, overload -> RESOURCE_EXHAUSTED, not ready or
// draining -> UNAVAILABLE, expired -> DEADLINE_EXCEEDED; every other code to
// its gRPC namesake. The message is kept.
grpc::Status ToGrpcStatus(const Status& status);

}  // namespace encoderd::server
