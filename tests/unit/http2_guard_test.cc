// The HTTP/2 guard's frame accounting (server/net/http2_guard.h) on a fake
// clock, fed byte streams built frame by frame, split at every possible
// point; and the guard's relay (server/net/connection_guard.h) between real
// sockets with a stand-in for the gRPC server.
#include "server/net/http2_guard.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/net/connection_guard.h"
#include "server/net/hpack.h"
#include "tests/unit/descriptor_exhaustion.h"

namespace encoderd::server {
namespace {

using std::chrono::milliseconds;
using Clock = Http2Guard::Clock;

const Clock::time_point kT0 = Clock::time_point() + std::chrono::hours(1);
constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload = "") {
  std::string f(9, '\0');
  f[0] = static_cast<char>(payload.size() >> 16);
  f[1] = static_cast<char>(payload.size() >> 8);
  f[2] = static_cast<char>(payload.size());
  f[3] = static_cast<char>(type);
  f[4] = static_cast<char>(flags);
  f[5] = static_cast<char>(stream >> 24);
  f[6] = static_cast<char>(stream >> 16);
  f[7] = static_cast<char>(stream >> 8);
  f[8] = static_cast<char>(stream);
  return f + payload;
}
std::string Headers(uint32_t stream, uint8_t flags = 0x4) {
  return Frame(0x1, flags, stream, std::string(20, 'h'));
}
std::string Data(uint32_t stream, uint8_t flags, size_t bytes = 30) {
  return Frame(0x0, flags, stream, std::string(bytes, 'd'));
}
std::string Reset(uint32_t stream) { return Frame(0x3, 0, stream, std::string(4, '\0')); }

Http2Verdict Feed(Http2Guard* g, const std::string& bytes, Clock::time_point now) {
  return g->FromClient(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), now);
}
void FeedServer(Http2Guard* g, const std::string& bytes) {
  g->FromServer(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

Http2GuardOptions Small() {
  Http2GuardOptions o;
  o.premature_reset_min_streams = 10;
  o.premature_reset_rate = 5;
  o.max_open_streams = 8;
  return o;
}

TEST(Http2GuardTest, RapidResetIsAbuseOnceEnoughStreamsWereOpened) {
  Http2Guard g(Small());
  EXPECT_EQ(Feed(&g, kPreface, kT0), Http2Verdict::kOk);
  EXPECT_TRUE(g.preface_received());
  // Open and reset at once, as the attack does: abusive at the 10th stream.
  for (uint32_t s = 1; s <= 17; s += 2)
    EXPECT_EQ(Feed(&g, Headers(s) + Data(s, 0x1) + Reset(s), kT0), Http2Verdict::kOk) << s;
  EXPECT_EQ(Feed(&g, Headers(19) + Reset(19), kT0), Http2Verdict::kRapidReset);
  EXPECT_EQ(g.streams(), 10);
  EXPECT_EQ(g.premature_resets(), 10);
  EXPECT_EQ(g.last_client_stream(), 19u);
  EXPECT_EQ(g.open_streams(), 0u);
  // It stays abusive.
  EXPECT_EQ(Feed(&g, Headers(21), kT0), Http2Verdict::kRapidReset);
}

// Streams the connection guard answered itself (call_gate.h) never reached
// gRPC: two of them per reset stream must not hide the attack.
TEST(Http2GuardTest, StreamsTheGuardAnsweredDoNotDiluteRapidReset) {
  Http2Guard g(Small());
  Feed(&g, kPreface, kT0);
  Http2Verdict last = Http2Verdict::kOk;
  uint32_t s = 1;
  int resets = 0;
  while (last == Http2Verdict::kOk && resets < 20) {
    for (int answered = 0; answered < 2; ++answered, s += 2) {
      Feed(&g, Headers(s), kT0);
      g.Ended(s);
    }
    last = Feed(&g, Headers(s) + Reset(s), kT0);
    s += 2;
    ++resets;
  }
  EXPECT_EQ(last, Http2Verdict::kRapidReset);
  EXPECT_EQ(resets, 10);
  EXPECT_EQ(g.open_streams(), 0u);

  // A client under overload: seven of eight calls refused by the guard, half
  // of the others reset at their short deadline. Not abuse.
  Http2Guard client(Small());
  Feed(&client, kPreface, kT0);
  s = 1;
  for (int call = 0; call < 400; ++call, s += 2) {
    last = Feed(&client, Headers(s), kT0);
    if (call % 8 != 0) {
      client.Ended(s);
    } else if (call % 16 == 0) {
      last = Feed(&client, Reset(s), kT0);
    } else {
      FeedServer(&client, Headers(s, 0x5));  // answered by gRPC
    }
    ASSERT_EQ(last, Http2Verdict::kOk) << call;
  }
}

TEST(Http2GuardTest, CancellingAtDeadlinesOrAfterAnswersIsNotAbuse) {
  Http2Guard g(Small());
  Feed(&g, kPreface, kT0);
  Clock::time_point now = kT0;
  for (uint32_t s = 1; s < 200; s += 2) {
    Feed(&g, Headers(s) + Data(s, 0x1), now);
    if (s % 4 == 1) {
      // Half the calls time out: reset after their 1 s deadline.
      now += milliseconds(1000);
      EXPECT_EQ(Feed(&g, Reset(s), now), Http2Verdict::kOk);
    } else {
      // The others are answered; a reset after the answer does not count.
      FeedServer(&g, Headers(s) + Data(s, 0) + Headers(s, 0x5));
      EXPECT_EQ(Feed(&g, Reset(s), now), Http2Verdict::kOk);
    }
  }
  EXPECT_EQ(g.streams(), 100);
  EXPECT_EQ(g.premature_resets(), 0);
  EXPECT_EQ(g.open_streams(), 0u);
}

// The mixed client that found this (a reliability test): half its calls are
// cancelled within milliseconds or given a 1 ms deadline, the rest answered.
// Below the rate that is a client, not an attack; above it, abuse.
TEST(Http2GuardTest, HalfCancelledCallsAreAbuseOnlyFasterThanTheRate) {
  for (const int per_second : {4, 50}) {
    Http2Guard g(Small());
    Feed(&g, kPreface, kT0);
    Clock::time_point now = kT0;
    Http2Verdict last = Http2Verdict::kOk;
    for (uint32_t s = 1; s < 400 && last == Http2Verdict::kOk; s += 2) {
      Feed(&g, Headers(s) + Data(s, 0x1), now);
      now += milliseconds(1);
      if (s % 4 == 1) {
        last = Feed(&g, Reset(s), now);
      } else {
        FeedServer(&g, Headers(s) + Data(s, 0) + Headers(s, 0x5));
      }
      now += milliseconds(1000 / (2 * per_second) - 1);
    }
    if (per_second < 5) {
      EXPECT_EQ(last, Http2Verdict::kOk);
      EXPECT_EQ(g.streams(), 200);
      EXPECT_EQ(g.premature_resets(), 100);
    } else {
      EXPECT_EQ(last, Http2Verdict::kRapidReset);
      EXPECT_LT(g.streams(), 200);
    }
  }
}

// The rate is the address's: two connections at 3/s each, sharing a budget
// of 5/s, are abusive together; each alone, with its own budget, is not.
TEST(Http2GuardTest, TheResetRateCountsEveryConnectionOfTheAddress) {
  for (const bool shared : {false, true}) {
    auto budget = std::make_shared<ResetBudget>(Small().premature_reset_rate);
    Http2Guard a(Small(), shared ? budget : nullptr), b(Small(), shared ? budget : nullptr);
    Feed(&a, kPreface, kT0);
    Feed(&b, kPreface, kT0);
    Clock::time_point now = kT0;
    Http2Verdict last = Http2Verdict::kOk;
    for (uint32_t s = 1; s < 100 && last == Http2Verdict::kOk; s += 2) {
      now += milliseconds(333);
      for (Http2Guard* g : {&a, &b}) {
        const Http2Verdict v = Feed(g, Headers(s) + Data(s, 0x1) + Reset(s), now);
        if (v != Http2Verdict::kOk) last = v;
      }
    }
    EXPECT_EQ(last, shared ? Http2Verdict::kRapidReset : Http2Verdict::kOk) << shared;
  }
}

TEST(Http2GuardTest, FewPrematureResetsAreNotAbuse) {
  Http2Guard g(Small());
  Feed(&g, kPreface, kT0);
  // 4 of 10 streams cancelled at once (under half): fine.
  for (uint32_t s = 1; s <= 19; s += 2) {
    Feed(&g, Headers(s), kT0);
    if (s <= 7) {
      EXPECT_EQ(Feed(&g, Reset(s), kT0), Http2Verdict::kOk);
    } else {
      FeedServer(&g, Headers(s, 0x5));
    }
  }
  EXPECT_EQ(g.premature_resets(), 4);
  EXPECT_EQ(Feed(&g, Headers(21) + Reset(21), kT0), Http2Verdict::kOk);
}

TEST(Http2GuardTest, EvenStreamIdsOpenNothing) {
  Http2Guard g(Small());
  Feed(&g, kPreface, kT0);
  for (uint32_t s = 2; s <= 40; s += 2) EXPECT_EQ(Feed(&g, Headers(s), kT0), Http2Verdict::kOk);
  EXPECT_EQ(g.streams(), 0);
  EXPECT_EQ(g.open_streams(), 0u);
}

TEST(Http2GuardTest, TooManyOpenStreams) {
  Http2Guard g(Small());
  Feed(&g, kPreface, kT0);
  for (uint32_t s = 1; s <= 15; s += 2) EXPECT_EQ(Feed(&g, Headers(s), kT0), Http2Verdict::kOk);
  EXPECT_EQ(g.open_streams(), 8u);
  // Trailers (HEADERS on an open stream) open nothing.
  EXPECT_EQ(Feed(&g, Headers(15, 0x5), kT0), Http2Verdict::kOk);
  EXPECT_EQ(Feed(&g, Headers(17), kT0), Http2Verdict::kTooManyStreams);
}

// Streams whose client has not ended its side: counted from their HEADERS
// until the client's END_STREAM (DATA or trailers), a reset, gRPC's end of
// the stream or the gate's answer; past max_incomplete_requests the
// connection guard closes the connection (FromClient's verdict stays OK).
TEST(Http2GuardTest, CountsStreamsWhoseRequestsHaveNotArrived) {
  Http2GuardOptions o;
  o.max_incomplete_requests = 2;
  Http2Guard g(o);
  EXPECT_EQ(
      Feed(&g,
           std::string(kPreface, 24) + Headers(1) + Headers(3) + Data(3, 0) + Headers(5, 0x4 | 0x1),
           kT0),
      Http2Verdict::kOk);
  EXPECT_EQ(g.open_streams(), 3u);
  EXPECT_EQ(g.incomplete_requests(), 2);
  EXPECT_FALSE(g.too_many_incomplete_requests());
  EXPECT_EQ(Feed(&g, Headers(7) + Headers(9), kT0), Http2Verdict::kOk);
  EXPECT_EQ(g.incomplete_requests(), 4);
  EXPECT_TRUE(g.too_many_incomplete_requests());
  Feed(&g, Data(1, 0x1) + Headers(3, 0x4 | 0x1) + Reset(7), kT0);  // 3's trailers
  EXPECT_EQ(g.incomplete_requests(), 1);
  EXPECT_FALSE(g.too_many_incomplete_requests());
  Feed(&g, Data(1, 0x1), kT0);  // a second END_STREAM counts once
  EXPECT_EQ(g.incomplete_requests(), 1);
  g.Ended(9);                                     // answered by the gate
  FeedServer(&g, Frame(0x1, 0x4 | 0x1, 3, "t"));  // stream 3 had ended its side
  EXPECT_EQ(g.incomplete_requests(), 0);
  EXPECT_EQ(g.open_streams(), 2u);  // 1 and 5, answered by no one yet
  Feed(&g, Headers(11), kT0);
  EXPECT_EQ(g.incomplete_requests(), 1);
  FeedServer(&g, Frame(0x1, 0x4 | 0x1, 11, "t"));  // gRPC ends 11 first
  EXPECT_EQ(g.incomplete_requests(), 0);
}

TEST(Http2GuardTest, EndlessHeaderBlocksAreAbuse) {
  Http2GuardOptions o = Small();
  o.max_header_block_bytes = 1000;
  Http2Guard g(o);
  Feed(&g, kPreface, kT0);
  // Blocks within the limit, in one frame or with CONTINUATIONs, are fine.
  EXPECT_EQ(
      Feed(&g,
           Frame(0x1, 0x0, 1, std::string(400, 'h')) + Frame(0x9, 0x4, 1, std::string(400, 'h')),
           kT0),
      Http2Verdict::kOk);
  EXPECT_EQ(Feed(&g, Frame(0x1, 0x4, 3, std::string(900, 'h')), kT0), Http2Verdict::kOk);
  // A block that goes on past it (a CONTINUATION flood) is not.
  EXPECT_EQ(Feed(&g, Frame(0x1, 0x0, 5, std::string(400, 'h')), kT0), Http2Verdict::kOk);
  EXPECT_EQ(Feed(&g, Frame(0x9, 0x0, 5, std::string(400, 'h')), kT0), Http2Verdict::kOk);
  EXPECT_EQ(Feed(&g, Frame(0x9, 0x0, 5, std::string(400, 'h')), kT0),
            Http2Verdict::kOversizedHeaders);
  EXPECT_STREQ(Http2VerdictName(Http2Verdict::kOversizedHeaders), "oversized_headers");
}

// Empty CONTINUATION frames add no bytes to a header block: until
// 2026-12-02 a block could go on for ever in 9-byte frames, each of which
// gRPC 1.51 parses its unparsed bytes again for. A block of more than
// max_header_block_frames frames is abuse too.
TEST(Http2GuardTest, EmptyContinuationFloodsAreAbuse) {
  Http2GuardOptions o = Small();
  o.max_header_block_frames = 8;
  Http2Guard g(o);
  Feed(&g, kPreface, kT0);
  // 8 frames in a block are fine: HEADERS and 7 CONTINUATIONs.
  std::string block = Frame(0x1, 0x0, 1, std::string(40, 'h'));
  for (int i = 0; i < 6; ++i) block += Frame(0x9, 0x0, 1);
  block += Frame(0x9, 0x4, 1, std::string(40, 'h'));
  EXPECT_EQ(Feed(&g, block, kT0), Http2Verdict::kOk);
  // A ninth is not, however small.
  std::string flood = Frame(0x1, 0x0, 3);
  for (int i = 0; i < 7; ++i) flood += Frame(0x9, 0x0, 3);
  EXPECT_EQ(Feed(&g, flood, kT0), Http2Verdict::kOk);
  EXPECT_EQ(Feed(&g, Frame(0x9, 0x0, 3), kT0), Http2Verdict::kOversizedHeaders);
  // The default allows what a client needs for the largest block at the
  // smallest frame size a server may set (16 KiB).
  EXPECT_GE(Http2GuardOptions().max_header_block_frames,
            Http2GuardOptions().max_header_block_bytes / 16384 + 1);
  // With the defaults, 10,000 empty CONTINUATIONs (kOk before) are abuse.
  Http2Guard d{Http2GuardOptions()};
  Feed(&d, kPreface, kT0);
  std::string endless = Frame(0x1, 0x0, 1);
  for (int i = 0; i < 10000; ++i) endless += Frame(0x9, 0x0, 1);
  EXPECT_EQ(Feed(&d, endless, kT0), Http2Verdict::kOversizedHeaders);
}

TEST(Http2GuardTest, FramesSplitAtEveryByteReadTheSame) {
  std::string client = kPreface;
  std::string server;
  for (uint32_t s = 1; s <= 25; s += 2) {
    client += Headers(s) + Data(s, 0x1, 70000) + Reset(s);  // payload over 64 KiB
    server += Frame(0x4, 0, 0, std::string(6, 's')) + Data(s + 100, 0, 5);
  }
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{9}, size_t{4096}}) {
    Http2Guard g(Small());
    Http2Verdict v = Http2Verdict::kOk;
    for (size_t i = 0; i < client.size(); i += chunk) v = Feed(&g, client.substr(i, chunk), kT0);
    EXPECT_EQ(v, Http2Verdict::kRapidReset) << chunk;
    EXPECT_EQ(g.streams(), 13) << chunk;
    for (size_t i = 0; i < server.size(); i += chunk) FeedServer(&g, server.substr(i, chunk));
    EXPECT_TRUE(g.server_at_frame_boundary()) << chunk;
  }
  Http2Guard g;
  FeedServer(&g, Data(1, 0, 10).substr(0, 12));
  EXPECT_FALSE(g.server_at_frame_boundary());
  FeedServer(&g, std::string(7, 'd'));
  EXPECT_TRUE(g.server_at_frame_boundary());
}

