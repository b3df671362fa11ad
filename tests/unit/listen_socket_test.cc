// core/listen_socket.h: the daemon's listening sockets on IPv4 and IPv6.
#include "core/listen_socket.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace encoderd {
namespace {

TEST(ListenSocketTest, HostPortBracketsIpv6) {
  EXPECT_EQ(HostPort("0.0.0.0", 50051), "0.0.0.0:50051");
  EXPECT_EQ(HostPort("localhost", 1), "localhost:1");
  EXPECT_EQ(HostPort("::", 50051), "[::]:50051");
  EXPECT_EQ(HostPort("[::1]", 9), "[::1]:9");
  EXPECT_EQ(HostPort("fe80::1%eth0", 9), "[fe80::1%eth0]:9");
  // Not an IPv6 literal: left as it is (a gRPC target for `encoderd health`).
  EXPECT_EQ(HostPort("dns:///encoderd", 50051), "dns:///encoderd:50051");
}

TEST(ListenSocketTest, RefusesWhatIsNotAnAddress) {
  int port = 0;
  for (const char* bad : {"localhost", "1.2.3", "[::1", "::g", "", "[]"}) {
    auto fd = ListenTcp(bad, 0, 8, &port);
    ASSERT_FALSE(fd.ok()) << bad;
    EXPECT_EQ(fd.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(fd.status().message().find("not an IPv4 or IPv6 address"), std::string::npos);
  }
}

TEST(ListenSocketTest, ListensOnIpv4AndIpv6) {
  int port = 0;
  auto v4 = ListenTcp("127.0.0.1", 0, 8, &port);
  ASSERT_TRUE(v4.ok()) << v4.status().message();
  EXPECT_GT(port, 0);
  // The same port again: taken.
  int again = 0;
  auto taken = ListenTcp("127.0.0.1", port, 8, &again);
  EXPECT_FALSE(taken.ok());
  EXPECT_NE(taken.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos);
  close(v4.value());
  auto v6 = ListenTcp("[::1]", 0, 8, &port);
  if (!v6.ok()) GTEST_SKIP() << "no IPv6 loopback: " << v6.status().message();
  EXPECT_GT(port, 0);
  close(v6.value());
}

struct Peer {
  std::string key, text;
};

// PeerAddress of `ip` (IPv4 or IPv6 text) and `port`, as accept4 gives them.
Peer PeerOf(const char* ip, int port) {
  sockaddr_storage storage{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
  } else {
    EXPECT_EQ(inet_pton(AF_INET6, ip, &v6->sin6_addr), 1) << ip;
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
  }
  Peer peer;
  PeerAddress(storage, &peer.key, &peer.text);
  return peer;
}

TEST(ListenSocketTest, PeerAddressKeysAnIpv4ClientAlikeOnEitherSocket) {
  const Peer v4 = PeerOf("10.1.2.3", 45678);
  EXPECT_EQ(v4.key.size(), 4u);
  EXPECT_EQ(v4.text, "10.1.2.3:45678");
  const Peer mapped = PeerOf("::ffff:10.1.2.3", 45678);
  EXPECT_EQ(mapped.key, v4.key);  // one address, one tarpit and reset budget
  EXPECT_EQ(mapped.text, "10.1.2.3:45678");

  const Peer v6 = PeerOf("fd00::2", 1);
  EXPECT_EQ(v6.key.size(), 8u);
  EXPECT_EQ(v6.text, "[fd00::2]:1");
  // Another address of the same /64: the same key (one tarpit, one reset
  // budget); of another /64: another.
  EXPECT_EQ(PeerOf("fd00::ffff:1234", 2).key, v6.key);
  EXPECT_NE(PeerOf("fd00:0:0:1::2", 1).key, v6.key);
}

}  // namespace
}  // namespace encoderd
