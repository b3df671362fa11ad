#include "core/listen_socket.h"

#include <arpa/inet.h>
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

}  // namespace

std::string HostPort(const std::string& address, int port) {
  const std::string host = Unbracketed(address);
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

StatusOr<int> ListenTcp(const std::string& address, int port, int backlog, int* bound_port) {
  const std::string host = Unbracketed(address);
  sockaddr_storage storage{};
  socklen_t size = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    size = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    size = sizeof(sockaddr_in6);
  } else {
    return InvalidArgument("listen.address '" + address + "' is not an IPv4 or IPv6 address");
  }
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
  *bound_port = ntohs(storage.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
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
    key->assign(reinterpret_cast<const char*>(a.sin6_addr.s6_addr), 16);
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
