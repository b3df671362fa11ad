// Watches one plaintext HTTP/2 connection's frames in both directions and
// decides when its client abuses streams. Only the 9-byte frame headers are
// read; payloads pass through untouched and nothing is buffered here.
//
// The rule for rapid reset (CVE-2023-44487) is Envoy's: a stream the client
// resets within `premature_reset_lifetime` of opening it, before the server
// ended it, is a premature reset; once a connection has opened
// `premature_reset_min_streams` streams, it is abusive when at least half of
// them were reset prematurely. Unlike Envoy's, the rule also needs premature
// resets faster than `premature_reset_rate` a second from the client's
// address, all its connections together (a ResetBudget): the harm of the
// attack is its rate, and a client that cancels many calls early (hedged
// calls, users giving up, 1 ms deadlines) but not thousands a second costs
// the server no more than its calls.
// A client cancelling calls at their deadlines resets streams after the
// deadline, and only for the calls that time out: with deadlines under
// premature_reset_lifetime that is premature, which only matters when most of
// its calls time out, thousands a second (the server falling far behind: the
// call gate counts the calls it let through for that reason). A client that
// keeps more than `max_open_streams` streams open at once is abusive too (the
// server advertises a lower limit in its SETTINGS), and so is one whose
// header block outgrows `max_header_block_bytes` or
// `max_header_block_frames`. The guard also counts the
// open streams whose request the client has not finished (its side of the
// stream still open): gRPC holds ~12 KB for each. The call gate refuses new
// calls past a lower bound (call_gate.h); where the gate is off, the
// connection guard closes a connection with more than
// `max_incomplete_requests` (kIncompleteRequests: FromClient never returns
// it, since a read's later streams are counted before the gate answers its
// earlier ones).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

