// The generated service code, compiled here with the daemon's request traits
// in scope (encoderd_grpc.h) rather than in the proto library.
#include "server/grpc/encoderd_grpc.h"
// clang-format off
#include "proto/encoderd.grpc.pb.cc"  // NOLINT(bugprone-suspicious-include)
// clang-format on
