// Bearer-token authentication of the inference RPCs: a call must carry the
// metadata `authorization: Bearer <token>` with the configured token
// (listen.auth.bearer_token_file). Health checks and reflection are separate
// services and never pass through it.
#pragma once

#include <grpcpp/server_context.h>

#include <string>
#include <string_view>
#include <utility>

#include "core/status.h"

namespace encoderd::server {

class BearerAuth {
 public:
  // `token` empty: authentication off, every call is allowed. Never logged.
  explicit BearerAuth(std::string token = "") : token_(std::move(token)) {}

  bool enabled() const { return !token_.empty(); }

  // OK when authentication is off or the call carries the token; otherwise
  // UNAUTHENTICATED "missing bearer token" (no `authorization` metadata, or
  // not of the Bearer scheme) or "invalid bearer token". Any thread.
  Status Check(const grpc::ServerContextBase& context) const;

  // The same for the value of the `authorization` header (null: absent).
  Status CheckHeader(const std::string_view* authorization) const;

 private:
  std::string token_;
};

}  // namespace encoderd::server
