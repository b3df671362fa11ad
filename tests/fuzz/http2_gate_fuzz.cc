// libFuzzer target: arbitrary client bytes through the HTTP/2 guard's call
// gate (server/net/call_gate.h), which decodes every header block (HPACK)
// and answers some calls itself, in chunks of a size the input picks, with
// gRPC's SETTINGS and frames interleaved.
//
// Input: byte 0 is the pattern of which new streams the screen refuses (bit
// k % 8 for the k-th), byte 1 the chunk size, the rest the client's bytes
// after the connection preface.
// Invariants (trap on violation), unless the gate turned itself off or
// broke (an undecodable block): what reaches gRPC is whole frames; no
// stream the gate answered reaches gRPC; and gRPC's own HPACK decoder, fed
// only the header blocks that reached it, decodes each stream's first block
// to exactly the fields the client's block holds (decoded from the client's
// bytes independently), i.e. gRPC's table is never out of step. Always: the
// screen is told a count of forwarded work (CallHead::forwarded_open) between
// 0 and the calls it admitted; the calls whose requests have not fully
// arrived stay within the gate's bound (2 here, so that it refuses some),
// the shared count is the gate's own, and the gate gives it all back when
// it goes.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "server/net/call_gate.h"
#include "server/net/hpack.h"
#include "server/net/http2_guard.h"
#include "tests/fuzz/fuzz_require.h"