namespace encoderd::server {

struct Http2GuardOptions {
  std::chrono::milliseconds premature_reset_lifetime{1000};
  int64_t premature_reset_min_streams = 100;
  double premature_reset_rate = 2000;
  // Twice what the daemon advertises (SETTINGS_MAX_CONCURRENT_STREAMS 1000,
  // serve_command.cc): a client that goes past that ignores the server.
  int64_t max_open_streams = 2048;
  // A header block (HEADERS and its CONTINUATION frames) larger than this is
  // abuse: gRPC's own limit on metadata is 8 KiB, and the HPACK parser of
  // gRPC 1.51 spends unbounded memory and CPU on endless blocks
  // (CVE-2023-33953; CONTINUATION floods).
  int64_t max_header_block_bytes = 64 * 1024;
  // A header block of more frames than this is abuse too, whatever its
  // bytes: empty CONTINUATION frames add none, and gRPC 1.51 parses its
  // unparsed bytes again on each frame. A client at the smallest frame size
  // a server may allow (16 KiB) needs 4 frames for 64 KiB.
  int64_t max_header_block_frames = 64;
  // Twice the call gate's per-connection limit (IncompleteRequestLimits).
  int64_t max_incomplete_requests = 512;
};

enum class Http2Verdict {
  kOk,
  kRapidReset,
  kTooManyStreams,
  kOversizedHeaders,
  kIncompleteRequests
};

// "rapid_reset", "too_many_streams", "oversized_headers",
// "incomplete_requests" ("" for kOk).
const char* Http2VerdictName(Http2Verdict verdict);

// HTTP/2 error code ENHANCE_YOUR_CALM (RFC 9113, 7).
inline constexpr uint32_t kEnhanceYourCalm = 0xb;

// A GOAWAY frame (stream 0) naming the last stream the server processes.
std::string GoAwayFrame(uint32_t last_stream_id, uint32_t error_code);

// One frame's 9-byte header (RFC 9113, 4.1).
struct Http2Frame {
  uint8_t type = 0;
  uint8_t flags = 0;
  uint32_t stream = 0;
  uint64_t length = 0;
};

inline constexpr uint8_t kHttp2Data = 0x0, kHttp2Headers = 0x1, kHttp2Priority = 0x2,
                         kHttp2RstStream = 0x3, kHttp2Settings = 0x4, kHttp2GoAway = 0x7,
                         kHttp2WindowUpdate = 0x8, kHttp2Continuation = 0x9;
inline constexpr uint8_t kHttp2EndStream = 0x1, kHttp2EndHeaders = 0x4, kHttp2Padded = 0x8,
                         kHttp2PriorityFlag = 0x20;

// A frame's 9-byte header, with `length` bytes of payload to follow.
std::string Http2FrameHeaderBytes(uint8_t type, uint8_t flags, uint32_t stream, size_t length);

// The frames of one direction, read across arbitrary chunk boundaries:
// `on_header(const Http2Frame&)` once a frame's header is whole, then
// `on_payload(const uint8_t*, size_t)` with its payload in as many pieces as
// it arrives in (none for an empty one).
class Http2FrameReader {
 public:
  template <typename OnHeader, typename OnPayload>
  void Read(const uint8_t* data, size_t size, OnHeader on_header, OnPayload on_payload) {
    while (size > 0) {
      if (payload_left_ > 0) {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(payload_left_, size));
        payload_left_ -= take;
        on_payload(data, take);
        data += take;
        size -= take;
        continue;
      }
      const size_t take = std::min(size, sizeof(header_) - header_have_);
      std::copy(data, data + take, header_ + header_have_);
      header_have_ += take;
      data += take;
      size -= take;
      if (header_have_ < sizeof(header_)) return;
      header_have_ = 0;
      const uint8_t* h = header_;
      payload_left_ = (uint64_t{h[0]} << 16) | (uint64_t{h[1]} << 8) | h[2];
      Http2Frame frame;
      frame.length = payload_left_;
      frame.type = h[3];
      frame.flags = h[4];
      frame.stream =
          ((uint32_t{h[5]} << 24) | (uint32_t{h[6]} << 16) | (uint32_t{h[7]} << 8) | h[8]) &
          0x7fffffffu;
      on_header(frame);
    }
  }
  // Between frames: nothing of a frame read and nothing more of one owed.
  bool at_boundary() const { return header_have_ == 0 && payload_left_ == 0; }
  // Of the next `size` bytes at `data`, those up to the end of the frame
  // being read (or of the one they start: its header and payload), or all
  // `size` where it does not end within them.
  size_t ToFrameEnd(const uint8_t* data, size_t size) const {
    if (payload_left_ > 0) return static_cast<size_t>(std::min<uint64_t>(payload_left_, size));
    const size_t header_left = sizeof(header_) - header_have_;
    if (size < header_left) return size;
    uint64_t length = 0;
    for (size_t i = 0; i < 3; ++i)
      length = length << 8 | (i < header_have_ ? header_[i] : data[i - header_have_]);
    return static_cast<size_t>(std::min<uint64_t>(header_left + length, size));
  }

 private:
  uint8_t header_[9] = {};
  size_t header_have_ = 0;
  uint64_t payload_left_ = 0;
};

// Premature resets an address may still make: a token bucket refilled at
// `rate` a second, holding at most `rate`.
class ResetBudget {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ResetBudget(double rate) : rate_(rate), tokens_(rate) {}
  // Takes a token at `now`; false when none is left.
  bool Take(Clock::time_point now);
  // Whether it would be full at `now` (nothing taken for a second).
  bool Full(Clock::time_point now) const {
    return at_ == Clock::time_point{} || now - at_ >= std::chrono::seconds(1);
  }

 private:
  const double rate_;
  double tokens_;
  Clock::time_point at_{};
};

class Http2Guard {
 public:
  using Clock = std::chrono::steady_clock;

