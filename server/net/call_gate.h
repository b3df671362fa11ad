// Answers, in the gRPC port's guard, the calls the server would refuse at
// once, so that a refusal under overload costs the daemon a few microseconds
// of the guard's thread instead of a call through gRPC (~100 us of CPU on a
// 2-vCPU VM: parsing, a call object, thread hand-offs, the write; measured in
// docs/reliability.md). One CallGate per plaintext connection: it decodes the
// header block of each new stream (HPACK, keeping the client's dynamic
// table), asks the screen whether the call would be refused, and if so
// answers it with a trailers-only response of its own and keeps the stream's
// frames from gRPC; every other byte goes through.
//
// Keeping a header block from gRPC would leave gRPC's copy of the client's
// HPACK table behind the client's when that block inserted into it: from the
// first such block on, the gate re-encodes every header block it passes on
// as literals that change no table (gRPC's table then stays as it was and
// is never referred to). The client's DATA on a stream answered here is
// dropped and its bytes given back to the client's connection window with
// WINDOW_UPDATE, as gRPC would have done. The gate's own frames go to the
// client between gRPC's frames, never inside one of gRPC's header blocks.
//
// A header block the gate cannot decode (malformed, over 16 KiB, or beyond
// the decoder's limits) turns it off for the connection while it has kept
// nothing from gRPC (everything passes through, gRPC answers the block);
// after that, the connection is broken() and must be closed. So does a client that
// sets SETTINGS_HEADER_TABLE_SIZE (the gate's answers carry no table size
// update) and gRPC sending GOAWAY (no stream past it may be answered).
//
// gRPC never sees a stream the gate answered: any later frame of it, and any
// frame of a stream above the last one gRPC saw that does not open a new
// stream, is dropped (gRPC would take a HEADERS there for a new call that the
// guard's rapid-reset accounting never saw).
//
// The gate also bounds the calls whose request has not fully arrived: streams
// passed to gRPC whose client has not ended its side (an EmbedStream's until
// the client ends it). gRPC holds ~12 KB for each from its HEADERS on, and
// nothing else bounds them but connections x streams (4,096 x 1,000 at the
// defaults: ~50 GB). A new call (one whose HEADERS do not end its request) is
// answered RESOURCE_EXHAUSTED while its connection holds `per_connection`
// such calls, or while all the guard's connections together hold `total` and
// its own holds `fair_share` or more (so that a few connections holding the
// total lock out no other client). A client's unary call normally ends its
// request in the same packet as its HEADERS and never counts for long. Calls
// of `uncounted_paths` are not counted: their handler starts at HEADERS and
// holds a concurrency slot, which bounds them (EmbedStream). Nor are calls
// opened after gRPC's GOAWAY (gRPC ignores them, or the drain ends them),
// which the gate never answers.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/status.h"
#include "server/net/hpack.h"
#include "server/net/http2_guard.h"

namespace encoderd::server {

// What the gate knows of a new call before gRPC sees it.
struct CallHead {
  std::string_view path;           // ":path", e.g. "/encoderd.v1.Encoder/Embed"
  std::string_view authorization;  // the "authorization" header, "" without one
  // From "grpc-timeout"; none without one (or an unreadable one).
  std::optional<std::chrono::nanoseconds> timeout;
  // The connection as gRPC names it (its peer string: "fd:17").
  std::string_view peer;
  // Calls of this connection the screen let through to gRPC
  // (CallVerdict::forwarded_work) that gRPC has not started answering yet (no
  // HEADERS of its own on the stream) and that neither side reset: calls gRPC
  // is still reading, dispatching or computing. Per connection, so that a
  // client that stops reading its answers holds up no one else's calls.
  int64_t forwarded_open = 0;
};

// The screen's verdict: OK, the call goes on to gRPC; otherwise the gate
// answers it with `status`, and `request_id` (when not 0) as x-request-id.
struct CallVerdict {
  Status status;
  uint64_t request_id = 0;
  // OK for a call the screen admitted as work (not one it leaves to gRPC to
  // judge): counted in CallHead::forwarded_open until gRPC answers it.
  bool forwarded_work = false;
};

// Called on the guard's thread for every new stream: it must be quick and
// must not block.
using CallScreen = std::function<CallVerdict(const CallHead&)>;

struct IncompleteRequestLimits {
  int64_t per_connection = 256;
  int64_t total = 16384;  // ~200 MB of gRPC's memory
  int64_t fair_share = 4;
  std::vector<std::string> uncounted_paths;
};

// Shared by the gates of one guard (all on its thread).
struct IncompleteRequests {
  IncompleteRequestLimits limits;
  int64_t open = 0;     // calls whose request has not fully arrived, in all
  int64_t refused = 0;  // calls answered for the limits, ever
};

// The grpc-timeout header's value ("1*8DIGIT unit", gRPC's PROTOCOL-HTTP2.md),
// saturated at nanoseconds::max() (gRPC reads an overflowing one as no
// deadline); none when malformed.
std::optional<std::chrono::nanoseconds> ParseGrpcTimeout(std::string_view value);

// A trailers-only gRPC response (HEADERS with END_STREAM) on `stream`, with
// x-request-id when `request_id` is not 0.
std::string TrailersOnlyResponse(uint32_t stream, const Status& status, uint64_t request_id = 0);

class CallGate {
 public:
  // `screen` and `incomplete` outlive the gate; either may be null (no
  // screen; no bound on calls whose request has not fully arrived).
  explicit CallGate(const CallScreen* screen, IncompleteRequests* incomplete = nullptr)
      : screen_(screen), incomplete_(incomplete) {}
  ~CallGate() { ForgetIncomplete(); }
  CallGate(const CallGate&) = delete;
  CallGate& operator=(const CallGate&) = delete;

