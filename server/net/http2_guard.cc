#include "server/net/http2_guard.h"

#include <algorithm>

namespace encoderd::server {
namespace {

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";  // 24 bytes
constexpr uint8_t kData = 0x0, kHeaders = 0x1, kRstStream = 0x3, kGoAway = 0x7, kContinuation = 0x9;
constexpr uint8_t kEndStream = 0x1, kEndHeaders = 0x4;

}  // namespace

bool ResetBudget::Take(Clock::time_point now) {
  if (at_ != Clock::time_point{}) {
    const double seconds = std::chrono::duration<double>(now - at_).count();
    tokens_ = std::min(rate_, tokens_ + std::max(0.0, seconds) * rate_);
  }
  at_ = std::max(at_, now);
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

const char* Http2VerdictName(Http2Verdict verdict) {
  switch (verdict) {
    case Http2Verdict::kOk:
      return "";
    case Http2Verdict::kRapidReset:
      return "rapid_reset";
    case Http2Verdict::kTooManyStreams:
      return "too_many_streams";
    case Http2Verdict::kOversizedHeaders:
      return "oversized_headers";
  }
  return "";
}

std::string GoAwayFrame(uint32_t last_stream_id, uint32_t error_code) {
  std::string f(9 + 8, '\0');
  f[2] = 8;  // payload length
  f[3] = static_cast<char>(kGoAway);
  for (int i = 0; i < 4; ++i) {
    f[9 + i] = static_cast<char>((last_stream_id & 0x7fffffffu) >> (24 - 8 * i));
    f[13 + i] = static_cast<char>(error_code >> (24 - 8 * i));
  }
  return f;
}

template <typename OnFrame>
void Http2Guard::Read(FrameReader* r, const uint8_t* data, size_t size, OnFrame on_frame) {
  while (size > 0) {
    if (r->payload_left > 0) {
      const size_t skip = static_cast<size_t>(std::min<uint64_t>(r->payload_left, size));
      r->payload_left -= skip;
      data += skip;
      size -= skip;
      continue;
    }
    const size_t take = std::min(size, sizeof(r->header) - r->header_have);
    std::copy(data, data + take, r->header + r->header_have);
    r->header_have += take;
    data += take;
    size -= take;
    if (r->header_have < sizeof(r->header)) return;
    r->header_have = 0;
    const uint8_t* h = r->header;
    r->payload_left = (uint64_t{h[0]} << 16) | (uint64_t{h[1]} << 8) | h[2];
    Frame frame;
    frame.length = r->payload_left;
    frame.type = h[3];
    frame.flags = h[4];
    frame.stream =
        ((uint32_t{h[5]} << 24) | (uint32_t{h[6]} << 16) | (uint32_t{h[7]} << 8) | h[8]) &
        0x7fffffffu;
    on_frame(frame);
  }
}

Http2Verdict Http2Guard::FromClient(const uint8_t* data, size_t size, Clock::time_point now) {
  if (not_http2_) return verdict_;
  while (client_.preface_left > 0 && size > 0) {
    const size_t at = sizeof(kPreface) - 1 - client_.preface_left;
    if (static_cast<char>(*data) != kPreface[at]) {
      not_http2_ = true;
      return verdict_;
    }
    --client_.preface_left;
    ++data;
    --size;
  }
  Read(&client_, data, size, [&](const Frame& f) { OnClientFrame(f, now); });
  return verdict_;
}

void Http2Guard::FromServer(const uint8_t* data, size_t size) {
  Read(&server_, data, size, [&](const Frame& f) { OnServerFrame(f); });
}

void Http2Guard::OnClientFrame(const Frame& f, Clock::time_point now) {
  if (f.type == kHeaders || (f.type == kContinuation && header_block_ >= 0)) {
    header_block_ = (f.type == kHeaders ? 0 : header_block_) + static_cast<int64_t>(f.length);
    if (header_block_ > options_.max_header_block_bytes && verdict_ == Http2Verdict::kOk)
      verdict_ = Http2Verdict::kOversizedHeaders;
    if (f.flags & kEndHeaders) header_block_ = -1;
  }
  if (f.type == kHeaders && (f.stream & 1) && f.stream > last_client_stream_) {
    // A new stream: odd, above the last (HEADERS on a known stream are
    // trailers; even ids are the server's, which gRPC refuses).
    last_client_stream_ = f.stream;
    ++streams_;
    open_.emplace(f.stream, now);
    if (static_cast<int64_t>(open_.size()) > options_.max_open_streams &&
        verdict_ == Http2Verdict::kOk) {
      verdict_ = Http2Verdict::kTooManyStreams;
    }
  } else if (f.type == kRstStream) {
    auto it = open_.find(f.stream);
    if (it == open_.end()) return;
    const bool premature = now - it->second < options_.premature_reset_lifetime;
    open_.erase(it);
    if (!premature) return;
    ++premature_resets_;
    const bool too_fast = !budget_->Take(now);
    if (streams_ >= options_.premature_reset_min_streams && 2 * premature_resets_ >= streams_ &&
        too_fast && verdict_ == Http2Verdict::kOk) {
      verdict_ = Http2Verdict::kRapidReset;
    }
  }
}

void Http2Guard::OnServerFrame(const Frame& f) {
  ++server_frames_;
  const bool ends =
      ((f.type == kData || f.type == kHeaders) && (f.flags & kEndStream)) || f.type == kRstStream;
  if (ends && f.stream != 0) open_.erase(f.stream);
}

}  // namespace encoderd::server
