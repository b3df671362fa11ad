// The secrets the access settings (listen.tls.*, listen.auth.*) point at,
// read once at start-up so that a missing or empty file stops the daemon
// before it listens instead of failing the first call.
#pragma once

#include <string>

#include "core/status.h"
#include "server/config/config.h"

namespace encoderd::server {

struct AccessSecrets {
  // PEM certificate chain and private key; empty: TLS off.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  // PEM CA bundle client certificates are verified against; empty: none asked for.
  std::string tls_client_ca_pem;
  // The bearer token, surrounding whitespace removed; empty: none needed.
  // Never logged.
  std::string bearer_token;
};

// Reads every file `listen` names. An unreadable, empty or malformed file
// (a certificate without a PEM certificate block, a key without a PEM private
// key block, a token with characters a gRPC header cannot carry) is
// InvalidArgument naming the key and the file; the message never contains
// the file's contents.
StatusOr<AccessSecrets> ReadAccessSecrets(const ListenConfig& listen);

}  // namespace encoderd::server
