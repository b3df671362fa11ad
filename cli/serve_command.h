// `encoderd serve [flags]`: the gRPC daemon. Loads the configuration
// (config_loader.h), starts the server with health (NOT_SERVING until each
// model is loaded and warmed up) and optional reflection, and on SIGTERM or
// SIGINT drains: health NOT_SERVING, new calls UNAVAILABLE, in-flight calls
// finish within shutdown.grace_s, exit 0.
#pragma once

#include <string>
#include <vector>

namespace encoderd::server {

// `args` are the words after "serve". Returns the process exit code (0 after
// a graceful shutdown, 1 on a start-up error, 2 on bad usage).
int RunServeCommand(const std::vector<std::string>& args);

// `encoderd health [--address HOST] [--port PORT] [--service NAME]
// [--timeout S]`: asks a running daemon's grpc.health.v1.Health/Check (the
// container image's HEALTHCHECK). Exit 0 when SERVICE ("" = the server, or a
// model name) is SERVING, 1 otherwise (NOT_SERVING, unreachable, timeout), 2
// on bad usage. The port defaults to $ENCODERD_HEALTH_PORT (the plaintext
// health port, when set and not 0), else $ENCODERD_PORT, else 50051.
int RunHealthCommand(const std::vector<std::string>& args);

}  // namespace encoderd::server