TEST(Http2GuardTest, NotHttp2IsFlaggedAndNotRead) {
  Http2Guard g(Small());
  EXPECT_EQ(Feed(&g, "PRI * HTTP/2.0\r\n", kT0), Http2Verdict::kOk);
  EXPECT_FALSE(g.not_http2());  // a preface in pieces is fine
  EXPECT_EQ(Feed(&g, "GET / HTTP/1.1\r\n\r\n", kT0), Http2Verdict::kOk);
  EXPECT_TRUE(g.not_http2());
  EXPECT_FALSE(g.preface_received());
  for (uint32_t s = 1; s < 100; s += 2) Feed(&g, Headers(s) + Reset(s), kT0);
  EXPECT_EQ(g.streams(), 0);
}

// A header block of the server's (HEADERS without END_HEADERS, then its
// CONTINUATIONs) may not be interrupted by any frame: the guard's GOAWAY
// waits for its end. Before, the guard took the end of any frame as a place
// for it, and a client got a PROTOCOL_ERROR instead of the GOAWAY.
TEST(Http2GuardTest, NoFrameOfOursInsideTheServersHeaderBlock) {
  Http2Guard g;
  const auto server = [&](const std::string& bytes) {
    g.FromServer(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  };
  server(Frame(0x4, 0, 0));
  EXPECT_TRUE(g.server_at_frame_boundary());
  server(Headers(1, 0x0));  // no END_HEADERS
  EXPECT_FALSE(g.server_at_frame_boundary());
  server(Frame(0x9, 0x0, 1, "cc"));
  EXPECT_FALSE(g.server_at_frame_boundary());
  server(Frame(0x9, 0x4, 1, "cc"));  // END_HEADERS
  EXPECT_TRUE(g.server_at_frame_boundary());
  const std::string data = Data(1, 0);
  server(data.substr(0, 5));  // inside a frame
  EXPECT_FALSE(g.server_at_frame_boundary());
  server(data.substr(5));
  EXPECT_TRUE(g.server_at_frame_boundary());
}

TEST(Http2GuardTest, GoAwayFrameCarriesTheLastStreamAndTheCode) {
  const std::string f = GoAwayFrame(0x12345, kEnhanceYourCalm);
  ASSERT_EQ(f.size(), 17u);
  EXPECT_EQ(f.substr(0, 9), std::string("\0\0\x08\x07\0\0\0\0\0", 9));
  EXPECT_EQ(f.substr(9), std::string("\0\x01\x23\x45\0\0\0\x0b", 8));
}

// The relay between real sockets with a stand-in "gRPC server": the server
// sees a connection once its preface came, and its bytes pass unchanged; a
// client that resets every stream is cut off with GOAWAY(ENHANCE_YOUR_CALM)
// and counted; its address's next connection is held a second before it is
// read; at the cap a connection that
// opened no stream is evicted for a new one, else the new one is closed at
// once; after StopAccepting the port refuses connections.
class RecordingMetrics : public ServingMetrics {
 public:
  void ObserveRequest(const std::string&, const RequestSample&) override {}
  void ObserveBatch(const std::string&, const BatchSample&) override {}
  void AddInFlight(const std::string&, int) override {}
  void ObserveConnectionClosed(GuardPort, ConnectionClose reason) override {
    std::lock_guard<std::mutex> lock(mu);
    closed.push_back(reason);
    cv.notify_all();
  }
  void ObserveAnsweredByGuard() override {
    std::lock_guard<std::mutex> lock(mu);
    ++answered;
  }
  void SetOpenConnections(GuardPort, int64_t n) override {
    std::lock_guard<std::mutex> lock(mu);
    open = n;
    max_open = std::max(max_open, n);
    cv.notify_all();
  }
  // Waits until the guard reports `n` connections open.
  bool WaitOpen(int64_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return open == n; });
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<ConnectionClose> closed;
  int64_t open = 0;
  int64_t max_open = 0;
  int64_t answered = 0;
};

