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

TEST(ListenSocketTest, PeerAddressKeysAnIpv4ClientAlikeOnEitherSocket) {
  sockaddr_storage v4{};
  auto* a = reinterpret_cast<sockaddr_in*>(&v4);
  a->sin_family = AF_INET;
  a->sin_port = htons(45678);
  inet_pton(AF_INET, "10.1.2.3", &a->sin_addr);
  std::string key4, text4;
  PeerAddress(v4, &key4, &text4);
  EXPECT_EQ(key4.size(), 4u);
  EXPECT_EQ(text4, "10.1.2.3:45678");

  sockaddr_storage mapped{};
  auto* m = reinterpret_cast<sockaddr_in6*>(&mapped);
  m->sin6_family = AF_INET6;
  m->sin6_port = htons(45678);
  inet_pton(AF_INET6, "::ffff:10.1.2.3", &m->sin6_addr);
  std::string key_mapped, text_mapped;
  PeerAddress(mapped, &key_mapped, &text_mapped);
  EXPECT_EQ(key_mapped, key4);  // one address, one tarpit and reset budget
  EXPECT_EQ(text_mapped, "10.1.2.3:45678");

  sockaddr_storage v6{};
  auto* b = reinterpret_cast<sockaddr_in6*>(&v6);
  b->sin6_family = AF_INET6;
  b->sin6_port = htons(1);
  inet_pton(AF_INET6, "fd00::2", &b->sin6_addr);
  std::string key6, text6;
  PeerAddress(v6, &key6, &text6);
  EXPECT_EQ(key6.size(), 8u);
  EXPECT_EQ(text6, "[fd00::2]:1");
  // Another address of the same /64: the same key (one tarpit, one reset
  // budget); of another /64: another.
  inet_pton(AF_INET6, "fd00::ffff:1234", &b->sin6_addr);
  std::string key_same64, unused;
  PeerAddress(v6, &key_same64, &unused);
  EXPECT_EQ(key_same64, key6);
  inet_pton(AF_INET6, "fd00:0:0:1::2", &b->sin6_addr);
  std::string key_other64;
  PeerAddress(v6, &key_other64, &unused);
  EXPECT_NE(key_other64, key6);
}

}  // namespace
}  // namespace encoderd
