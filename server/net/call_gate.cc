#include "server/net/call_gate.h"

#include <algorithm>
#include <utility>

namespace encoderd::server {
namespace {

// Streams answered here whose late frames are still recognised.
constexpr size_t kRemembered = 1024;
// A header block larger than this is not decoded (gRPC's own metadata limit
// is 8 KiB; decoding costs the guard's one thread ~1 us per 64 bytes).
constexpr size_t kMaxDecodedBlock = 16 * 1024;
// SETTINGS_HEADER_TABLE_SIZE (RFC 9113, 6.5.2).
constexpr uint16_t kSettingsHeaderTableSize = 0x1;
// The largest frame payload every HTTP/2 peer accepts (SETTINGS_MAX_FRAME_SIZE
// starts there and cannot go lower).
constexpr size_t kMaxFramePayload = 16384;

// The gRPC status code on the wire (grpc/status.h; stable by protocol).
int WireCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kCancelled:
      return 1;
    case StatusCode::kInvalidArgument:
      return 3;
    case StatusCode::kDeadlineExceeded:
      return 4;
    case StatusCode::kNotFound:
      return 5;
    case StatusCode::kResourceExhausted:
      return 8;
    case StatusCode::kFailedPrecondition:
      return 9;
    case StatusCode::kUnimplemented:
      return 12;
    case StatusCode::kInternal:
      return 13;
    case StatusCode::kUnavailable:
      return 14;
    case StatusCode::kDataLoss:
      return 15;
    case StatusCode::kUnauthenticated:
      return 16;
  }
  return 2;  // UNKNOWN
}

// grpc-message is percent-encoded outside printable ASCII (and '%' itself).
std::string PercentEncode(std::string_view message) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : message) {
    if (ch >= 0x20 && ch <= 0x7e && ch != '%') {
      out.push_back(static_cast<char>(ch));
    } else {
      out.push_back('%');
      out.push_back(kHex[ch >> 4]);
      out.push_back(kHex[ch & 15]);
    }
  }
  return out;
}

// `block` as HEADERS (with `flags`, END_HEADERS on the last frame) and as
// many CONTINUATION frames as the payload limit needs.
void AppendHeaderFrames(uint32_t stream, uint8_t flags, std::string_view block, std::string* out) {
  size_t at = 0;
  bool first = true;
  do {
    const size_t n = std::min(kMaxFramePayload, block.size() - at);
    const bool last = at + n == block.size();
    const uint8_t type = first ? kHttp2Headers : kHttp2Continuation;
    const uint8_t f = static_cast<uint8_t>((first ? flags : 0) | (last ? kHttp2EndHeaders : 0));
    *out += Http2FrameHeaderBytes(type, f, stream, n);
    out->append(block.substr(at, n));
    at += n;
    first = false;
  } while (at < block.size());
}

}  // namespace

std::optional<std::chrono::nanoseconds> ParseGrpcTimeout(std::string_view value) {
  if (value.size() < 2 || value.size() > 9) return std::nullopt;
  int64_t amount = 0;
  for (char ch : value.substr(0, value.size() - 1)) {
    if (ch < '0' || ch > '9') return std::nullopt;
    amount = amount * 10 + (ch - '0');
  }
  int64_t unit_ns = 0;
  switch (value.back()) {
    case 'H':
      unit_ns = int64_t{3600} * 1000000000;
      break;
    case 'M':
      unit_ns = int64_t{60} * 1000000000;
      break;
    case 'S':
      unit_ns = 1000000000;
      break;
    case 'm':
      unit_ns = 1000000;
      break;
    case 'u':
      unit_ns = 1000;
      break;
    case 'n':
      unit_ns = 1;
      break;
    default:
      return std::nullopt;
  }
  using std::chrono::nanoseconds;
  if (amount > nanoseconds::max().count() / unit_ns) return nanoseconds::max();
  return nanoseconds(amount * unit_ns);
}