  // `budget`: the premature resets the client's address may still make,
  // shared by its connections; nullptr: this connection's own.
  explicit Http2Guard(Http2GuardOptions options = {}, std::shared_ptr<ResetBudget> budget = nullptr)
      : options_(options),
        budget_(budget ? std::move(budget)
                       : std::make_shared<ResetBudget>(options.premature_reset_rate)) {}

  // The next bytes the client sent (the connection preface first). Returns
  // the verdict so far; once abusive it stays so. Bytes after a wrong
  // preface are not read (not_http2()).
  Http2Verdict FromClient(const uint8_t* data, size_t size, Clock::time_point now);
  // The next bytes the server sent.
  void FromServer(const uint8_t* data, size_t size);

  // The client sent the whole connection preface, or something else.
  bool preface_received() const { return preface_left_ == 0; }
  size_t preface_left() const { return preface_left_; }
  // Of the client's next `size` bytes at `data`, those up to the end of the
  // preface, or of the frame they are in (Http2FrameReader::ToFrameEnd).
  size_t ClientToFrameEnd(const uint8_t* data, size_t size) const {
    if (preface_left_ > 0) return std::min(preface_left_, size);
    return client_.ToFrameEnd(data, size);
  }
  bool not_http2() const { return not_http2_; }
  // The server's bytes seen so far end between frames, and not inside a
  // header block (HEADERS without END_HEADERS, then its CONTINUATIONs, which
  // nothing may come between): a frame of our own (GOAWAY) can follow them.
  bool server_at_frame_boundary() const { return server_.at_boundary() && !server_in_block_; }
  // A stream the connection guard answered itself (call_gate.h): gRPC never
  // saw it; in the rapid-reset ratio it counts at most as much as the
  // streams that reached gRPC (FromClient).
  void Ended(uint32_t stream) {
    if (Close(stream)) ++answered_;
  }
  // Frames the server sent (its first is its SETTINGS, the server preface).
  int64_t server_frames() const { return server_frames_; }
  uint32_t last_client_stream() const { return last_client_stream_; }
  int64_t streams() const { return streams_; }
  int64_t premature_resets() const { return premature_resets_; }
  size_t open_streams() const { return open_.size(); }
  // Open streams whose client has not ended its side (its request still
  // arriving, or a client stream).
  int64_t incomplete_requests() const { return incomplete_; }
  bool too_many_incomplete_requests() const {
    return incomplete_ > options_.max_incomplete_requests;
  }
  // The server has sent a GOAWAY: it takes no new stream on this
  // connection.
  bool server_goaway() const { return server_goaway_; }

 private:
  void OnClientFrame(const Http2Frame& frame, Clock::time_point now);
  void OnServerFrame(const Http2Frame& frame);
  // Forgets an open stream; false when it was not open.
  bool Close(uint32_t stream);

  struct OpenStream {
    Clock::time_point opened;
    bool client_ended = false;  // the client's END_STREAM came
  };

  const Http2GuardOptions options_;
  size_t preface_left_ = 24;  // bytes of the client preface still to come
  Http2FrameReader client_;
  Http2FrameReader server_;
  bool not_http2_ = false;
  // Streams the client opened that neither side has ended (an end of the
  // server's ends it: gRPC is done with it).
  std::unordered_map<uint32_t, OpenStream> open_;
  int64_t incomplete_ = 0;  // those without the client's END_STREAM
  uint32_t last_client_stream_ = 0;
  int64_t streams_ = 0;
  int64_t premature_resets_ = 0;
  int64_t answered_ = 0;  // streams Ended() by the connection guard
  const std::shared_ptr<ResetBudget> budget_;
  int64_t server_frames_ = 0;
  bool server_goaway_ = false;
  bool server_in_block_ = false;  // inside one of the server's header blocks
  // Bytes and frames of the client's header block in progress (bytes -1:
  // none).
  int64_t header_block_ = -1;
  int64_t header_block_frames_ = 0;
  Http2Verdict verdict_ = Http2Verdict::kOk;
};

}  // namespace encoderd::server