// Reads `n` bytes from `fd` (the server's end, non-blocking), waiting up to
// 10 s for them: what the guard relayed to the server.
std::string ReadExactly(int fd, size_t n) {
  std::string out(n, '\0');
  size_t have = 0;
  while (have < n) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) <= 0) break;
    const ssize_t got = recv(fd, out.data() + have, n - have, 0);
    if (got < 0 && errno == EAGAIN) continue;
    if (got <= 0) break;
    have += static_cast<size_t>(got);
  }
  out.resize(have);
  return out;
}

// A client socket connected to the guard; rcvbuf > 0: that receive buffer
// (a client that reads slowly).
int Connect(int port, int rcvbuf = 0) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// The ends of the connections the guard hands to gRPC, as it hands them.
class GrpcEnds {
 public:
  std::function<void(int)> Attach() {
    return [this](int fd) {
      std::lock_guard<std::mutex> lock(mu_);
      ends_.push_back(fd);
      attached_.notify_all();
    };
  }
  // The first end, waiting up to 10 s for it; -1 if none came.
  int First() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!attached_.wait_for(lock, std::chrono::seconds(10), [&] { return !ends_.empty(); }))
      return -1;
    return ends_[0];
  }

 private:
  std::mutex mu_;
  std::condition_variable attached_;
  std::vector<int> ends_;
};

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