std::string TrailersOnlyResponse(uint32_t stream, const Status& status, uint64_t request_id) {
  std::string block;
  block.push_back(static_cast<char>(0x88));  // ":status: 200", static table entry 8
  HpackAppendLiteral("content-type", "application/grpc", &block);
  HpackAppendLiteral("grpc-status", std::to_string(WireCode(status.code())), &block);
  if (!status.message().empty())
    HpackAppendLiteral("grpc-message", PercentEncode(status.message()), &block);
  if (request_id != 0) HpackAppendLiteral("x-request-id", std::to_string(request_id), &block);
  std::string out;
  AppendHeaderFrames(stream, kHttp2EndStream, block, &out);
  return out;
}

void CallGate::FromClient(const uint8_t* data, size_t size, std::string* to_server) {
  client_.Read(
      data, size, [&](const Http2Frame& f) { OnClientHeader(f, to_server); },
      [&](const uint8_t* p, size_t n) { OnClientPayload(p, n, to_server); });
}

void CallGate::OnClientHeader(const Http2Frame& f, std::string* to_server) {
  frame_ = f;
  frame_left_ = f.length;
  const std::string header = Http2FrameHeaderBytes(f.type, f.flags, f.stream, f.length);
  if (off_ || broken_) {
    fate_ = Fate::kPass;
    to_server->append(header);
    return;
  }
  if (in_block_) {
    if (f.type == kHttp2Continuation && f.stream == block_start_.stream) {
      fate_ = Fate::kHeaderBlock;
      block_frames_ += header;
      if (f.length == 0) OnClientPayload(nullptr, 0, to_server);
      return;
    }
    // Anything else inside a header block is the client's protocol error
    // (gRPC closes the connection): what was held goes on as it came.
    if (GiveUp()) to_server->append(block_frames_);
    in_block_ = false;
    fate_ = Fate::kPass;
    to_server->append(header);
    return;
  }
  if (f.type == kHttp2Headers) {
    in_block_ = true;
    block_start_ = f;
    block_frames_ = header;
    block_.clear();
    payload_.clear();
    fate_ = Fate::kHeaderBlock;
    if (f.length == 0) OnClientPayload(nullptr, 0, to_server);
    return;
  }
  if (f.type == kHttp2RstStream) {
    forwarded_work_.erase(f.stream);
    EndIncomplete(f.stream);
  }
  if (f.stream != 0 && Dropped(f.stream)) {
    fate_ = Fate::kDrop;
    if (f.type == kHttp2Data) window_credit_ += f.length;
    if ((f.type == kHttp2Data && (f.flags & kHttp2EndStream)) || f.type == kHttp2RstStream)
      Forget(f.stream);
    return;
  }
  fate_ = Fate::kPass;
  to_server->append(header);
  if (f.type == kHttp2Data && (f.flags & kHttp2EndStream)) EndIncomplete(f.stream);
  if (f.type == kHttp2Settings && !(f.flags & 0x1) && f.stream == 0) {  // not an ACK
    settings_.clear();
    if (f.length == 0) OnClientSettings();
  }
}

void CallGate::OnClientSettings() {
  for (size_t at = 0; at + 6 <= settings_.size(); at += 6) {
    const auto byte = [&](size_t i) { return static_cast<uint8_t>(settings_[at + i]); };
    const uint16_t id = static_cast<uint16_t>(byte(0) << 8 | byte(1));
    const uint32_t value =
        uint32_t{byte(2)} << 24 | uint32_t{byte(3)} << 16 | uint32_t{byte(4)} << 8 | byte(5);
    // The client's decoder then expects a table size update first in the
    // next block it gets, which the gate's answers do not carry.
    if (id == kSettingsHeaderTableSize && value != 4096) GiveUp();
  }
  settings_.clear();
}

