#include "core/listen_socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace encoderd {
namespace {

// `address` without the brackets of "[::1]".
std::string Unbracketed(const std::string& address) {
  if (address.size() >= 2 && address.front() == '[' && address.back() == ']')
    return address.substr(1, address.size() - 2);
  return address;
}

// Whether `host` is an IPv6 literal, with or without a zone ("fe80::1%eth0").
bool IsIpv6Literal(const std::string& host) {
  in6_addr unused{};
  return inet_pton(AF_INET6, host.substr(0, host.find('%')).c_str(), &unused) == 1;
}

}  // namespace

std::string HostPort(const std::string& address, int port) {
  const std::string host = Unbracketed(address);
  return (IsIpv6Literal(host) ? "[" + host + "]" : address) + ":" + std::to_string(port);
}

StatusOr<int> ListenTcp(const std::string& address, int port, int backlog, int* bound_port) {
  const std::string host = Unbracketed(address);
  // A numeric host only (no name lookup); an IPv6 zone ("%eth0") is taken.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* found = nullptr;
  in_addr v4{};
  // inet_pton's forms only: getaddrinfo would also take "1.2.3" (1.2.0.3).
  const bool literal = inet_pton(AF_INET, host.c_str(), &v4) == 1 || IsIpv6Literal(host);
  if (!literal || getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    if (found != nullptr) freeaddrinfo(found);
    return InvalidArgument("listen.address '" + address + "' is not an IPv4 or IPv6 address");
  }
  sockaddr_storage storage{};
  socklen_t size = static_cast<socklen_t>(found->ai_addrlen);
  std::memcpy(&storage, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  const int fd = socket(storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return Unavailable("cannot listen on " + HostPort(address, port) + ": " + std::strerror(errno));
  const int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  // "::" also takes IPv4 clients, whatever net.ipv6.bindv6only says.
  if (storage.ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  if (bind(fd, reinterpret_cast<sockaddr*>(&storage), size) != 0 || listen(fd, backlog) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &size) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return Unavailable("cannot listen on " + HostPort(address, port) + ": " + why);
  }
  *bound_port =
      ntohs(storage.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(storage).sin6_port
                                          : reinterpret_cast<const sockaddr_in&>(storage).sin_port);
  return fd;
}

void PeerAddress(const sockaddr_storage& peer, std::string* key, std::string* text) {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (peer.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(peer);
    const int port = ntohs(a.sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&a.sin6_addr)) {  // an IPv4 client of a "::" socket
      in_addr v4{};
      std::memcpy(&v4, a.sin6_addr.s6_addr + 12, 4);
      key->assign(reinterpret_cast<const char*>(&v4), 4);
      inet_ntop(AF_INET, &v4, ip, sizeof(ip));
      *text = std::string(ip) + ":" + std::to_string(port);
      return;
    }
    // The /64: an IPv6 host is given a whole /64 and may send from any
    // address in it, so per-address defences count the /64.
    key->assign(reinterpret_cast<const char*>(a.sin6_addr.s6_addr), 8);
    inet_ntop(AF_INET6, &a.sin6_addr, ip, sizeof(ip));
    *text = "[" + std::string(ip) + "]:" + std::to_string(port);
    return;
  }
  const auto& a = reinterpret_cast<const sockaddr_in&>(peer);
  key->assign(reinterpret_cast<const char*>(&a.sin_addr), 4);
  inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
  *text = std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

}  // namespace encoderd