TEST(ConnectionGuardTest, RelaysClosesRapidResetWithGoAwayAndCapsConnections) {
  RecordingMetrics metrics;
  std::vector<int> grpc_ends;
  std::mutex ends_mu;
  ConnectionGuardOptions options;
  options.max_connections = 2;
  options.http2 = Small();
  // Long enough that "still held" below holds on a stalled machine.
  options.tarpit = std::chrono::milliseconds(3000);
  auto guard = ConnectionGuard::Start(
      "127.0.0.1", 0,
      [&](int fd) {
        // The "server" sends SETTINGS at once, as gRPC does.
        const std::string settings = Frame(0x4, 0, 0);
        EXPECT_EQ(send(fd, settings.data(), settings.size(), MSG_NOSIGNAL),
                  static_cast<ssize_t>(settings.size()));
        std::lock_guard<std::mutex> lock(ends_mu);
        grpc_ends.push_back(fd);
      },
      options, &metrics);
  ASSERT_TRUE(guard.ok()) << guard.status().ToString();
  const int port = (*guard)->port();

  // A well-behaved client: its bytes reach the server unchanged.
  const int good = Connect(port);
  const std::string hello = std::string(kPreface) + Headers(1) + Data(1, 0x1);
  ASSERT_EQ(send(good, hello.data(), hello.size(), 0), static_cast<ssize_t>(hello.size()));
  char buf[64];
  ASSERT_EQ(recv(good, buf, 9, MSG_WAITALL), 9);  // the server's SETTINGS
  int server_end = -1;
  {
    std::lock_guard<std::mutex> lock(ends_mu);
    ASSERT_EQ(grpc_ends.size(), 1u);
    server_end = grpc_ends[0];
  }
  EXPECT_EQ(ReadExactly(server_end, hello.size()), hello);

  // An attacker: reset every stream it opens.
  const int bad = Connect(port);
  std::string attack = kPreface;
  for (uint32_t s = 1; s < 40; s += 2) attack += Headers(s) + Reset(s);
  ASSERT_EQ(send(bad, attack.data(), attack.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(attack.size()));
  // SETTINGS (the server's, or an empty one in its place when the server
  // had sent nothing), GOAWAY, then the close.
  const std::string answer = ReadAll(bad);
  ASSERT_EQ(answer.size(), 9u + 17u);
  EXPECT_EQ(answer.substr(0, 9), std::string("\0\0\0\x04\0\0\0\0\0", 9));
  const std::string goaway = answer.substr(answer.size() - 17);
  EXPECT_EQ(goaway.substr(0, 9), std::string("\0\0\x08\x07\0\0\0\0\0", 9));
  EXPECT_EQ(goaway.substr(13), std::string("\0\0\0\x0b", 4));  // ENHANCE_YOUR_CALM
  close(bad);
  {
    std::unique_lock<std::mutex> lock(metrics.mu);
    ASSERT_TRUE(metrics.cv.wait_for(lock, std::chrono::seconds(5),
                                    [&] { return !metrics.closed.empty(); }));
    EXPECT_EQ(metrics.closed[0], ConnectionClose::kRapidReset);
  }

  // The attacker never reached the server: its preface and its attack came
  // in one read, and the guard closed it before handing gRPC anything.
  {
    std::lock_guard<std::mutex> lock(ends_mu);
    EXPECT_EQ(grpc_ends.size(), 1u);
  }
  // The attacker's address (127.0.0.1) reconnects: held (the tarpit) before
  // anything is read or the server sees the connection, then served.
  const int second = Connect(port);
  ASSERT_EQ(send(second, kPreface, 24, 0), 24);
  usleep(200 * 1000);
  {
    std::lock_guard<std::mutex> lock(ends_mu);
    EXPECT_EQ(grpc_ends.size(), 1u);
  }
  ASSERT_EQ(recv(second, buf, 9, MSG_WAITALL), 9);
  {
    std::lock_guard<std::mutex> lock(ends_mu);
    EXPECT_EQ(grpc_ends.size(), 2u);
  }
  // The cap (2): with `good` and `second` open, each with a stream, a third
  // is closed at once. Once the server got the HEADERS, the guard saw them.
  const std::string opens = Headers(1);
  ASSERT_EQ(send(second, opens.data(), opens.size(), 0), static_cast<ssize_t>(opens.size()));
  {
    int second_end = -1;
    {
      std::lock_guard<std::mutex> lock(ends_mu);
      second_end = grpc_ends[1];
    }
    EXPECT_EQ(ReadExactly(second_end, 24 + opens.size()), std::string(kPreface) + opens);
  }
  const int third = Connect(port);
  EXPECT_EQ(ReadAll(third), "");  // closed without a byte
  {
    std::unique_lock<std::mutex> lock(metrics.mu);
    ASSERT_TRUE(metrics.cv.wait_for(lock, std::chrono::seconds(5),
                                    [&] { return metrics.closed.size() >= 2; }));
    EXPECT_EQ(metrics.closed[1], ConnectionClose::kConnectionCap);
  }
  // A connection that opened no stream gives its place to a new one.
  close(second);  // and the "server" closes its end, as gRPC does on EOF
  {
    std::lock_guard<std::mutex> lock(ends_mu);
    close(grpc_ends[1]);
    grpc_ends.erase(grpc_ends.begin() + 1);
  }
  ASSERT_TRUE(metrics.WaitOpen(1));  // `good` alone
  const int idle = Connect(port);
  ASSERT_TRUE(metrics.WaitOpen(2));
  const int fresh = Connect(port);
  EXPECT_EQ(ReadAll(idle), "");  // never attached: closed without a byte
  {
    std::unique_lock<std::mutex> lock(metrics.mu);
    ASSERT_TRUE(metrics.cv.wait_for(lock, std::chrono::seconds(5),
                                    [&] { return metrics.closed.size() >= 3; }));
    EXPECT_EQ(metrics.closed[2], ConnectionClose::kEvictedIdle);
  }
  close(idle);
  close(fresh);
  close(good);
  close(second);
  close(third);
  (*guard)->StopAccepting();
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  const int late = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_NE(connect(late, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);  // refused
  close(late);
  guard->reset();
  std::lock_guard<std::mutex> lock(ends_mu);
  for (int fd : grpc_ends) close(fd);
}

// Each guard sized its cap against the whole fd limit, so the gRPC port at
// its cap and the health port at its own could together need more fds than
// the process has. A guard now leaves out the fds of the other guard's
// connections (three each) beside the 256 kept for everything else.
TEST(ConnectionGuardTest, TwoGuardsShareTheFdLimit) {
  EXPECT_EQ(ConnectionsTheFdLimitAllows(1 << 20, 0), ((1 << 20) - 256) / 3);
  // ulimit -n 4096: the gRPC port, leaving room for 256 health connections,
  // gets 1,024; the health port, beside those 1,024, 256.
  EXPECT_EQ(ConnectionsTheFdLimitAllows(4096, 256), 1024);
  EXPECT_EQ(ConnectionsTheFdLimitAllows(4096, 1024), 256);
  // Both at their caps, with the 256 fds kept for the rest, fit the limit.
  for (const uint64_t limit : {1000u, 4096u, 65536u}) {
    const int grpc = ConnectionsTheFdLimitAllows(limit, 256);
    const int health = std::min(256, ConnectionsTheFdLimitAllows(limit, grpc));
    EXPECT_LE(3 * uint64_t(grpc + health) + 256, limit) << limit;
  }
  EXPECT_EQ(ConnectionsTheFdLimitAllows(200, 0), 0);
  EXPECT_EQ(ConnectionsTheFdLimitAllows(4096, 5000), 0);
}

// At the cap, every connection of a burst evicts an idle one: never more
// than the cap open. (An evicted connection was once counted twice until the
// loop's next pass, so the second connection of a burst went in past the
// cap without evicting anyone.)
TEST(ConnectionGuardTest, ABurstAtTheCapNeverOpensMoreThanTheCap) {
  RecordingMetrics metrics;
  ConnectionGuardOptions options;
  options.max_connections = 4;
  options.http2 = Small();
  auto guard = ConnectionGuard::Start(
      "127.0.0.1", 0, [](int fd) { close(fd); }, options, &metrics);
  ASSERT_TRUE(guard.ok()) << guard.status().ToString();
  const int port = (*guard)->port();
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) fds.push_back(Connect(port));
  ASSERT_TRUE(metrics.WaitOpen(4));
  // 64 more at once, none sending a byte: each evicts the oldest idle one.
  for (int i = 0; i < 64; ++i) fds.push_back(Connect(port));
  {
    std::unique_lock<std::mutex> lock(metrics.mu);
    ASSERT_TRUE(metrics.cv.wait_for(lock, std::chrono::seconds(10),
                                    [&] { return metrics.closed.size() >= 64; }));
    EXPECT_EQ(metrics.max_open, 4);
    for (ConnectionClose reason : metrics.closed) EXPECT_EQ(reason, ConnectionClose::kEvictedIdle);
  }
  EXPECT_TRUE(metrics.WaitOpen(4));
  for (int fd : fds) close(fd);
}

// accept() failing for want of a descriptor leaves the connection pending and
// the listening socket readable: polled again at once, it spins the loop on
// a core (the accept loop of CVE-2023-4785). The guard stops watching it for
// 100 ms instead, and accepts the connection once descriptors are free.
TEST(ConnectionGuardTest, RunningOutOfDescriptorsDoesNotSpinTheLoop) {
  RecordingMetrics metrics;
  auto guard = ConnectionGuard::Start(
      "127.0.0.1", 0, [](int fd) { close(fd); }, ConnectionGuardOptions(), &metrics);
  ASSERT_TRUE(guard.ok()) << guard.status().ToString();
  const testing::StarvedAccept starved =
      testing::ConnectWhileOutOfDescriptors((*guard)->port(), [&] { return (*guard)->wakeups(); });
  ASSERT_GE(starved.client, 0);
  // Waking every 100 ms and for each failed accept, the loop woke 9 times
  // in 500 ms here; spinning, it would wake on every failed accept().
  EXPECT_LT(starved.wakeups, 50u);
  std::printf("guard loop: %llu wakeups in 500 ms out of fds\n",
              static_cast<unsigned long long>(starved.wakeups));
  // Descriptors free again: the waiting connection is accepted.
  EXPECT_TRUE(metrics.WaitOpen(1));
  close(starved.client);
}

}  // namespace
}  // namespace encoderd::server

namespace encoderd::server {
namespace {

// Draining (the daemon's shutdown), a connection is closed once the server
// has sent its GOAWAY and no stream of the client is open, so that an idle
// client cannot hold gRPC's Shutdown, which waits for every connection to
// close. A stream still open keeps it; when the server ends that stream,
// the client gets everything the server sent, then the close, and so does
// the server's end. (Before Drain, the guard waited for the client.)
TEST(ConnectionGuardTest, DrainingClosesAConnectionOnceItsStreamsAreDone) {
  GrpcEnds grpc_ends;
  auto guard =
      ConnectionGuard::Start("127.0.0.1", 0, grpc_ends.Attach(), ConnectionGuardOptions(), nullptr);
  ASSERT_TRUE(guard.ok()) << guard.status().ToString();
  const int client = Connect((*guard)->port());
  const std::string hello = std::string(kPreface) + Frame(0x4, 0, 0) + Headers(1);
  ASSERT_EQ(send(client, hello.data(), hello.size(), 0), static_cast<ssize_t>(hello.size()));
  const int server_end = grpc_ends.First();
  ASSERT_GE(server_end, 0);
  ASSERT_EQ(ReadExactly(server_end, hello.size()), hello);
  (*guard)->Drain();
  // The server's SETTINGS, a GOAWAY naming stream 1, as gRPC's Shutdown
  // sends it; stream 1 stays open.
  const std::string goaway = Frame(0x4, 0, 0) + GoAwayFrame(1, 0);
  ASSERT_EQ(send(server_end, goaway.data(), goaway.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(goaway.size()));
  char buf[64];
  ASSERT_EQ(recv(client, buf, goaway.size(), MSG_WAITALL), static_cast<ssize_t>(goaway.size()));
  // Past the guard's linger (a second), still open: the stream holds it.
  pollfd p{client, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 1500), 0) << "closed with a stream open";
  // The server ends stream 1 (trailers): the connection then closes.
  const std::string trailers = Headers(1, 0x5);
  ASSERT_EQ(send(server_end, trailers.data(), trailers.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(trailers.size()));
  EXPECT_EQ(ReadAll(client), trailers);  // then end of stream (SO_RCVTIMEO: 5 s)
  p = {client, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 10000), 1);
  EXPECT_EQ(recv(client, buf, sizeof(buf), 0), 0) << "the client was not closed";
  p = {server_end, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 10000), 1);
  EXPECT_EQ(recv(server_end, buf, sizeof(buf), 0), 0) << "gRPC's end was not closed";
  close(client);
  guard->reset();
  close(server_end);
}

// gRPC closes its end after its last answers (a drain, a connection's max
// age) while a client that reads them slowly sends something more (a
// WINDOW_UPDATE, a PING), which the guard no longer reads. Closing a socket
// with unread bytes sends RST: the client lost the tail still queued in the
// kernel and saw ECONNRESET. The guard shuts its side once all is flushed,
// reads the client until its end, then closes: every byte arrives, then EOF.
TEST(ConnectionGuardTest, TheLastAnswersReachASlowClientWholeAfterGrpcCloses) {
  GrpcEnds grpc_ends;
  auto guard =
      ConnectionGuard::Start("127.0.0.1", 0, grpc_ends.Attach(), ConnectionGuardOptions(), nullptr);
  ASSERT_TRUE(guard.ok()) << guard.status().ToString();
  const int client = Connect((*guard)->port(), /*rcvbuf=*/4096);  // reads slowly
  const std::string hello = std::string(kPreface) + Frame(0x4, 0, 0) + Headers(1);
  ASSERT_EQ(send(client, hello.data(), hello.size(), 0), static_cast<ssize_t>(hello.size()));
  const int server_end = grpc_ends.First();
  ASSERT_GE(server_end, 0);
  ASSERT_EQ(ReadExactly(server_end, hello.size()), hello);
  // 160 KiB of answer (under the guard's 256 KiB buffer, so it reads all of
  // it and then gRPC's end of stream), then gRPC closes.
  std::string answer = Frame(0x4, 0, 0) + Headers(1, 0x4);
  for (int i = 0; i < 10; ++i) answer += Data(1, 0, 16384);
  answer += Headers(1, 0x5);
  for (size_t sent = 0; sent < answer.size();) {
    pollfd p{server_end, POLLOUT, 0};
    ASSERT_EQ(poll(&p, 1, 10000), 1);
    const ssize_t n = send(server_end, answer.data() + sent, answer.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EAGAIN) continue;
    ASSERT_GT(n, 0);
    sent += static_cast<size_t>(n);
  }
  close(server_end);
  // Once the guard has seen gRPC's end (a second is ample: sequencing, not
  // a speed requirement), the client sends a PING it will not read.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const std::string ping = Frame(0x6, 0, 0, std::string(8, 'p'));
  ASSERT_EQ(send(client, ping.data(), ping.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(ping.size()));
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = recv(client, buf, sizeof(buf), 0)) > 0) got.append(buf, static_cast<size_t>(n));
  const int error = n < 0 ? errno : 0;
  EXPECT_EQ(n, 0) << "not a clean end of stream: " << std::strerror(error);
  EXPECT_EQ(got.size(), answer.size());
  EXPECT_TRUE(got == answer);
  close(client);
  guard->reset();
}

