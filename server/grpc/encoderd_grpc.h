// The daemon's view of the generated gRPC service: the request traits of
// request_serialization.h come before proto/encoderd.grpc.pb.h, so that every
// use of SerializationTraits<XRequest> in the daemon sees them (an explicit
// specialization must precede the first use in each translation unit).
// Daemon code includes this header, never proto/encoderd.grpc.pb.h
// (scripts/check_layers.py enforces it).
#pragma once

// clang-format off
#include "proto/encoderd.pb.h"
#include "server/grpc/request_serialization.h"
#include "proto/encoderd.grpc.pb.h"
// clang-format on
