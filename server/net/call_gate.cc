#include "server/net/call_gate.h"

#include <algorithm>
#include <utility>

namespace encoderd::server {
namespace {

// Streams answered here whose late frames are still recognised.
constexpr size_t kRemembered = 4096;
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
  using std::chrono::nanoseconds;
  switch (value.back()) {
    case 'H':
      return std::chrono::duration_cast<nanoseconds>(std::chrono::hours(amount));
    case 'M':
      return std::chrono::duration_cast<nanoseconds>(std::chrono::minutes(amount));
    case 'S':
      return std::chrono::duration_cast<nanoseconds>(std::chrono::seconds(amount));
    case 'm':
      return std::chrono::duration_cast<nanoseconds>(std::chrono::milliseconds(amount));
    case 'u':
      return std::chrono::duration_cast<nanoseconds>(std::chrono::microseconds(amount));
    case 'n':
      return nanoseconds(amount);
  }
  return std::nullopt;
}

std::string TrailersOnlyResponse(uint32_t stream, const Status& status) {
  std::string block;
  block.push_back(static_cast<char>(0x88));  // ":status: 200", static table entry 8
  HpackAppendLiteral("content-type", "application/grpc", &block);
  HpackAppendLiteral("grpc-status", std::to_string(WireCode(status.code())), &block);
  if (!status.message().empty())
    HpackAppendLiteral("grpc-message", PercentEncode(status.message()), &block);
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
    if (reencoding_) {
      broken_ = true;
    } else {
      off_ = true;
      to_server->append(block_frames_);
    }
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
  if (f.stream != 0 && answered_streams_.count(f.stream) > 0) {
    fate_ = Fate::kDrop;
    if (f.type == kHttp2Data) window_credit_ += f.length;
    if ((f.type == kHttp2Data && (f.flags & kHttp2EndStream)) || f.type == kHttp2RstStream)
      Forget(f.stream);
    return;
  }
  fate_ = Fate::kPass;
  to_server->append(header);
}

void CallGate::OnClientPayload(const uint8_t* data, size_t size, std::string* to_server) {
  frame_left_ -= size;
  const char* bytes = reinterpret_cast<const char*>(data);
  if (fate_ == Fate::kPass) {
    if (size > 0) to_server->append(bytes, size);
    return;
  }
  if (fate_ == Fate::kDrop) return;
  // A frame of the header block.
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
}

void CallGate::OnHeaderBlock(std::string* to_server) {
  const uint32_t stream = block_start_.stream;
  const bool end_stream = block_start_.flags & kHttp2EndStream;
  if (!decoder_.Decode(reinterpret_cast<const uint8_t*>(block_.data()), block_.size(), &fields_)) {
    if (reencoding_) {
      broken_ = true;
    } else {
      off_ = true;  // gRPC's table is in step: it decodes (and answers) this block
      to_server->append(block_frames_);
    }
    return;
  }
  const bool is_new = (stream & 1) && stream > last_stream_;
  if (is_new) last_stream_ = stream;
  if (answered_streams_.count(stream) > 0) {  // trailers of a call answered here
    if (end_stream) Forget(stream);
    return;
  }
  if (is_new && screen_ && *screen_) {
    CallHead head;
    head.peer = peer_;
    for (const HeaderField& f : fields_) {
      if (f.name == ":path") {
        head.path = f.value;
      } else if (f.name == "authorization") {
        head.authorization = f.value;
      } else if (f.name == "grpc-timeout") {
        head.timeout = ParseGrpcTimeout(f.value);
      }
    }
    const Status verdict = (*screen_)(head);
    if (!verdict.ok()) {
      pending_ += TrailersOnlyResponse(stream, verdict);
      ++calls_answered_;
      answered_.push_back(stream);
      if (decoder_.changed_table()) reencoding_ = true;
      if (!end_stream) {
        answered_streams_.insert(stream);
        answered_order_.push_back(stream);
        if (answered_order_.size() > kRemembered) Forget(answered_order_.front());
      }
      return;
    }
  }
  if (!reencoding_) {
    to_server->append(block_frames_);
    return;
  }
  std::string block;
  for (const HeaderField& f : fields_) HpackAppendLiteral(f.name, f.value, &block);
  AppendHeaderFrames(stream, end_stream ? kHttp2EndStream : 0, block, to_server);
}

void CallGate::Forget(uint32_t stream) {
  if (answered_streams_.erase(stream) == 0) return;
  auto it = std::find(answered_order_.begin(), answered_order_.end(), stream);
  if (it != answered_order_.end()) answered_order_.erase(it);
}

void CallGate::FromServer(const uint8_t* data, size_t size, std::string* to_client) {
  server_.Read(
      data, size,
      [&](const Http2Frame& f) {
        ++server_frames_;
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