  // The client's bytes after the 24-byte connection preface; what gRPC is to
  // get is appended to `to_server`.
  void FromClient(const uint8_t* data, size_t size, std::string* to_server);
  // gRPC's bytes, appended to `to_client` with the gate's own frames put in
  // at the first frame boundary outside a header block.
  void FromServer(const uint8_t* data, size_t size, std::string* to_client);
  // Appends the gate's waiting frames to `to_client` when gRPC's bytes so far
  // end at such a boundary (and gRPC has sent its SETTINGS, which must come
  // first).
  void Flush(std::string* to_client);

  // Streams answered here since the last call (the Http2Guard counts them
  // as never opened).
  std::vector<uint32_t> TakeAnswered() { return std::move(answered_); }
  int64_t calls_answered() const { return calls_answered_; }
  // Of the streams answered since the last call, those answered for the
  // bounds on incomplete requests (the rest the screen refused).
  int64_t TakeRefusedIncomplete() { return std::exchange(refused_incomplete_, 0); }
  // This connection's calls passed to gRPC whose request has not fully
  // arrived.
  int64_t incomplete_requests() const { return static_cast<int64_t>(incomplete_streams_.size()); }
  // gRPC's end of the connection is gone (and with it every call): nothing
  // of it counts any more.
  void ServerGone() { ForgetIncomplete(); }
  // The connection's name in gRPC, passed to the screen.
  void set_peer(std::string peer) { peer_ = std::move(peer); }
  bool off() const { return off_; }
  bool broken() const { return broken_; }
  bool reencoding() const { return reencoding_; }
  // Bytes of the gate's own frames waiting for a boundary in gRPC's bytes
  // (the guard stops reading the client while these and its buffer to the
  // client are full).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  void OnClientHeader(const Http2Frame& frame, std::string* to_server);
  void OnClientPayload(const uint8_t* data, size_t size, std::string* to_server);
  // The client's header block is whole (its frames in block_frames_).
  void OnHeaderBlock(std::string* to_server);
  // A header block kept from gRPC: gRPC's table falls behind if it changed
  // the client's.
  void Keep();
  void Remember(uint32_t stream);
  void Forget(uint32_t stream) { answered_streams_.erase(stream); }
  bool Dropped(uint32_t stream) const {
    return answered_streams_.count(stream) > 0 || ((stream & 1) && stream > last_forwarded_);
  }
  void OnClientSettings();
  // Whether a new call to `path` whose request is still to come counts.
  bool Counted(std::string_view path) const;
  // Why such a call is refused (OK: it is not).
  Status IncompleteRefusal() const;
  // The client ended its side of `stream`, or either side ended the stream.
  void EndIncomplete(uint32_t stream) {
    if (incomplete_streams_.erase(stream) > 0 && incomplete_) --incomplete_->open;
  }
  void ForgetIncomplete() {
    if (incomplete_) incomplete_->open -= static_cast<int64_t>(incomplete_streams_.size());
    incomplete_streams_.clear();
  }
  // The gate cannot follow the connection: off (true: the caller passes on
  // what it held) while nothing was kept from gRPC, else broken.
  bool GiveUp();

  const CallScreen* const screen_;
  IncompleteRequests* const incomplete_;
  // Streams passed to gRPC whose client has not ended its side.
  std::unordered_set<uint32_t> incomplete_streams_;
  int64_t refused_incomplete_ = 0;  // since TakeRefusedIncomplete
  // Streams counted in CallHead::forwarded_open.
  std::unordered_set<uint32_t> forwarded_work_;
  std::string peer_;
  Http2FrameReader client_;
  Http2FrameReader server_;
  HpackDecoder decoder_;
  std::vector<HeaderField> fields_;

  // What becomes of the client frame being read.
  enum class Fate { kPass, kDrop, kHeaderBlock };
  Fate fate_ = Fate::kPass;
  Http2Frame frame_;
  uint64_t frame_left_ = 0;  // its payload bytes still to come
  // The header block being read: its frames as they came, and its fragment
  // (payloads less padding and priority).
  std::string block_frames_;
  std::string block_;
  Http2Frame block_start_;  // its HEADERS frame
  std::string payload_;     // the current HEADERS frame's payload so far
  bool in_block_ = false;
  std::string settings_;  // the client's SETTINGS frame being read

  uint32_t last_stream_ = 0;     // the highest stream the client opened
  uint32_t last_forwarded_ = 0;  // the highest stream gRPC saw opened
  // Streams answered here whose client frames may still come, oldest
  // first (at most kRemembered; ids whose stream ended stay in the deque
  // until they reach its front).
  std::unordered_set<uint32_t> answered_streams_;
  std::deque<uint32_t> answered_order_;
  std::vector<uint32_t> answered_;
  int64_t calls_answered_ = 0;

  // The gate's frames for the client, and connection window to give back.
  std::string pending_;
  uint64_t window_credit_ = 0;
  bool server_in_block_ = false;  // gRPC is between HEADERS and END_HEADERS
  int64_t server_frames_ = 0;
  bool server_goaway_ = false;  // gRPC sent GOAWAY: no more answers

  bool off_ = false;
  bool broken_ = false;
  bool reencoding_ = false;
};

}  // namespace encoderd::server
