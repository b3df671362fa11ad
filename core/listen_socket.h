// Listening TCP sockets for the daemon's own servers (the connection guard,
// the metrics endpoint) on listen.address, IPv4 or IPv6.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

#include "core/status.h"

namespace encoderd {

// A non-blocking, close-on-exec listening socket (SO_REUSEADDR) on `address`:
// an IPv4 address ("0.0.0.0", "127.0.0.1") or an IPv6 one, bracketed or not,
// with a zone or not ("::", "[::1]", "fe80::1%eth0"; "::" takes IPv4 clients
// too, as IPv4-mapped addresses), never a name; and `port` (0: a free one);
// *bound_port is the port bound.
// INVALID_ARGUMENT for an address that is neither; UNAVAILABLE when the
// socket cannot listen (why, in words).
StatusOr<int> ListenTcp(const std::string& address, int port, int backlog, int* bound_port);

// "address:port", an IPv6 literal in brackets ("[::1]:50051"): gRPC's and
// URLs' form. Anything else (a host name, a gRPC target) is left as it is.
std::string HostPort(const std::string& address, int port);

// A connected peer's address: `key` what per-address defences count it by
// (the 4 bytes of an IPv4 address, an IPv4-mapped IPv6 one included; the
// first 8 bytes, its /64, of an IPv6 one), `text` how logs name it
// ("10.1.2.3:45678", "[fd00::2]:45678").
void PeerAddress(const sockaddr_storage& peer, std::string* key, std::string* text);

}  // namespace encoderd