void CallGate::OnClientPayload(const uint8_t* data, size_t size, std::string* to_server) {
  frame_left_ -= size;
  const char* bytes = reinterpret_cast<const char*>(data);
  if (fate_ == Fate::kPass) {
    if (size > 0) to_server->append(bytes, size);
    if (frame_.type == kHttp2Settings && frame_.stream == 0 && !(frame_.flags & 0x1) && !off_) {
      if (settings_.size() < 1024) settings_.append(bytes, size);
      if (frame_left_ == 0) OnClientSettings();
    }
    return;
  }
  if (fate_ == Fate::kDrop) return;
  // A frame of the header block; one too large to decode is not.
  if (block_frames_.size() + size > kMaxDecodedBlock + 1024) {
    if (!GiveUp()) return;
    fate_ = Fate::kPass;
    in_block_ = false;
    to_server->append(block_frames_);
    block_frames_.clear();
    block_.clear();
    payload_.clear();
    if (size > 0) to_server->append(bytes, size);
    return;
  }
  if (size > 0) {
    block_frames_.append(bytes, size);
    (frame_.type == kHttp2Headers ? payload_ : block_).append(bytes, size);
  }
  if (frame_left_ > 0) return;
  if (frame_.type == kHttp2Headers) {
    // The fragment: the payload less the pad length, the priority fields
    // and the padding.
    size_t start = 0, pad = 0;
    bool malformed = false;
    if (frame_.flags & kHttp2Padded) {
      malformed = payload_.empty();
      pad = malformed ? 0 : static_cast<uint8_t>(payload_[0]);
      start = 1;
    }
    if (frame_.flags & kHttp2PriorityFlag) start += 5;
    if (malformed || start + pad > payload_.size()) {
      block_ = std::string(1, '\x80');  // fails to decode (index 0)
    } else {
      block_.append(payload_, start, payload_.size() - start - pad);
    }
    payload_.clear();
  }
  if (!(frame_.flags & kHttp2EndHeaders)) return;
  in_block_ = false;
  OnHeaderBlock(to_server);
  // A large block's buffers do not stay with the connection.
  if (block_frames_.capacity() > 4096) {
    block_frames_ = std::string();
    block_ = std::string();
    payload_ = std::string();
  }
}

void CallGate::OnHeaderBlock(std::string* to_server) {
  const uint32_t stream = block_start_.stream;
  const bool end_stream = block_start_.flags & kHttp2EndStream;
  const bool decoded =
      decoder_.Decode(reinterpret_cast<const uint8_t*>(block_.data()), block_.size(), &fields_);
  if (!decoded) {
    // gRPC's table is in step: it decodes (and answers) this block.
    if (GiveUp()) to_server->append(block_frames_);
    return;
  }
  const bool is_new = (stream & 1) && stream > last_stream_;
  if (is_new) last_stream_ = stream;
  if (!is_new && Dropped(stream)) {
    // Another block on a stream gRPC never saw (trailers of an answered
    // call, or one reusing its id): gRPC would take it for a new call.
    if (end_stream) Forget(stream);
    Keep();
    return;
  }
  // A new call whose request is still to come, and that counts as such.
  bool counted = false;
  if (is_new && !server_goaway_) {
    CallHead head;
    head.peer = peer_;
    head.forwarded_open = static_cast<int64_t>(forwarded_work_.size());
    for (const HeaderField& f : fields_) {
      if (f.name == ":path") {
        head.path = f.value;
      } else if (f.name == "authorization") {
        head.authorization = f.value;
      } else if (f.name == "grpc-timeout") {
        head.timeout = ParseGrpcTimeout(f.value);
      }
    }
    counted = !end_stream && Counted(head.path);
    CallVerdict verdict;
    if (counted) verdict.status = IncompleteRefusal();
    const bool for_limits = !verdict.status.ok();
    if (!for_limits && screen_ && *screen_) verdict = (*screen_)(head);
    if (!verdict.status.ok()) {
      pending_ += TrailersOnlyResponse(stream, verdict.status, verdict.request_id);
      ++calls_answered_;
      if (for_limits) {
        ++refused_incomplete_;
        ++incomplete_->refused;
      }
      answered_.push_back(stream);
      Keep();
      if (!end_stream) Remember(stream);
      return;
    }
    if (verdict.forwarded_work) forwarded_work_.insert(stream);
  }
  if (is_new) {
    last_forwarded_ = stream;
    if (counted && incomplete_streams_.insert(stream).second) ++incomplete_->open;
  } else if (end_stream) {
    EndIncomplete(stream);  // the client's trailers end its side
  }
  if (!reencoding_) {
    to_server->append(block_frames_);
    return;
  }
  std::string block;
  for (const HeaderField& f : fields_) HpackAppendLiteral(f.name, f.value, &block);
  AppendHeaderFrames(stream, end_stream ? kHttp2EndStream : 0, block, to_server);
}