namespace {

namespace sv = encoderd::server;

struct Block {
  uint32_t stream = 0;
  std::string fragment;
};

// The header blocks of a byte stream, in order, the fragments less padding
// and priority; false when a frame other than CONTINUATION interrupts one,
// a frame is cut short, or padding is malformed.
bool HeaderBlocks(const std::string& bytes, std::vector<Block>* blocks) {
  struct Raw {
    sv::Http2Frame frame;
    std::string payload;
  };
  std::vector<Raw> frames;
  sv::Http2FrameReader reader;
  reader.Read(
      reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
      [&](const sv::Http2Frame& f) {
        frames.push_back({f, ""});
      },
      [&](const uint8_t* p, size_t n) {
        frames.back().payload.append(reinterpret_cast<const char*>(p), n);
      });
  if (!reader.at_boundary()) return false;
  bool open = false;
  for (const Raw& r : frames) {
    const sv::Http2Frame& f = r.frame;
    if (open && (f.type != sv::kHttp2Continuation || f.stream != blocks->back().stream))
      return false;
    if (f.type == sv::kHttp2Headers) {
      size_t start = 0, pad = 0;
      if (f.flags & sv::kHttp2Padded) {
        if (r.payload.empty()) return false;
        pad = static_cast<uint8_t>(r.payload[0]);
        start = 1;
      }
      if (f.flags & sv::kHttp2PriorityFlag) start += 5;
      if (start + pad > r.payload.size()) return false;
      blocks->push_back({f.stream, r.payload.substr(start, r.payload.size() - start - pad)});
      open = !(f.flags & sv::kHttp2EndHeaders);
    } else if (f.type == sv::kHttp2Continuation && open) {
      blocks->back().fragment += r.payload;
      open = !(f.flags & sv::kHttp2EndHeaders);
    }
  }
  return !open;
}

// Each stream's first header block, decoded in order by one decoder (as the
// receiver of `blocks` would); false when one fails to decode.
bool FirstBlocks(const std::vector<Block>& blocks,
                 std::map<uint32_t, std::vector<sv::HeaderField>>* first) {
  sv::HpackDecoder decoder;
  for (const Block& b : blocks) {
    std::vector<sv::HeaderField> fields;
    if (!decoder.Decode(reinterpret_cast<const uint8_t*>(b.fragment.data()), b.fragment.size(),
                        &fields))
      return false;
    first->emplace(b.stream, std::move(fields));
  }
  return true;
}

bool Same(const std::vector<sv::HeaderField>& a, const std::vector<sv::HeaderField>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].value != b[i].value) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t pattern = data[0];
  const size_t chunk = 1 + data[1] % 64;
  const std::string client(reinterpret_cast<const char*>(data + 2), size - 2);

  int calls = 0;
  int64_t admitted = 0;
  const sv::CallScreen screen = [&](const sv::CallHead& head) {
    REQUIRE(head.forwarded_open >= 0 && head.forwarded_open <= admitted);
    sv::CallVerdict verdict;
    if ((pattern >> (calls++ % 8)) & 1) {
      verdict.status = encoderd::ResourceExhausted("refused");
    } else {
      verdict.forwarded_work = true;
      ++admitted;
    }
    return verdict;
  };
  sv::IncompleteRequests incomplete;
  incomplete.limits = {/*per_connection=*/2, /*total=*/100, /*fair_share=*/1,
                       /*uncounted_paths=*/{}};
  auto gate_owner = std::make_unique<sv::CallGate>(&screen, &incomplete);
  sv::CallGate& gate = *gate_owner;
  std::string to_server, to_client;
  const std::string settings = sv::Http2FrameHeaderBytes(sv::kHttp2Settings, 0, 0, 0);
  const std::string grpc_frame = sv::Http2FrameHeaderBytes(sv::kHttp2Data, 0, 1, 3) + "abc";
  std::set<uint32_t> answered;
  for (size_t at = 0, n = 0; at < client.size(); at += chunk, ++n) {
    gate.FromClient(reinterpret_cast<const uint8_t*>(client.data() + at),
                    std::min(chunk, client.size() - at), &to_server);
    for (uint32_t s : gate.TakeAnswered()) answered.insert(s);
    // gRPC's SETTINGS after the first chunk, then now and then a frame of
    // its own: DATA, the trailers or a reset that end one of the client's
    // streams, and once GOAWAY (after which no new call counts).
    const uint32_t ended = static_cast<uint32_t>(2 * (n / 3) + 1);
    std::string from_grpc;
    if (n == 0) {
      from_grpc = settings;
    } else if (n == 40) {
      from_grpc = sv::GoAwayFrame(0x7fffffff, 0);
    } else if (n % 6 == 3) {
      from_grpc = sv::Http2FrameHeaderBytes(sv::kHttp2Headers, 0x5, ended, 0);
    } else if (n % 7 == 0) {
      from_grpc =
          sv::Http2FrameHeaderBytes(sv::kHttp2RstStream, 0, ended, 4) + std::string(4, '\0');
    } else if (n % 3 == 0) {
      from_grpc = grpc_frame;
    }
    if (!from_grpc.empty())
      gate.FromServer(reinterpret_cast<const uint8_t*>(from_grpc.data()), from_grpc.size(),
                      &to_client);
    gate.Flush(&to_client);
    REQUIRE(incomplete.open == gate.incomplete_requests());
    REQUIRE(gate.incomplete_requests() >= 0 && gate.incomplete_requests() <= 2);
  }
  const bool followed = !gate.off() && !gate.broken();
  gate_owner.reset();
  REQUIRE(incomplete.open == 0);
  if (!followed) return 0;

  std::vector<Block> client_blocks, grpc_blocks;
  if (!HeaderBlocks(client, &client_blocks)) return 0;  // the client's own protocol error
  // The check below is for clients that open each stream once, in order
  // (no trailers, no reused ids): each stream's first block is its only one.
  for (size_t i = 1; i < client_blocks.size(); ++i)
    if (client_blocks[i].stream <= client_blocks[i - 1].stream) return 0;
  std::map<uint32_t, std::vector<sv::HeaderField>> sent, seen;
  if (!FirstBlocks(client_blocks, &sent)) return 0;
  REQUIRE(HeaderBlocks(to_server, &grpc_blocks));
  REQUIRE(FirstBlocks(grpc_blocks, &seen));
  for (const auto& [stream, fields] : seen) {
    REQUIRE(answered.count(stream) == 0);
    REQUIRE(sent.count(stream) == 1);
    REQUIRE(Same(fields, sent.at(stream)));
  }
  return 0;
}