// A guard (Start: send_timeout as given, 64 KiB buffers; StartWith: the
// options given) relaying one call, stream 1: the client's socket (an
// `rcvbuf` receive buffer) and gRPC's end, once the client's preface,
// SETTINGS and HEADERS went through.
struct OneCall {
  RecordingMetrics metrics;
  GrpcEnds grpc_ends;  // outlives the guard
  std::unique_ptr<ConnectionGuard> guard;
  int client = -1;
  int server_end = -1;

  void Start(std::chrono::milliseconds send_timeout, int rcvbuf) {
    ConnectionGuardOptions options;
    options.buffer_bytes = 64 * 1024;
    options.send_timeout = send_timeout;
    StartWith(options, rcvbuf);
  }
  void StartWith(const ConnectionGuardOptions& options, int rcvbuf) {
    auto started = ConnectionGuard::Start("127.0.0.1", 0, grpc_ends.Attach(), options, &metrics);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    guard = std::move(started).value();
    client = Connect(guard->port(), rcvbuf);
    const std::string hello = std::string(kPreface) + Frame(0x4, 0, 0) + Headers(1);
    ASSERT_EQ(send(client, hello.data(), hello.size(), 0), static_cast<ssize_t>(hello.size()));
    server_end = grpc_ends.First();
    ASSERT_GE(server_end, 0);
    ASSERT_EQ(ReadExactly(server_end, hello.size()), hello);
  }
  int64_t SendTimeouts() {
    std::lock_guard<std::mutex> lock(metrics.mu);
    return std::count(metrics.closed.begin(), metrics.closed.end(), ConnectionClose::kSendTimeout);
  }
  ~OneCall() {
    if (client >= 0) close(client);
    guard.reset();
    if (server_end >= 0) close(server_end);
  }
};

// A client reading slowly as a gRPC client does: up to 4 KiB at a time, 2 ms
// apart, each read followed by something of its own (a PING, where a gRPC
// client sends a WINDOW_UPDATE), until the end of stream or an error.
struct PingingReader {
  explicit PingingReader(int fd)
      : thread([this, fd] {
          const std::string ping = Frame(0x6, 0, 0, std::string(8, 'p'));
          char buf[4096];
          ssize_t n;
          while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
            got.append(buf, static_cast<size_t>(n));
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            (void)send(fd, ping.data(), ping.size(), MSG_NOSIGNAL);
          }
          error = n < 0 ? errno : 0;
        }) {}
  void Join() { thread.join(); }
  std::string got;
  int error = -1;  // 0: a clean end of stream
  std::thread thread;
};

// 160 KiB of answer on stream 1 and its end (trailers), after the server's
// SETTINGS and `before`, sent on `server_end` in full.
std::string SendAnswer(int server_end, const std::string& before = "") {
  std::string answer = Frame(0x4, 0, 0) + before + Headers(1, 0x4);
  for (int i = 0; i < 10; ++i) answer += Data(1, 0, 16384);
  answer += Headers(1, 0x5);
  for (size_t sent = 0; sent < answer.size();) {
    pollfd p{server_end, POLLOUT, 0};
    if (poll(&p, 1, 10000) != 1) break;
    const ssize_t n = send(server_end, answer.data() + sent, answer.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EAGAIN) continue;
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  return answer;
}

// The daemon's exit: gRPC's Shutdown returns once it has handed its last
// answers to the guard and closed its end; the process then ended the
// guard, closing the connection with those answers still queued for a
// client reading slowly, and the client's next bytes reset it (5 to 65 of
// 100 calls answered during a drain were lost, 1 run in 13). AwaitClosed
// holds the exit until the client has them all and the connection closed.
TEST(ConnectionGuardTest, AwaitClosedHoldsTheExitUntilTheLastAnswersAreWithTheClient) {
  OneCall call;
  ASSERT_NO_FATAL_FAILURE(call.StartWith(ConnectionGuardOptions(), /*rcvbuf=*/4096));
  call.guard->StopAccepting();
  call.guard->Drain();
  PingingReader reader(call.client);
  const std::string answer = SendAnswer(call.server_end);
  close(call.server_end);
  call.server_end = -1;
  EXPECT_TRUE(call.guard->AwaitClosed(std::chrono::steady_clock::now() + std::chrono::seconds(30)));
  call.guard.reset();  // the process ends
  reader.Join();
  EXPECT_EQ(reader.error, 0) << "not a clean end of stream: " << std::strerror(reader.error);
  EXPECT_EQ(reader.got.size(), answer.size());
  EXPECT_TRUE(reader.got == answer);
}

// AwaitClosed gives up at its deadline: a client that neither reads nor
// closes holds its connection (until kFlushAfterClose), not the exit.
TEST(ConnectionGuardTest, AwaitClosedReturnsFalseAtItsDeadline) {
  GrpcEnds grpc_ends;
  auto idle =
      ConnectionGuard::Start("127.0.0.1", 0, grpc_ends.Attach(), ConnectionGuardOptions(), nullptr);
  ASSERT_TRUE(idle.ok()) << idle.status().ToString();
  EXPECT_TRUE((*idle)->AwaitClosed(std::chrono::steady_clock::now()));  // none open
  OneCall call;
  ASSERT_NO_FATAL_FAILURE(call.StartWith(ConnectionGuardOptions(), /*rcvbuf=*/4096));
  SendAnswer(call.server_end);
  close(call.server_end);
  call.server_end = -1;
  EXPECT_FALSE(
      call.guard->AwaitClosed(std::chrono::steady_clock::now() + std::chrono::milliseconds(200)));
}

// Draining, the guard closes a connection whose streams are done while gRPC
// still holds its end (DrainingClosesAConnectionOnceItsStreamsAreDone). It
// closed as soon as the last answer was with the kernel: to a client
// reading slowly, the tail of that answer was still queued, and the
// client's next bytes reached a closed socket, which reset the connection
// and dropped the tail. Now it ends its side, and closes once the client's
// kernel has acknowledged everything or the client has closed.
TEST(ConnectionGuardTest, DrainingLetsASlowClientReadTheLastAnswerWhole) {
  OneCall call;
  ASSERT_NO_FATAL_FAILURE(call.StartWith(ConnectionGuardOptions(), /*rcvbuf=*/4096));
  call.guard->Drain();
  // gRPC's GOAWAY naming stream 1, then the answer; gRPC keeps its end open.
  const std::string answer = SendAnswer(call.server_end, GoAwayFrame(1, 0));
  // Past the guard's linger (a second: sequencing, not a speed requirement),
  // the client starts reading.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  PingingReader reader(call.client);
  reader.Join();
  EXPECT_EQ(reader.error, 0) << "not a clean end of stream: " << std::strerror(reader.error);
  EXPECT_EQ(reader.got.size(), answer.size());
  EXPECT_TRUE(reader.got == answer);
}

// With a screen, a call it refuses is answered by the guard: the client gets
// the answer after the server's SETTINGS and its DATA back as window, gRPC
// gets the preface and SETTINGS only, and the screen sees the connection as
// gRPC names it ("fd:N", N the fd handed to gRPC).
// The stream of each header block (a HEADERS or CONTINUATION frame with
// END_HEADERS) read from `fd` after its first `skip` bytes, until `want`
// of them came, the other end closed, or nothing came for 10 s; `flags`
// gets each block's last frame's flags.
std::vector<uint32_t> ReadHeaderBlocks(int fd, size_t want, size_t skip,
                                       std::vector<uint8_t>* flags = nullptr) {
  std::vector<uint32_t> streams;
  std::string got;
  char buf[65536];
  while (streams.size() < want) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EAGAIN) continue;
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
    size_t at = std::min(skip, got.size());
    skip -= at;
    while (skip == 0 && got.size() - at >= 9) {
      const auto byte = [&](size_t i) { return static_cast<uint8_t>(got[at + i]); };
      const size_t length = (size_t{byte(0)} << 16) | (size_t{byte(1)} << 8) | byte(2);
      if (got.size() - at < 9 + length) break;
      if ((byte(3) == 0x1 || byte(3) == 0x9) && (byte(4) & 0x4)) {
        streams.push_back(
            (uint32_t{byte(5)} << 24 | uint32_t{byte(6)} << 16 | uint32_t{byte(7)} << 8 | byte(8)) &
            0x7fffffffu);
        if (flags) flags->push_back(byte(4));
      }
      at += 9 + length;
    }
    got.erase(0, at);
  }
  return streams;
}