bool CallGate::Counted(std::string_view path) const {
  if (!incomplete_) return false;
  const std::vector<std::string>& uncounted = incomplete_->limits.uncounted_paths;
  return std::find(uncounted.begin(), uncounted.end(), path) == uncounted.end();
}

Status CallGate::IncompleteRefusal() const {
  if (!incomplete_) return Status::Ok();
  const IncompleteRequestLimits& limits = incomplete_->limits;
  const int64_t mine = incomplete_requests();
  if (mine >= limits.per_connection)
    return ResourceExhausted("this connection holds " + std::to_string(mine) +
                             " calls whose requests have not fully arrived (at most " +
                             std::to_string(limits.per_connection) +
                             " at once); retry once some have");
  if (incomplete_->open >= limits.total && mine >= limits.fair_share)
    return ResourceExhausted("the server holds " + std::to_string(incomplete_->open) +
                             " calls whose requests have not fully arrived, " +
                             std::to_string(mine) + " of them on this connection; retry later");
  return Status::Ok();
}

bool CallGate::GiveUp() {
  // Once a stream was answered, gRPC could take a later HEADERS on its id
  // for a new call the guard's accounting never saw; once a table change was
  // kept from it, raw blocks would decode wrongly. Then only closing is safe.
  // Either way the gate screens no more calls.
  forwarded_work_.clear();
  ForgetIncomplete();
  if (reencoding_ || calls_answered_ > 0) {
    broken_ = true;
    return false;
  }
  off_ = true;
  return true;
}

void CallGate::Keep() {
  if (decoder_.changed_table()) reencoding_ = true;
}

void CallGate::Remember(uint32_t stream) {
  answered_streams_.insert(stream);
  answered_order_.push_back(stream);
  while (answered_order_.size() > kRemembered) {
    answered_streams_.erase(answered_order_.front());
    answered_order_.pop_front();
  }
}

void CallGate::FromServer(const uint8_t* data, size_t size, std::string* to_client) {
  server_.Read(
      data, size,
      [&](const Http2Frame& f) {
        ++server_frames_;
        if (f.type == kHttp2GoAway) server_goaway_ = true;
        // gRPC answers (its HEADERS: the response's or trailers only; they
        // are not flow-controlled) or gives the call up.
        if (f.type == kHttp2Headers || f.type == kHttp2RstStream) forwarded_work_.erase(f.stream);
        // gRPC ended the stream (its trailers, or a reset): done with it.
        if (((f.type == kHttp2Headers || f.type == kHttp2Data) && (f.flags & kHttp2EndStream)) ||
            f.type == kHttp2RstStream)
          EndIncomplete(f.stream);
        if (f.type == kHttp2Headers) server_in_block_ = !(f.flags & kHttp2EndHeaders);
        if (f.type == kHttp2Continuation && (f.flags & kHttp2EndHeaders)) server_in_block_ = false;
        *to_client += Http2FrameHeaderBytes(f.type, f.flags, f.stream, f.length);
        if (f.length == 0) Flush(to_client);
      },
      [&](const uint8_t* p, size_t n) {
        to_client->append(reinterpret_cast<const char*>(p), n);
        Flush(to_client);
      });
}

void CallGate::Flush(std::string* to_client) {
  if ((pending_.empty() && window_credit_ == 0) || server_frames_ == 0 || !server_.at_boundary() ||
      server_in_block_)
    return;
  to_client->append(pending_);
  pending_.clear();
  while (window_credit_ > 0) {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(window_credit_, 0x7fffffff));
    *to_client += Http2FrameHeaderBytes(kHttp2WindowUpdate, 0, 0, 4);
    for (int i = 0; i < 4; ++i) to_client->push_back(static_cast<char>(n >> (24 - 8 * i)));
    window_credit_ -= n;
  }
}

}  // namespace encoderd::server
