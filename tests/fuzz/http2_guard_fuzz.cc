// libFuzzer target: arbitrary bytes from both sides of a connection through
// the HTTP/2 guard's frame accounting (server/net/http2_guard.h): the
// client's (after the connection preface, or instead of it) and gRPC's.
//
// Input: byte 0 picks the chunk size (1 to 256), byte 1 where the client's
// bytes end and gRPC's begin (a share of the rest), byte 2 the rounds (1 to
// 16): round r passes the r-th part of the client's bytes, then the r-th
// part of gRPC's, as the connection guard's loop may. Byte 3's low bit: the
// client sends the preface first (else its bytes are all there is).
// Each round's bytes go to three guards: in one piece, in chunks, and in the
// slices the connection guard feeds (ClientToFrameEnd, at most the chunk
// size). Invariants (trap on violation): the three end in the same state
// (verdict, streams opened, open, incomplete, premature resets, the last
// stream, preface and not-HTTP/2, gRPC's frames, its GOAWAY, the frame
// boundary), since the guard reads frames, not reads; a slice is never empty
// nor longer than what is left; incomplete requests <= open streams <=
// streams opened, and premature resets <= streams opened; an abusive verdict
// stays.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

#include "server/net/http2_guard.h"
#include "tests/fuzz/fuzz_require.h"

namespace {

namespace sv = encoderd::server;

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
// One instant for every frame: a reset is premature, and the reset budget
// the same, whichever way the bytes came.
const sv::Http2Guard::Clock::time_point kNow =
    sv::Http2Guard::Clock::time_point() + std::chrono::hours(1);

enum class Feed { kWhole, kChunks, kSlices };

struct Fed {
  explicit Fed(Feed how) : how(how), guard(Options()) {}
  static sv::Http2GuardOptions Options() {
    sv::Http2GuardOptions options;
    // Small enough for short inputs to reach every verdict.
    options.premature_reset_min_streams = 4;
    options.premature_reset_rate = 2;
    options.max_open_streams = 16;
    options.max_header_block_bytes = 512;
    options.max_header_block_frames = 8;
    return options;
  }
  void Client(const uint8_t* data, size_t size, size_t chunk) {
    while (size > 0) {
      size_t n = size;
      if (how == Feed::kChunks) n = std::min(size, chunk);
      if (how == Feed::kSlices) {
        n = guard.ClientToFrameEnd(data, size);
        REQUIRE(n >= 1 && n <= size);
        n = std::min(n, chunk);
      }
      const sv::Http2Verdict before = verdict;
      verdict = guard.FromClient(data, n, kNow);
      REQUIRE(before == sv::Http2Verdict::kOk || verdict == before);
      data += n;
      size -= n;
    }
  }
  void Server(const uint8_t* data, size_t size, size_t chunk) {
    while (size > 0) {
      const size_t n = how == Feed::kWhole ? size : std::min(size, chunk);
      guard.FromServer(data, n);
      data += n;
      size -= n;
    }
  }
  void Check() const {
    REQUIRE(guard.incomplete_requests() >= 0);
    REQUIRE(static_cast<size_t>(guard.incomplete_requests()) <= guard.open_streams());
    REQUIRE(guard.open_streams() <= static_cast<size_t>(guard.streams()));
    REQUIRE(guard.premature_resets() <= guard.streams());
  }
  bool SameAs(const Fed& o) const {
    const sv::Http2Guard& a = guard;
    const sv::Http2Guard& b = o.guard;
    return verdict == o.verdict && a.streams() == b.streams() &&
           a.open_streams() == b.open_streams() &&
           a.incomplete_requests() == b.incomplete_requests() &&
           a.premature_resets() == b.premature_resets() &&
           a.last_client_stream() == b.last_client_stream() &&
           a.preface_received() == b.preface_received() && a.not_http2() == b.not_http2() &&
           a.server_frames() == b.server_frames() && a.server_goaway() == b.server_goaway() &&
           a.server_at_frame_boundary() == b.server_at_frame_boundary();
  }

  Feed how;
  sv::Http2Guard guard;
  sv::Http2Verdict verdict = sv::Http2Verdict::kOk;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const size_t chunk = 1 + data[0];
  const size_t rounds = 1 + (data[2] & 15);
  const bool preface = data[3] & 1;
  const uint8_t* rest = data + 4;
  const size_t rest_size = size - 4;
  const size_t split = rest_size * data[1] / 255;
  std::string client = preface ? std::string(kPreface) : std::string();
  client.append(reinterpret_cast<const char*>(rest), split);
  const uint8_t* server = rest + split;
  const size_t server_size = rest_size - split;

  Fed fed[] = {Fed(Feed::kWhole), Fed(Feed::kChunks), Fed(Feed::kSlices)};
  const auto* client_bytes = reinterpret_cast<const uint8_t*>(client.data());
  for (size_t r = 0; r < rounds; ++r) {
    const size_t c0 = client.size() * r / rounds, c1 = client.size() * (r + 1) / rounds;
    const size_t s0 = server_size * r / rounds, s1 = server_size * (r + 1) / rounds;
    for (Fed& f : fed) {
      f.Client(client_bytes + c0, c1 - c0, chunk);
      f.Server(server + s0, s1 - s0, chunk);
      f.Check();
    }
    REQUIRE(fed[0].SameAs(fed[1]));
    REQUIRE(fed[0].SameAs(fed[2]));
  }
  return 0;
}
