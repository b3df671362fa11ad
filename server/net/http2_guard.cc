#include "server/net/http2_guard.h"

#include <algorithm>

namespace encoderd::server {
namespace {

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";  // 24 bytes
constexpr uint8_t kData = kHttp2Data, kHeaders = kHttp2Headers, kRstStream = kHttp2RstStream,
                  kGoAway = kHttp2GoAway, kContinuation = kHttp2Continuation;
constexpr uint8_t kEndStream = kHttp2EndStream, kEndHeaders = kHttp2EndHeaders;

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
    case Http2Verdict::kIncompleteRequests:
      return "incomplete_requests";
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

std::string Http2FrameHeaderBytes(uint8_t type, uint8_t flags, uint32_t stream, size_t length) {
  std::string h(9, '\0');
  h[0] = static_cast<char>(length >> 16);
  h[1] = static_cast<char>(length >> 8);
  h[2] = static_cast<char>(length);
  h[3] = static_cast<char>(type);
  h[4] = static_cast<char>(flags);
  for (int i = 0; i < 4; ++i) h[5 + i] = static_cast<char>((stream & 0x7fffffffu) >> (24 - 8 * i));
  return h;
}

Http2Verdict Http2Guard::FromClient(const uint8_t* data, size_t size, Clock::time_point now) {
  if (not_http2_) return verdict_;
  while (preface_left_ > 0 && size > 0) {
    const size_t at = sizeof(kPreface) - 1 - preface_left_;
    if (static_cast<char>(*data) != kPreface[at]) {
      not_http2_ = true;
      return verdict_;
    }
    --preface_left_;
    ++data;
    --size;
  }
  client_.Read(
      data, size, [&](const Http2Frame& f) { OnClientFrame(f, now); },
      [](const uint8_t*, size_t) {});
  return verdict_;
}

void Http2Guard::FromServer(const uint8_t* data, size_t size) {
  server_.Read(
      data, size, [&](const Http2Frame& f) { OnServerFrame(f); }, [](const uint8_t*, size_t) {});
}

void Http2Guard::OnClientFrame(const Http2Frame& f, Clock::time_point now) {
  if (f.type == kHeaders || (f.type == kContinuation && header_block_ >= 0)) {
    if (f.type == kHeaders) header_block_ = header_block_frames_ = 0;
    header_block_ += static_cast<int64_t>(f.length);
    ++header_block_frames_;
    if ((header_block_ > options_.max_header_block_bytes ||
         header_block_frames_ > options_.max_header_block_frames) &&
        verdict_ == Http2Verdict::kOk) {
      verdict_ = Http2Verdict::kOversizedHeaders;
    }
    if (f.flags & kEndHeaders) header_block_ = -1;
  }
  if (f.type == kHeaders && (f.stream & 1) && f.stream > last_client_stream_) {
    // A new stream: odd, above the last (HEADERS on a known stream are
    // trailers; even ids are the server's, which gRPC refuses).
    last_client_stream_ = f.stream;
    ++streams_;
    const bool ended = f.flags & kEndStream;
    open_.emplace(f.stream, OpenStream{now, ended});
    if (!ended) ++incomplete_;
    if (static_cast<int64_t>(open_.size()) > options_.max_open_streams &&
        verdict_ == Http2Verdict::kOk) {
      verdict_ = Http2Verdict::kTooManyStreams;
    }
  } else if ((f.type == kData || f.type == kHeaders) && (f.flags & kEndStream)) {
    auto it = open_.find(f.stream);
    if (it != open_.end() && !it->second.client_ended) {
      it->second.client_ended = true;
      --incomplete_;
    }
  } else if (f.type == kRstStream) {
    auto it = open_.find(f.stream);
    if (it == open_.end()) return;
    const bool premature = now - it->second.opened < options_.premature_reset_lifetime;
    Close(f.stream);
    if (!premature) return;
    ++premature_resets_;
    const bool too_fast = !budget_->Take(now);
    // Streams the guard answered itself cost gRPC nothing: they count at
    // most as many as those that reached it, so that neither cheap refused
    // calls hide an attack (half of what reaches gRPC reset, the rest
    // refused) nor a client whose many refused calls came with a few that
    // expired looks like one.
    const int64_t reached_grpc = streams_ - answered_;
    const int64_t weighed = reached_grpc + std::min(answered_, reached_grpc);
    if (reached_grpc >= options_.premature_reset_min_streams && 2 * premature_resets_ >= weighed &&
        too_fast && verdict_ == Http2Verdict::kOk) {
      verdict_ = Http2Verdict::kRapidReset;
    }
  }
}

void Http2Guard::OnServerFrame(const Http2Frame& f) {
  ++server_frames_;
  if (f.type == kHttp2GoAway) server_goaway_ = true;
  if (f.type == kHeaders) server_in_block_ = !(f.flags & kEndHeaders);
  if (f.type == kContinuation && (f.flags & kEndHeaders)) server_in_block_ = false;
  const bool ends =
      ((f.type == kData || f.type == kHeaders) && (f.flags & kEndStream)) || f.type == kRstStream;
  if (ends && f.stream != 0) Close(f.stream);
}

bool Http2Guard::Close(uint32_t stream) {
  auto it = open_.find(stream);
  if (it == open_.end()) return false;
  if (!it->second.client_ended) --incomplete_;
  open_.erase(it);
  return true;
}

}  // namespace encoderd::server