// Streams 1, 3, 5, ...: `count` of them.
std::vector<uint32_t> OddStreams(size_t count) {
  std::vector<uint32_t> streams(count);
  for (size_t i = 0; i < count; ++i) streams[i] = static_cast<uint32_t>(2 * i + 1);
  return streams;
}

// Sends `bytes` on `fd` in a thread of its own (blocking sends: the peer
// may stop reading for a while), then ends its side.
std::thread SendAll(int fd, std::string bytes) {
  return std::thread([fd, bytes = std::move(bytes)] {
    for (size_t sent = 0; sent < bytes.size();) {
      const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) {
        ADD_FAILURE() << "send: " << std::strerror(errno);
        return;
      }
      sent += static_cast<size_t>(n);
    }
    shutdown(fd, SHUT_WR);
  });
}

// The guard's peak_buffered_bytes() once it reached `at_least` (waiting up
// to 10 s: the kernel's buffers fill first) and 200 ms more went by.
uint64_t SettledPeak(const ConnectionGuard& guard, uint64_t at_least, const char* what) {
  for (int i = 0; i < 1000 && guard.peak_buffered_bytes() < at_least; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const uint64_t peak = guard.peak_buffered_bytes();
  std::printf("guard: at most %llu bytes buffered for %s\n", static_cast<unsigned long long>(peak),
              what);
  return peak;
}

// gRPC closes its end after its last answers while the guard still holds
// client bytes for it (gRPC had stopped reading them). Writing those to the
// closed end failed, and the guard then closed the connection, its unread
// client bytes making that a reset: the answers still queued for a client
// reading slowly were lost. gRPC's end gone is now its end of stream: what
// the client sent it is dropped, and its answers reach the client whole.
TEST(ConnectionGuardTest, GrpcGoneWithClientBytesStillForItFlushesItsAnswers) {
  OneCall call;
  ASSERT_NO_FATAL_FAILURE(call.StartWith(ConnectionGuardOptions(), /*rcvbuf=*/4096));
  const std::string answer = SendAnswer(call.server_end);
  // 4 MiB of DATA on stream 1, which gRPC's end does not read: past what the
  // socketpair takes, the guard holds the rest for it, up to its 256 KiB
  // buffer (the answer, which it holds for the client, is 160 KiB).
  std::string flood;
  for (int i = 0; i < 256; ++i) flood += Data(1, 0, 16384);
  std::thread sender = SendAll(call.client, flood);
  ASSERT_GE(SettledPeak(*call.guard, 200 * 1024, "the client's bytes gRPC does not read"),
            200 * 1024u);
  close(call.server_end);
  call.server_end = -1;
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = recv(call.client, buf, sizeof(buf), 0)) > 0) got.append(buf, static_cast<size_t>(n));
  const int error = n < 0 ? errno : 0;
  sender.join();
  EXPECT_EQ(n, 0) << "not a clean end of stream: " << std::strerror(error);
  EXPECT_EQ(got.size(), answer.size());
  EXPECT_TRUE(got == answer);
}

// After gRPC closed its end, a client that ends its own side (TCP half
// close) while its last answers are still on their way, a PING of its
// unread: once the guard had ended its side too, EPOLLHUP came, which it
// took for the client being gone, and it closed at once, the PING unread,
// so with a reset that dropped what was still queued for the client. It now
// reads the client to its end first, and the client gets it all.
TEST(ConnectionGuardTest, AClientEndingItsSideStillGetsTheLastAnswersWhole) {
  OneCall call;
  ASSERT_NO_FATAL_FAILURE(call.StartWith(ConnectionGuardOptions(), /*rcvbuf=*/4096));
  const std::string answer = SendAnswer(call.server_end);
  close(call.server_end);
  call.server_end = -1;
  // Once the guard has seen gRPC's end (sequencing, not a speed
  // requirement): a PING, then the client's end.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string ping = Frame(0x6, 0, 0, std::string(8, 'p'));
  ASSERT_EQ(send(call.client, ping.data(), ping.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(ping.size()));
  shutdown(call.client, SHUT_WR);
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = recv(call.client, buf, sizeof(buf), 0)) > 0) got.append(buf, static_cast<size_t>(n));
  const int error = n < 0 ? errno : 0;
  EXPECT_EQ(n, 0) << "not a clean end of stream: " << std::strerror(error);
  EXPECT_EQ(got.size(), answer.size());
  EXPECT_TRUE(got == answer);
}

// gRPC's end for the screen's tests: it sends its SETTINGS first (the gate
// answers only between gRPC's frames), then `then(fd)` if set.
std::function<void(int)> GrpcSendsSettings(std::function<void(int)> then = nullptr) {
  return [then](int fd) {
    const std::string settings = Frame(0x4, 0, 0);
    EXPECT_EQ(send(fd, settings.data(), settings.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(settings.size()));
    if (then) then(fd);
  };
}

// A screen's refusal: RESOURCE_EXHAUSTED with `message`, and `request_id`.
CallVerdict Refusal(const std::string& message, uint64_t request_id) {
  CallVerdict verdict;
  verdict.status = ResourceExhausted(message);
  verdict.request_id = request_id;
  return verdict;
}

TEST(ConnectionGuardTest, AnswersTheCallsTheScreenRefuses) {
  RecordingMetrics metrics;
  std::mutex mu;
  std::vector<int> grpc_ends;
  std::vector<std::string> peers;
  ConnectionGuardOptions options;
  options.screen = [&](const CallHead& call) {
    std::lock_guard<std::mutex> lock(mu);
    peers.emplace_back(call.peer);
    return Refusal("busy", 7);
  };
  auto guard = ConnectionGuard::Start("127.0.0.1", 0, GrpcSendsSettings([&](int fd) {
                                        std::lock_guard<std::mutex> lock(mu);
                                        grpc_ends.push_back(fd);
                                      }),
                                      options, &metrics);
  ASSERT_TRUE(guard.ok()) << guard.status().ToString();
  const int client = Connect((*guard)->port());
  std::string block;
  HpackAppendLiteral(":path", "/encoderd.v1.Encoder/Embed", &block);
  const std::string hello =
      std::string(kPreface) + Frame(0x4, 0, 0) + Frame(0x1, 0x4, 1, block) + Data(1, 0x1);
  // The preface split across two writes.
  ASSERT_EQ(send(client, hello.data(), 10, 0), 10);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(send(client, hello.data() + 10, hello.size() - 10, 0),
            static_cast<ssize_t>(hello.size() - 10));
  char buf[9];
  ASSERT_EQ(recv(client, buf, 9, MSG_WAITALL), 9);  // the server's SETTINGS
  EXPECT_EQ(std::string(buf, 9), Frame(0x4, 0, 0));
  ASSERT_EQ(recv(client, buf, 9, MSG_WAITALL), 9);  // the answer
  const size_t length =
      (size_t{uint8_t(buf[0])} << 16) | (size_t{uint8_t(buf[1])} << 8) | uint8_t(buf[2]);
  EXPECT_EQ(buf[3], 0x1);  // HEADERS
  EXPECT_EQ(buf[4], 0x5);  // END_STREAM | END_HEADERS
  EXPECT_EQ(buf[8], 1);    // stream 1
  std::string payload(length, '\0');
  ASSERT_EQ(recv(client, payload.data(), length, MSG_WAITALL), static_cast<ssize_t>(length));
  HpackDecoder decoder;
  std::vector<HeaderField> fields;
  ASSERT_TRUE(decoder.Decode(reinterpret_cast<const uint8_t*>(payload.data()), length, &fields));
  std::map<std::string, std::string> answer;
  for (const HeaderField& f : fields) answer[f.name] = f.value;
  EXPECT_EQ(answer["grpc-status"], "8");
  EXPECT_EQ(answer["grpc-message"], "busy");
  EXPECT_EQ(answer["x-request-id"], "7");
  char window[13];
  ASSERT_EQ(recv(client, window, 13, MSG_WAITALL), 13);
  EXPECT_EQ(std::string(window, 13), Frame(0x8, 0, 0, std::string("\0\0\0\x1e", 4)));
  int server_end = -1;
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(grpc_ends.size(), 1u);
    server_end = grpc_ends[0];
    ASSERT_EQ(peers.size(), 1u);
    EXPECT_EQ(peers[0], "fd:" + std::to_string(server_end));
  }
  const std::string grpc_got = std::string(kPreface) + Frame(0x4, 0, 0);
  EXPECT_EQ(ReadExactly(server_end, grpc_got.size()), grpc_got);
  pollfd p{server_end, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 200), 0);  // nothing of the call
  {
    std::lock_guard<std::mutex> lock(metrics.mu);
    EXPECT_EQ(metrics.answered, 1);
  }
  close(client);
}

