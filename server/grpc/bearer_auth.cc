#include "server/grpc/bearer_auth.h"

#include <cctype>

namespace encoderd::server {
namespace {

// Equality whose running time depends only on the length of `presented`
// (known to the caller), never on where it first differs from `expected` nor
// on the length of `expected`. `expected` must not be empty.
bool ConstantTimeEquals(std::string_view presented, std::string_view expected) {
  unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i)
    diff |= static_cast<unsigned char>(presented[i] ^ expected[i % expected.size()]);
  return diff == 0;
}

// The credentials after the case-insensitive scheme "Bearer" and its space;
// false when `value` is of another scheme.
bool BearerCredentials(std::string_view value, std::string_view* credentials) {
  constexpr std::string_view kScheme = "bearer";
  if (value.size() <= kScheme.size() || value[kScheme.size()] != ' ') return false;
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(value[i])) != kScheme[i]) return false;
  *credentials = value.substr(kScheme.size() + 1);
  while (!credentials->empty() && credentials->front() == ' ') credentials->remove_prefix(1);
  return !credentials->empty();
}

}  // namespace

Status BearerAuth::CheckHeader(const std::string_view* authorization) const {
  if (!enabled()) return Status::Ok();
  std::string_view presented;
  if (authorization == nullptr || !BearerCredentials(*authorization, &presented))
    return Unauthenticated("missing bearer token");
  if (!ConstantTimeEquals(presented, token_)) return Unauthenticated("invalid bearer token");
  return Status::Ok();
}

Status BearerAuth::Check(const grpc::ServerContextBase& context) const {
  if (!enabled()) return Status::Ok();
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) return CheckHeader(nullptr);
  const std::string_view value(it->second.data(), it->second.size());
  return CheckHeader(&value);
}

}  // namespace encoderd::server