// A client that sends refused calls as fast as it can and never reads the
// answers: each 41-byte HEADERS frame (one byte of header block, the path
// from the HPACK table, and 30 of padding) becomes an answer of ~290 bytes.
// The guard's buffers hold at most buffer_bytes and one read; the client's
// bytes past that wait unparsed, and once it reads, every call it sent gets
// its answer. Before, each 64 KiB read was parsed whole: ~460 KB of answers
// in a 64 KiB buffer.
TEST(ConnectionGuardTest, AClientNotReadingItsAnswersFillsNoMoreThanTheBuffer) {
  RecordingMetrics metrics;
  ConnectionGuardOptions options;
  options.buffer_bytes = 64 * 1024;
  options.screen = [](const CallHead&) { return Refusal(std::string(200, 'm'), 123456789); };
  auto guard = ConnectionGuard::Start("127.0.0.1", 0, GrpcSendsSettings(), options, &metrics);
  ASSERT_TRUE(guard.ok()) << guard.status().ToString();
  const int client = Connect((*guard)->port(), /*rcvbuf=*/4096);
  // Stream 1 puts the path in the HPACK table (a literal with incremental
  // indexing, name ":path" from the static table); the others refer to it
  // (index 62, the table's first entry), padded (PADDED, 30 bytes) so that
  // a 64 KiB read opens fewer streams than Http2Guard's max_open_streams
  // (the gate answers, and so ends, them only after the guard counted them).
  const std::string path = "/encoderd.v1.Encoder/Embed";
  std::string calls = std::string(kPreface) + Frame(0x4, 0, 0) +
                      Frame(0x1, 0x5, 1, "\x44" + std::string(1, char(path.size())) + path);
  constexpr int kCalls = 30000;
  const std::string padded = "\x1e\xbe" + std::string(30, '\0');
  for (uint32_t i = 1; i < kCalls; ++i) calls += Frame(0x1, 0xd, 2 * i + 1, padded);
  std::thread sender = SendAll(client, calls);
  // The answers fill the kernel's buffers (a few MB), then the guard's.
  const uint64_t peak =
      SettledPeak(**guard, options.buffer_bytes / 2, "a client not reading its answers");
  EXPECT_GE(peak, options.buffer_bytes / 2);
  EXPECT_LE(peak, options.buffer_bytes + 64 * 1024);
  // Read: every call gets its whole answer, in order (after gRPC's
  // SETTINGS, and among WINDOW_UPDATEs, if any).
  std::vector<uint8_t> flags;
  EXPECT_EQ(ReadHeaderBlocks(client, kCalls, 0, &flags), OddStreams(kCalls));
  EXPECT_EQ(std::count(flags.begin(), flags.end(), 0x5), kCalls);  // END_STREAM | END_HEADERS
  sender.join();
  {
    std::lock_guard<std::mutex> lock(metrics.mu);
    EXPECT_EQ(metrics.answered, kCalls);
  }
  close(client);
}

// A client whose header blocks the gate writes out as literals (after a
// refused call's block inserted into the HPACK table and was kept from
// gRPC) sends 29-byte HEADERS frames that each refer 15 times to a
// 4,000-byte table entry: each becomes a ~60 KB block for gRPC, which does
// not read. The buffer toward gRPC holds at most buffer_bytes and about one
// block; once gRPC reads, every call arrives. Before, the bytes were parsed
// 4 KiB or a whole read at a time: ~140 or ~2,000 such frames at once, 8 MB
// or more in a 64 KiB buffer.
TEST(ConnectionGuardTest, HeaderBlocksWrittenOutFillNoMoreThanTheBuffer) {
  RecordingMetrics metrics;
  std::mutex mu;
  int grpc_end = -1;
  ConnectionGuardOptions options;
  options.buffer_bytes = 64 * 1024;
  options.screen = [](const CallHead& call) {
    return call.path == "/refused" ? Refusal("no", 0) : CallVerdict{};
  };
  auto guard = ConnectionGuard::Start("127.0.0.1", 0, GrpcSendsSettings([&](int fd) {
                                        std::lock_guard<std::mutex> lock(mu);
                                        grpc_end = fd;
                                      }),
                                      options, &metrics);
  ASSERT_TRUE(guard.ok()) << guard.status().ToString();
  const int client = Connect((*guard)->port());
  auto string_literal = [](const std::string& s, std::string* out) {
    HpackAppendInteger(s.size(), 7, 0x00, out);
    *out += s;
  };
  // Stream 1 (refused): "x-big: 4000 bytes" and ":path: /refused", both
  // inserted into the table (x-big at index 63 once the path is at 62).
  std::string inserting;
  inserting += '\x40';
  string_literal("x-big", &inserting);
  string_literal(std::string(4000, 'v'), &inserting);
  inserting += '\x44';
  string_literal("/refused", &inserting);
  // The others: ":path: /ok" without indexing, and 15 references to x-big
  // (index 63: the path went in after it).
  std::string referring = "\x04";
  string_literal("/ok", &referring);
  referring += std::string(15, '\xbf');
  std::string calls = std::string(kPreface) + Frame(0x4, 0, 0) + Frame(0x1, 0x5, 1, inserting);
  constexpr int kForwarded = 200;
  for (uint32_t i = 1; i <= kForwarded; ++i) calls += Frame(0x1, 0x5, 2 * i + 1, referring);
  std::thread sender = SendAll(client, calls);
  const uint64_t peak =
      SettledPeak(**guard, options.buffer_bytes / 2, "gRPC not reading written-out blocks");
  EXPECT_GE(peak, options.buffer_bytes / 2);
  EXPECT_LE(peak, options.buffer_bytes + 96 * 1024);
  // gRPC reads: every forwarded call's HEADERS arrives, in order, each
  // block ~60 KB.
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(mu);
    fd = grpc_end;
  }
  ASSERT_GE(fd, 0);
  const std::vector<uint32_t> odd = OddStreams(kForwarded + 1);
  EXPECT_EQ(ReadHeaderBlocks(fd, kForwarded, std::string(kPreface).size()),
            std::vector<uint32_t>(odd.begin() + 1, odd.end()));
  sender.join();
  close(client);
}

// gRPC's answers to stream 1 as gRPC's end writes them: its SETTINGS, the
// stream's HEADERS, then `data_bytes` of DATA in 16 KiB frames.
std::string Answers(size_t data_bytes) {
  std::string answer = Frame(0x4, 0, 0) + Headers(1, 0x4);
  for (size_t sent = 0; sent < data_bytes; sent += 16384) answer += Data(1, 0, 16384);
  return answer;
}

// Writes `bytes` on the non-blocking `fd` as fast as its reader takes them,
// until all are written, nothing was taken for `patience`, or the other end
// closed; returns how many were written.
size_t Push(int fd, const std::string& bytes, std::chrono::milliseconds patience) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, static_cast<int>(patience.count())) != 1) break;
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  return sent;
}

// Whether the guard reported closing a connection for `reason`, waiting up
// to 10 s for it.
bool WaitClosed(RecordingMetrics* metrics, ConnectionClose reason) {
  std::unique_lock<std::mutex> lock(metrics->mu);
  return metrics->cv.wait_for(lock, std::chrono::seconds(10), [&] {
    return std::count(metrics->closed.begin(), metrics->closed.end(), reason) > 0;
  });
}

// With max_connections_per_address 2, a third connection from 127.0.0.1 is
// closed at once (address_cap), before anyone makes room for it, while
// another address (127.0.0.2) still gets in; once one of the first two
// closes, 127.0.0.1 has room again.
TEST(ConnectionGuardTest, AnAddressHoldsAtMostItsShareOfConnections) {
  RecordingMetrics metrics;
  GrpcEnds grpc_ends;
  ConnectionGuardOptions options;
  options.max_connections = 4;
  options.max_connections_per_address = 2;
  auto guard = ConnectionGuard::Start("0.0.0.0", 0, grpc_ends.Attach(), options, &metrics);
  ASSERT_TRUE(guard.ok()) << guard.status().ToString();
  const auto connect_from = [&](const char* address) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, address, &a.sin_addr);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << std::strerror(errno);
    a.sin_port = htons(static_cast<uint16_t>((*guard)->port()));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
  };
  const int first = connect_from("127.0.0.1");
  const int second = connect_from("127.0.0.1");
  ASSERT_TRUE(metrics.WaitOpen(2));
  const int third = connect_from("127.0.0.1");
  EXPECT_TRUE(WaitClosed(&metrics, ConnectionClose::kAddressCap));
  char buf[16];
  EXPECT_EQ(recv(third, buf, sizeof(buf), 0), 0) << "the third connection was not closed";
  const int other = connect_from("127.0.0.2");
  EXPECT_TRUE(metrics.WaitOpen(3));
  close(first);
  ASSERT_TRUE(metrics.WaitOpen(2));
  const int again = connect_from("127.0.0.1");
  EXPECT_TRUE(metrics.WaitOpen(3));
  {
    std::lock_guard<std::mutex> lock(metrics.mu);
    EXPECT_EQ(metrics.closed.size(), 1u);  // the third only
  }
  for (int fd : {second, third, other, again}) close(fd);
  guard->reset();
}

// A client that sends nothing within preface_timeout, and one that sends
// something other than the HTTP/2 preface (an HTTP/1.1 request), are
// closed, each counted under its reason, and gRPC never gets either; a
// client that sends the preface in two pieces 50 ms apart, well within the
// timeout, is handed to gRPC.
TEST(ConnectionGuardTest, ClosesClientsThatSendNoPrefaceOrAnother) {
  RecordingMetrics metrics;
  GrpcEnds grpc_ends;
  ConnectionGuardOptions options;
  options.preface_timeout = std::chrono::milliseconds(2000);
  auto guard = ConnectionGuard::Start("127.0.0.1", 0, grpc_ends.Attach(), options, &metrics);
  ASSERT_TRUE(guard.ok()) << guard.status().ToString();
  const int silent = Connect((*guard)->port());
  const int other = Connect((*guard)->port());
  const std::string http1 = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(other, http1.data(), http1.size(), 0), static_cast<ssize_t>(http1.size()));
  const int slow = Connect((*guard)->port());
  const std::string preface(kPreface);
  ASSERT_EQ(send(slow, preface.data(), 5, 0), 5);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(send(slow, preface.data() + 5, preface.size() - 5, 0),
            static_cast<ssize_t>(preface.size() - 5));
  const int server_end = grpc_ends.First();
  ASSERT_GE(server_end, 0) << "the client that sent the preface was not handed to gRPC";
  EXPECT_EQ(ReadExactly(server_end, preface.size()), preface);
  EXPECT_TRUE(WaitClosed(&metrics, ConnectionClose::kBadPreface));
  EXPECT_TRUE(WaitClosed(&metrics, ConnectionClose::kPrefaceTimeout));
  // Both closed by the guard (SO_RCVTIMEO: 5 s), nothing answered.
  char buf[64];
  EXPECT_EQ(recv(other, buf, sizeof(buf), 0), 0);
  EXPECT_EQ(recv(silent, buf, sizeof(buf), 0), 0);
  {
    std::lock_guard<std::mutex> lock(metrics.mu);
    EXPECT_EQ(metrics.closed.size(), 2u);  // not the one handed to gRPC
  }
  close(silent);
  close(other);
  close(slow);
  guard->reset();
  close(server_end);
}

// OneCall whose answer gRPC's end writes from a thread of its own, to a
// client that reads it `chunk` bytes at a time, `pause` apart, until it has
// it all or the connection closes.
struct SlowReader : OneCall {
  size_t pushed = 0;    // what gRPC's end wrote
  std::string got;      // what the client read
  bool closed = false;  // the connection closed before all came
  int error = 0;        // then: the error the read gave (0: end of stream)

  void Run(std::chrono::milliseconds send_timeout, size_t answer_bytes, int rcvbuf, size_t chunk,
           std::chrono::milliseconds pause) {
    ASSERT_NO_FATAL_FAILURE(Start(send_timeout, rcvbuf));
    const std::string answer = Answers(answer_bytes);
    std::thread grpc([&] { pushed = Push(server_end, answer, std::chrono::seconds(10)); });
    const auto start = std::chrono::steady_clock::now();
    std::string buf(chunk, '\0');
    while (got.size() < answer.size()) {
      const ssize_t n = recv(client, buf.data(), chunk, 0);  // SO_RCVTIMEO: 5 s
      if (n <= 0) {
        closed = true;
        error = n < 0 ? errno : 0;
        break;
      }
      got.append(buf.data(), static_cast<size_t>(n));
      std::this_thread::sleep_for(pause);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    close(client);  // gRPC's end stops waiting, if it still does
    client = -1;
    grpc.join();
    std::printf("guard: a client reading %zu bytes every %lld ms read %zu bytes in %.1f s%s\n",
                chunk, static_cast<long long>(pause.count()), got.size(), seconds,
                closed ? ", then the connection closed" : "");
    EXPECT_EQ(got, answer.substr(0, got.size()));
  }
};

// A client that stops reading (granting gRPC every HTTP/2 window first)
// would have gRPC keep every answer it computes for it, for as long as the
// connection lasts. Once bytes wait for it in the guard and it has not
// taken what was queued for it within send_timeout, the connection is
// closed: gRPC's end sees its end, and gRPC frees what it held.
TEST(ConnectionGuardTest, AClientThatStopsReadingIsClosedAtTheSendTimeout) {
  OneCall call;
  ASSERT_NO_FATAL_FAILURE(call.Start(std::chrono::milliseconds(300), /*rcvbuf=*/4096));
  // gRPC writes until the guard, its buffer full, stops reading it (the
  // kernel's buffers toward the client fill first), or closes it.
  const size_t pushed = Push(call.server_end, Answers(64 << 20), std::chrono::seconds(2));
  std::printf("guard: gRPC wrote %zu bytes to a client not reading\n", pushed);
  EXPECT_LT(pushed, size_t{64} << 20);
  EXPECT_TRUE(WaitClosed(&call.metrics, ConnectionClose::kSendTimeout));
  // The client is reset (nothing of what the kernel queued for it is kept
  // for it), and gRPC's end is closed (what it wrote meanwhile went unread:
  // a reset too).
  char buf[65536];
  ssize_t got;
  while ((got = recv(call.client, buf, sizeof(buf), 0)) > 0) {
  }
  EXPECT_EQ(got, -1);
  EXPECT_EQ(errno, ECONNRESET) << std::strerror(errno);
  ssize_t n;
  do {
    pollfd p{call.server_end, POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 10000), 1) << "gRPC's end was not closed";
    n = recv(call.server_end, buf, sizeof(buf), 0);
  } while (n > 0 || (n < 0 && errno == EAGAIN));
  EXPECT_TRUE(n == 0 || errno == ECONNRESET) << std::strerror(errno);
}

// The kernel's buffer for a client grows to megabytes before anything waits
// in the guard's: 1 MB of answers that a client never reads all sit there.
// Its connection is closed at the send timeout all the same.
TEST(ConnectionGuardTest, AnswersTheKernelQueuesForAClientNotReadingCountToo) {
  // The kernel's largest buffer for a socket (net.ipv4.tcp_wmem's last
  // field; 4 MiB by default) must hold the 1 MB.
  std::ifstream wmem("/proc/sys/net/ipv4/tcp_wmem");
  int64_t least = 0, initial = 0, most = 0;
  if (!(wmem >> least >> initial >> most) || most < (int64_t{2} << 20))
    GTEST_SKIP() << "net.ipv4.tcp_wmem allows under 2 MiB a socket";
  OneCall call;
  ASSERT_NO_FATAL_FAILURE(call.Start(std::chrono::milliseconds(300), /*rcvbuf=*/4096));
  const std::string answer = Answers(1 << 20);
  ASSERT_EQ(Push(call.server_end, answer, std::chrono::seconds(10)), answer.size());
  EXPECT_TRUE(WaitClosed(&call.metrics, ConnectionClose::kSendTimeout));
}

// A client reading a trickle (1 KiB every 20 ms) takes bytes all along, so
// a timeout counted from the last byte taken would never close it; it is
// closed for not taking what waited for it within send_timeout, with a
// reset: the megabytes the kernel queued for it are dropped, not read out
// at its pace.
TEST(ConnectionGuardTest, AClientReadingATrickleIsClosedAtTheSendTimeout) {
  SlowReader reader;
  reader.Run(std::chrono::milliseconds(500), 32 << 20, 16384, 1024, std::chrono::milliseconds(20));
  EXPECT_TRUE(reader.closed);
  EXPECT_EQ(reader.SendTimeouts(), 1);
  EXPECT_EQ(reader.error, ECONNRESET) << std::strerror(reader.error);
  EXPECT_LT(reader.got.size(), size_t{4} << 20);
}

// A client that takes what waits for it within send_timeout is never
// closed for it, however long the answer takes: here 48 MB, far more than
// the kernel's and the guard's buffers hold, read up to 64 KiB every 5 ms
// (4-6 s here) against a timeout of 2 s; each time it owes at most what
// the kernel (a few MB on loopback) and the guard (64 KiB) queue for it. A
// timeout counted from when bytes first waited would close it.
TEST(ConnectionGuardTest, AClientTakingWhatWaitsInTimeIsNotClosed) {
  SlowReader reader;
  reader.Run(std::chrono::milliseconds(2000), 48 << 20, 256 * 1024, 65536,
             std::chrono::milliseconds(5));
  EXPECT_FALSE(reader.closed);
  EXPECT_EQ(reader.got.size(), reader.pushed);
  EXPECT_EQ(reader.SendTimeouts(), 0);
}

}  // namespace
}  // namespace encoderd::server
