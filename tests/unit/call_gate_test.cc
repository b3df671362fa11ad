// The guard's call gate (server/net/call_gate.h): refused calls answered with
// a trailers-only response and kept from gRPC, their DATA given back to the
// connection window, the client's HPACK table kept (blocks re-encoded once a
// table change was kept from gRPC), the gate's frames only between gRPC's
// frames, and byte streams split at every point read the same.
#include "server/net/call_gate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/net/hpack.h"
#include "server/net/http2_guard.h"

namespace encoderd::server {
namespace {

using std::chrono::milliseconds;

constexpr uint8_t kEndStream = 0x1, kEndHeaders = 0x4;
const std::string kEmbed = "/encoderd.v1.Encoder/Embed";

std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload = "") {
  return Http2FrameHeaderBytes(type, flags, stream, payload.size()) + payload;
}
std::string Settings() { return Frame(kHttp2Settings, 0, 0); }
std::string Data(uint32_t stream, size_t bytes, uint8_t flags = kEndStream) {
  return Frame(kHttp2Data, flags, stream, std::string(bytes, 'd'));
}
// A literal that the receiver adds to its dynamic table (RFC 7541, 6.2.1).
std::string Indexed(const std::string& name, const std::string& value) {
  std::string out = "\x40";
  HpackAppendInteger(name.size(), 7, 0, &out);
  out += name;
  HpackAppendInteger(value.size(), 7, 0, &out);
  return out + value;
}
std::string Plain(const std::string& name, const std::string& value) {
  std::string out;
  HpackAppendLiteral(name, value, &out);
  return out;
}

// Frames read back from bytes: type, flags, stream, payload.
struct Read {
  uint8_t type, flags;
  uint32_t stream;
  std::string payload;
};
std::vector<Read> Frames(const std::string& bytes) {
  std::vector<Read> out;
  Http2FrameReader r;
  r.Read(
      reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
      [&](const Http2Frame& f) {
        out.push_back({f.type, f.flags, f.stream, ""});
      },
      [&](const uint8_t* p, size_t n) {
        out.back().payload.append(reinterpret_cast<const char*>(p), n);
      });
  return out;
}
std::map<std::string, std::string> DecodeBlock(HpackDecoder* d, const std::string& block) {
  std::vector<HeaderField> fields;
  EXPECT_TRUE(d->Decode(reinterpret_cast<const uint8_t*>(block.data()), block.size(), &fields));
  std::map<std::string, std::string> out;
  for (auto& f : fields) out[f.name] = f.value;
  return out;
}

// Refuses calls to Embed with a deadline under a second; records what it saw.
struct Screen {
  std::vector<CallHead> seen;
  std::vector<std::string> paths;
  CallScreen fn = [this](const CallHead& h) {
    seen.push_back(h);
    paths.emplace_back(h.path);
    CallVerdict verdict;
    if (h.path == kEmbed && h.timeout && *h.timeout < std::chrono::seconds(1)) {
      verdict.status = ResourceExhausted("predicted to finish after its deadline (½ s)");
      verdict.request_id = 40 + seen.size();
    }
    return verdict;
  };
};

std::string FromClient(CallGate* g, const std::string& bytes) {
  std::string out;
  g->FromClient(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &out);
  return out;
}
std::string FromServer(CallGate* g, const std::string& bytes) {
  std::string out;
  g->FromServer(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &out);
  return out;
}

TEST(CallGateTest, AnswersARefusedCallAndKeepsItsFramesFromGrpc) {
  Screen screen;
  CallGate gate(&screen.fn);
  // Stream 1: refused (100 ms deadline); its block adds two table entries.
  const std::string block1 = Indexed(":path", kEmbed) + Indexed("grpc-timeout", "100m") +
                             Plain(":method", "POST") + Plain("te", "trailers");
  const std::string call1 = Frame(kHttp2Headers, kEndHeaders, 1, block1) + Data(1, 30, 0);
  EXPECT_EQ(FromClient(&gate, Settings() + call1), Settings());
  ASSERT_EQ(screen.seen.size(), 1u);
  EXPECT_EQ(screen.paths[0], kEmbed);
  EXPECT_EQ(screen.seen[0].timeout, std::chrono::nanoseconds(milliseconds(100)));
  EXPECT_EQ(gate.TakeAnswered(), std::vector<uint32_t>{1});
  EXPECT_EQ(gate.calls_answered(), 1);
  EXPECT_TRUE(gate.reencoding());

  // Nothing goes to the client before gRPC's SETTINGS (the server preface).
  std::string none;
  gate.Flush(&none);
  EXPECT_EQ(none, "");
  const std::vector<Read> to_client = Frames(FromServer(&gate, Settings()));
  ASSERT_EQ(to_client.size(), 3u);
  EXPECT_EQ(to_client[0].type, kHttp2Settings);
  EXPECT_EQ(to_client[1].type, kHttp2Headers);
  EXPECT_EQ(to_client[1].flags, kEndStream | kEndHeaders);
  EXPECT_EQ(to_client[1].stream, 1u);
  HpackDecoder client_side;
  auto answer = DecodeBlock(&client_side, to_client[1].payload);
  EXPECT_EQ(answer[":status"], "200");
  EXPECT_EQ(answer["content-type"], "application/grpc");
  EXPECT_EQ(answer["grpc-status"], "8");
  EXPECT_EQ(answer["grpc-message"], "predicted to finish after its deadline (%C2%BD s)");
  EXPECT_EQ(answer["x-request-id"], "41");
  EXPECT_EQ(client_side.table_entries(), 0u);  // the answer changes no table
  // The 30 bytes of dropped DATA go back to the connection window.
  EXPECT_EQ(to_client[2].type, kHttp2WindowUpdate);
  EXPECT_EQ(to_client[2].stream, 0u);
  EXPECT_EQ(to_client[2].payload, std::string("\0\0\0\x1e", 4));

  // Stream 3: admitted; it refers to an entry stream 1 added (index 63 is
  // the :path). gRPC never saw that entry: the block arrives as literals.
  const std::string block3 = "\xbf" + Indexed("grpc-timeout", "5S") + Plain(":method", "POST");
  const std::string call3 = Frame(kHttp2Headers, kEndHeaders, 3, block3) + Data(3, 12);
  const std::vector<Read> to_server = Frames(FromClient(&gate, call3));
  ASSERT_EQ(to_server.size(), 2u);
  EXPECT_EQ(to_server[0].type, kHttp2Headers);
  EXPECT_EQ(to_server[0].flags, kEndHeaders);
  EXPECT_EQ(to_server[0].stream, 3u);
  HpackDecoder grpc_side;  // has seen no block of this connection
  auto fields = DecodeBlock(&grpc_side, to_server[0].payload);
  EXPECT_EQ(fields[":path"], kEmbed);
  EXPECT_EQ(fields["grpc-timeout"], "5S");
  EXPECT_EQ(fields[":method"], "POST");
  EXPECT_EQ(grpc_side.table_entries(), 0u);
  EXPECT_EQ(to_server[1].type, kHttp2Data);
  EXPECT_EQ(to_server[1].payload.size(), 12u);
  EXPECT_TRUE(gate.TakeAnswered().empty());

  // Stream 1's later frames stay here too, its DATA given back.
  EXPECT_EQ(
      FromClient(&gate, Frame(kHttp2WindowUpdate, 0, 1, std::string("\0\0\0\x01", 4)) + Data(1, 5)),
      "");
  const std::vector<Read> credit = Frames(FromServer(&gate, Data(3, 1, 0)));
  ASSERT_EQ(credit.size(), 2u);
  EXPECT_EQ(credit[1].type, kHttp2WindowUpdate);
  EXPECT_EQ(credit[1].payload, std::string("\0\0\0\x05", 4));
}

TEST(CallGateTest, PassesEveryByteThroughUntilATableChangeIsKeptFromGrpc) {
  Screen screen;
  CallGate gate(&screen.fn);
  // Admitted calls, then a refused one whose block changes no table: every
  // byte of the admitted ones goes to gRPC as it came.
  const std::string admitted =
      Settings() +
      Frame(kHttp2Headers, kEndHeaders, 1, Indexed(":path", kEmbed) + Plain(":method", "POST")) +
      Data(1, 40) + Frame(kHttp2Headers, kEndHeaders | kEndStream, 3, "\xbe") +
      Frame(kHttp2WindowUpdate, 0, 0, std::string("\0\0\x10\0", 4));
  EXPECT_EQ(FromClient(&gate, admitted), admitted);
  const std::string refused =
      Frame(kHttp2Headers, kEndHeaders, 5, "\xbe" + Plain("grpc-timeout", "1m")) + Data(5, 7);
  EXPECT_EQ(FromClient(&gate, refused), "");
  EXPECT_FALSE(gate.reencoding());
  const std::string next = Frame(kHttp2Headers, kEndHeaders, 7, "\xbe") + Data(7, 3);
  EXPECT_EQ(FromClient(&gate, next), next);
  EXPECT_EQ(gate.calls_answered(), 1);
}

TEST(CallGateTest, HeadersWithPaddingPriorityAndContinuationDecode) {
  Screen screen;
  CallGate gate(&screen.fn);
  const std::string block = Indexed(":path", kEmbed) + Indexed("grpc-timeout", "20m");
  // PADDED and PRIORITY: pad length 3, 5 bytes of priority, padding.
  const std::string first =
      std::string("\x03", 1) + std::string(5, '\0') + block.substr(0, 10) + std::string(3, '\0');
  const std::string bytes = Frame(kHttp2Headers, kEndStream | 0x8 | 0x20, 1, first) +
                            Frame(kHttp2Continuation, 0, 1, block.substr(10, 5)) +
                            Frame(kHttp2Continuation, kEndHeaders, 1, block.substr(15));
  EXPECT_EQ(FromClient(&gate, bytes), "");
  ASSERT_EQ(screen.paths.size(), 1u);
  EXPECT_EQ(screen.paths[0], kEmbed);
  EXPECT_EQ(gate.TakeAnswered(), std::vector<uint32_t>{1});
}

TEST(CallGateTest, AnswersWaitForABoundaryOutsideGrpcsHeaderBlocks) {
  Screen screen;
  CallGate gate(&screen.fn);
  EXPECT_EQ(FromServer(&gate, Settings()), Settings());
  // gRPC is inside a header block (HEADERS without END_HEADERS) and then
  // inside a DATA frame when the refused call comes.
  const std::string grpc_headers = Frame(kHttp2Headers, 0, 9, "abc");
  EXPECT_EQ(FromServer(&gate, grpc_headers), grpc_headers);
  const std::string call = Frame(kHttp2Headers, kEndHeaders | kEndStream, 1,
                                 Plain(":path", kEmbed) + Plain("grpc-timeout", "1m"));
  EXPECT_EQ(FromClient(&gate, call), "");
  std::string out;
  gate.Flush(&out);
  EXPECT_EQ(out, "");
  const std::string continuation = Frame(kHttp2Continuation, kEndHeaders, 9, "def");
  const std::string data = Data(9, 10, 0);
  // The answer goes between the CONTINUATION and the DATA, not inside it.
  const std::string from_grpc = FromServer(&gate, continuation + data.substr(0, 12));
  ASSERT_GT(from_grpc.size(), continuation.size());
  EXPECT_EQ(from_grpc.substr(0, continuation.size()), continuation);
  const std::vector<Read> answer =
      Frames(from_grpc.substr(continuation.size(), from_grpc.size() - continuation.size() - 12));
  ASSERT_EQ(answer.size(), 1u);
  EXPECT_EQ(answer[0].stream, 1u);
  EXPECT_EQ(from_grpc.substr(from_grpc.size() - 12), data.substr(0, 12));
  EXPECT_EQ(FromServer(&gate, data.substr(12)), data.substr(12));
}

TEST(CallGateTest, BytesSplitAtEveryPointReadTheSame) {
  const std::string block1 = Indexed(":path", kEmbed) + Indexed("grpc-timeout", "100m");
  const std::string client =
      Settings() + Frame(kHttp2Headers, kEndHeaders, 1, block1) + Data(1, 20) +
      Frame(kHttp2Headers, 0, 3, "\xbf" + Indexed("x-a", "1")) +
      Frame(kHttp2Continuation, kEndHeaders, 3, Plain("grpc-timeout", "3S")) + Data(3, 5) +
      Frame(kHttp2Headers, kEndHeaders | kEndStream, 5, "\xc0" + Plain("grpc-timeout", "1u"));
  const std::string server = Settings() + Frame(kHttp2Headers, kEndHeaders, 3, "xyz") + Data(3, 9);
  // The client's and gRPC's bytes in pieces of `split`, taking turns.
  auto run = [&](size_t split) {
    Screen screen;
    CallGate gate(&screen.fn);
    std::string to_server, to_client;
    for (size_t at = 0; at < std::max(client.size(), server.size()); at += split) {
      if (at < client.size()) to_server += FromClient(&gate, client.substr(at, split));
      gate.Flush(&to_client);
      if (at < server.size()) to_client += FromServer(&gate, server.substr(at, split));
    }
    gate.Flush(&to_client);
    return std::make_pair(to_server, to_client);
  };
  const auto whole = run(client.size() + server.size());
  // gRPC gets SETTINGS and stream 3 (HEADERS, DATA): nothing of 1 or 5.
  const std::vector<Read> to_server = Frames(whole.first);
  ASSERT_EQ(to_server.size(), 3u);
  EXPECT_EQ(to_server[1].stream, 3u);
  // The client gets gRPC's frames, the answers to 1 and 5, and 20 bytes of
  // window, whatever the pieces; only where the gate's frames fall between
  // gRPC's may differ.
  for (size_t split = 1; split < 48; ++split) {
    const auto got = run(split);
    EXPECT_EQ(got.first, whole.first) << split;
    std::vector<std::string> frames;
    for (const Read& r : Frames(got.second))
      frames.push_back(std::to_string(r.type) + "/" + std::to_string(r.stream) + "/" +
                       std::to_string(r.payload.size()));
    std::sort(frames.begin(), frames.end());
    EXPECT_EQ(frames,
              (std::vector<std::string>{"0/3/9", "1/1/128", "1/3/3", "1/5/128", "4/0/0", "8/0/4"}))
        << split;
  }
}

TEST(CallGateTest, NoFrameOfAnAnsweredStreamReachesGrpc) {
  Screen screen;
  CallGate gate(&screen.fn);
  // Refused with END_STREAM; then the client reuses the id for a real call
  // (gRPC would take it for a new stream) and resets it: none of it passes.
  const std::string refused = Frame(kHttp2Headers, kEndHeaders | kEndStream, 1,
                                    Plain(":path", kEmbed) + Plain("grpc-timeout", "1m"));
  EXPECT_EQ(FromClient(&gate, refused), "");
  const std::string reuse = Frame(kHttp2Headers, kEndHeaders, 1, Indexed(":path", kEmbed)) +
                            Data(1, 4) + Frame(kHttp2RstStream, 0, 1, std::string(4, '\0'));
  EXPECT_EQ(FromClient(&gate, reuse), "");
  EXPECT_EQ(screen.seen.size(), 1u);  // the reused id is not a new call
  // The kept block added to the table: blocks after it are re-encoded.
  EXPECT_TRUE(gate.reencoding());
  // Trailers on an answered stream, and frames of streams above the last
  // one gRPC saw, are kept too.
  const std::string refused3 =
      Frame(kHttp2Headers, kEndHeaders, 3, Plain(":path", kEmbed) + Plain("grpc-timeout", "1m"));
  EXPECT_EQ(FromClient(&gate, refused3 + Frame(kHttp2Headers, kEndHeaders | kEndStream, 3,
                                               Indexed("grpc-trailer", "x"))),
            "");
  EXPECT_EQ(FromClient(&gate, Frame(kHttp2WindowUpdate, 0, 9, std::string("\0\0\0\x01", 4))), "");
  // A call gRPC does see, after all that, decodes as the client sent it.
  const std::vector<Read> to_server =
      Frames(FromClient(&gate, Frame(kHttp2Headers, kEndHeaders, 5, "\xbe" + Plain("a", "b"))));
  ASSERT_EQ(to_server.size(), 1u);
  HpackDecoder grpc_side;
  auto fields = DecodeBlock(&grpc_side, to_server[0].payload);
  EXPECT_EQ(fields["grpc-trailer"], "x");
  EXPECT_EQ(fields["a"], "b");
}

TEST(CallGateTest, StopsAnsweringAfterGrpcsGoAwayOrATableSizeSetting) {
  {
    Screen screen;
    CallGate gate(&screen.fn);
    FromServer(&gate, Settings() + Frame(kHttp2GoAway, 0, 0, std::string(8, '\0')));
    const std::string call =
        Frame(kHttp2Headers, kEndHeaders, 1, Plain(":path", kEmbed) + Plain("grpc-timeout", "1m"));
    EXPECT_EQ(FromClient(&gate, call), call);  // gRPC answers it (refused: GOAWAY)
    EXPECT_EQ(gate.calls_answered(), 0);
  }
  {
    Screen screen;
    CallGate gate(&screen.fn);
    // SETTINGS_HEADER_TABLE_SIZE 0: the client then expects a size update
    // first in the next block, which the gate's answers lack.
    const std::string settings = Frame(kHttp2Settings, 0, 0, std::string("\0\x01\0\0\0\0", 6));
    EXPECT_EQ(FromClient(&gate, settings), settings);
    EXPECT_TRUE(gate.off());
  }
  {
    // After an answer, the gate cannot turn off: the connection must close.
    Screen screen;
    CallGate gate(&screen.fn);
    FromClient(&gate, Frame(kHttp2Headers, kEndHeaders | kEndStream, 1,
                            Plain(":path", kEmbed) + Plain("grpc-timeout", "1m")));
    ASSERT_FALSE(gate.reencoding());
    FromClient(&gate, Frame(kHttp2Headers, kEndHeaders, 3, "\x80"));
    EXPECT_TRUE(gate.broken());
  }
}

TEST(CallGateTest, AnUndecodableBlockTurnsTheGateOffOrBreaksTheConnection) {
  {
    Screen screen;
    CallGate gate(&screen.fn);
    const std::string bad = Frame(kHttp2Headers, kEndHeaders, 1, "\x80");  // index 0
    EXPECT_EQ(FromClient(&gate, bad), bad);                                // gRPC answers it
    EXPECT_TRUE(gate.off());
    const std::string later =
        Frame(kHttp2Headers, kEndHeaders, 3, Plain(":path", kEmbed) + Plain("grpc-timeout", "1m"));
    EXPECT_EQ(FromClient(&gate, later), later);
    EXPECT_TRUE(screen.seen.empty());
  }
  {
    Screen screen;
    CallGate gate(&screen.fn);
    FromClient(&gate, Frame(kHttp2Headers, kEndHeaders, 1,
                            Indexed(":path", kEmbed) + Plain("grpc-timeout", "1m")));
    ASSERT_TRUE(gate.reencoding());
    FromClient(&gate, Frame(kHttp2Headers, kEndHeaders, 3, "\x80"));
    EXPECT_TRUE(gate.broken());
  }
}

// The calls of a connection the screen admitted as work count in
// CallHead::forwarded_open until gRPC answers them (its HEADERS: the
// response's or trailers only) or either side resets them; per connection.
TEST(CallGateTest, CountsForwardedWorkUntilGrpcAnswersIt) {
  std::vector<int64_t> seen;
  CallScreen screen = [&](const CallHead& h) {
    seen.push_back(h.forwarded_open);
    CallVerdict verdict;
    verdict.forwarded_work = h.path == kEmbed;  // other calls are gRPC's to judge
    return verdict;
  };
  const auto call = [](uint32_t stream, const std::string& path) {
    return Frame(kHttp2Headers, kEndHeaders, stream, Plain(":path", path)) + Data(stream, 5);
  };
  // What the screen is told on a new call (a health check, not counted);
  // -1 when the screen was not asked.
  const auto open = [&](CallGate* g, uint32_t stream) -> int64_t {
    const size_t before = seen.size();
    FromClient(g, call(stream, "/grpc.health.v1/Check"));
    return seen.size() == before + 1 ? seen.back() : -1;
  };
  const std::string reset(4, '\0');
  CallGate a(&screen);
  CallGate b(&screen);
  FromServer(&a, Settings());
  FromServer(&b, Settings());
  FromClient(&a, Settings() + call(1, kEmbed) + call(3, kEmbed) + call(5, kEmbed));
  EXPECT_EQ(open(&a, 7), 3);
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3}));
  FromClient(&b, Settings() + call(1, kEmbed));
  EXPECT_EQ(seen.back(), 0);  // b counts its own calls only
  // gRPC starts answering a's stream 1 (HEADERS without END_STREAM: the
  // response's DATA may wait for flow control) and resets 3; a's client
  // resets 5 and the health check, which was never counted.
  FromServer(&a, Frame(kHttp2Headers, kEndHeaders, 1, Plain(":status", "200")));
  FromServer(&a, Frame(kHttp2RstStream, 0, 3, reset));
  FromClient(&a, Frame(kHttp2RstStream, 0, 5, reset) + Frame(kHttp2RstStream, 0, 7, reset));
  EXPECT_EQ(open(&a, 9), 0);
  FromClient(&a, call(11, kEmbed) + call(13, kEmbed));
  // Trailers only, then a frame of the stream already ended: counted once.
  FromServer(&a, Frame(kHttp2Headers, kEndHeaders | kEndStream, 11, Plain("grpc-status", "0")));
  FromServer(&a, Frame(kHttp2RstStream, 0, 11, reset));
  EXPECT_EQ(open(&a, 15), 1);
  EXPECT_EQ(open(&b, 3), 1);
  // A block the gate cannot decode: it gives up, and screens no more calls.
  CallGate c(&screen);
  FromClient(&c, Settings() + call(1, kEmbed));
  EXPECT_EQ(seen.back(), 0);
  FromClient(&c, Frame(kHttp2Headers, kEndHeaders, 3, "\xff\xff\xff\xff\xff\xff"));
  EXPECT_TRUE(c.off());
  EXPECT_EQ(open(&c, 5), -1);
}

// Calls whose request has not fully arrived (HEADERS without END_STREAM, no
// END_STREAM since): past the connection's bound, new ones are answered
// RESOURCE_EXHAUSTED without asking the screen and kept from gRPC; the
// client's END_STREAM (DATA or trailers), a reset from either side or
// gRPC's trailers end one; a call whose HEADERS end its request never
// counts.
TEST(CallGateTest, BoundsTheCallsWhoseRequestsHaveNotArrived) {
  Screen screen;
  IncompleteRequests shared;
  shared.limits = {/*per_connection=*/3, /*total=*/100, /*fair_share=*/1, /*uncounted_paths=*/{}};
  CallGate gate(&screen.fn, &shared);
  FromServer(&gate, Settings());
  const auto open = [](uint32_t stream, uint8_t flags = 0) {
    return Frame(kHttp2Headers, kEndHeaders | flags, stream, Plain(":path", kEmbed));
  };
  const std::string reset(4, '\0');
  const std::string three = open(1) + open(3) + Data(3, 10, 0) + open(5);
  EXPECT_EQ(FromClient(&gate, Settings() + three), Settings() + three);
  EXPECT_EQ(gate.incomplete_requests(), 3);
  EXPECT_EQ(shared.open, 3);
  // A fourth: answered here, its DATA dropped; the screen is not asked.
  EXPECT_EQ(FromClient(&gate, open(7) + Data(7, 10)), "");
  EXPECT_EQ(screen.seen.size(), 3u);
  EXPECT_EQ(gate.TakeAnswered(), std::vector<uint32_t>{7});
  EXPECT_EQ(gate.TakeRefusedIncomplete(), 1);
  EXPECT_EQ(gate.TakeRefusedIncomplete(), 0);
  EXPECT_EQ(shared.refused, 1);
  std::string out;
  gate.Flush(&out);
  std::vector<Read> answer = Frames(out);
  ASSERT_GE(answer.size(), 1u);
  EXPECT_EQ(answer[0].stream, 7u);
  HpackDecoder client;
  auto fields = DecodeBlock(&client, answer[0].payload);
  EXPECT_EQ(fields["grpc-status"], "8");
  EXPECT_NE(fields["grpc-message"].find("holds 3 calls whose requests have not fully arrived"),
            std::string::npos)
      << fields["grpc-message"];
  // A call whose HEADERS end it passes and does not count.
  EXPECT_EQ(FromClient(&gate, open(9, kEndStream)), open(9, kEndStream));
  EXPECT_EQ(gate.incomplete_requests(), 3);
  // Stream 1's request ends: room for one more.
  FromClient(&gate, Data(1, 10));
  EXPECT_EQ(gate.incomplete_requests(), 2);
  EXPECT_EQ(FromClient(&gate, open(11)), open(11));
  EXPECT_EQ(FromClient(&gate, open(13)), "");
  // The client's trailers end 3, its reset 5, gRPC's trailers 11.
  FromClient(&gate, Frame(kHttp2Headers, kEndHeaders | kEndStream, 3, Plain("x", "y")));
  FromClient(&gate, Frame(kHttp2RstStream, 0, 5, reset));
  FromServer(&gate, Frame(kHttp2Headers, kEndHeaders | kEndStream, 11, Plain("grpc-status", "8")));
  EXPECT_EQ(gate.incomplete_requests(), 0);
  EXPECT_EQ(shared.open, 0);
  FromClient(&gate, open(15) + open(17));
  FromServer(&gate, Frame(kHttp2RstStream, 0, 17, reset));  // gRPC's reset
  EXPECT_EQ(gate.incomplete_requests(), 1);
  EXPECT_EQ(shared.refused, 2);
  gate.ServerGone();  // gRPC's end closed: its calls are gone
  EXPECT_EQ(gate.incomplete_requests(), 0);
  EXPECT_EQ(shared.open, 0);
}

// Calls of an uncounted method (one whose handler holds a concurrency slot
// from its HEADERS on) never count; nor do calls opened after gRPC's
// GOAWAY, which the gate does not answer.
TEST(CallGateTest, UncountedMethodsAndCallsAfterGoAwayDoNotCount) {
  IncompleteRequests shared;
  shared.limits = {/*per_connection=*/1, /*total=*/100, /*fair_share=*/1,
                   /*uncounted_paths=*/{"/encoderd.v1.Encoder/EmbedStream"}};
  CallGate gate(nullptr, &shared);
  FromServer(&gate, Settings());
  const auto open = [](uint32_t stream, const std::string& path) {
    return Frame(kHttp2Headers, kEndHeaders, stream, Plain(":path", path));
  };
  const std::string stream_call = open(1, "/encoderd.v1.Encoder/EmbedStream") +
                                  open(3, "/encoderd.v1.Encoder/EmbedStream") + open(5, kEmbed);
  EXPECT_EQ(FromClient(&gate, Settings() + stream_call), Settings() + stream_call);
  EXPECT_EQ(gate.incomplete_requests(), 1);
  EXPECT_EQ(FromClient(&gate, open(7, kEmbed)), "");  // refused: 5 holds the one allowed
  FromServer(&gate, GoAwayFrame(0x7fffffff, 0));
  EXPECT_EQ(FromClient(&gate, open(9, kEmbed)), open(9, kEmbed));
  EXPECT_EQ(gate.incomplete_requests(), 1);
  EXPECT_EQ(shared.open, 1);
}

// All connections together: past `total`, a connection holding
// `fair_share` or more is refused while one holding fewer is not; a gate
// gives its count back when it goes, or when it gives up following the
// connection.
TEST(CallGateTest, TheTotalBoundSparesConnectionsBelowTheirShare) {
  IncompleteRequests shared;
  shared.limits = {/*per_connection=*/10, /*total=*/4, /*fair_share=*/2, /*uncounted_paths=*/{}};
  const auto open = [](uint32_t stream) {
    return Frame(kHttp2Headers, kEndHeaders, stream, Plain(":path", kEmbed));
  };
  auto a = std::make_unique<CallGate>(nullptr, &shared);
  CallGate b(nullptr, &shared);
  FromClient(a.get(), Settings() + open(1) + open(3) + open(5) + open(7));
  EXPECT_EQ(shared.open, 4);
  EXPECT_EQ(FromClient(a.get(), open(9)), "");
  FromClient(&b, Settings());
  EXPECT_EQ(FromClient(&b, open(1)), open(1));
  EXPECT_EQ(FromClient(&b, open(3)), open(3));
  EXPECT_EQ(FromClient(&b, open(5)), "");
  EXPECT_EQ(shared.open, 6);
  EXPECT_EQ(shared.refused, 2);
  a.reset();
  EXPECT_EQ(shared.open, 2);
  EXPECT_EQ(FromClient(&b, open(7)), open(7));
  EXPECT_EQ(shared.open, 3);
  // SETTINGS_HEADER_TABLE_SIZE 0 turns a gate off (c's, which answered
  // nothing): its calls are no longer followed (the guard bounds them,
  // http2_guard.h).
  CallGate c(nullptr, &shared);
  FromClient(&c, Settings() + open(1));
  EXPECT_EQ(shared.open, 4);
  FromClient(&c, Frame(kHttp2Settings, 0, 0, std::string("\0\x01\0\0\0\0", 6)));
  EXPECT_TRUE(c.off());
  EXPECT_EQ(c.incomplete_requests(), 0);
  EXPECT_EQ(shared.open, 3);
}

TEST(CallGateTest, ReadsGrpcTimeouts) {
  EXPECT_EQ(ParseGrpcTimeout("100m"), std::chrono::nanoseconds(milliseconds(100)));
  EXPECT_EQ(ParseGrpcTimeout("5S"), std::chrono::nanoseconds(std::chrono::seconds(5)));
  EXPECT_EQ(ParseGrpcTimeout("2M"), std::chrono::nanoseconds(std::chrono::minutes(2)));
  EXPECT_EQ(ParseGrpcTimeout("1H"), std::chrono::nanoseconds(std::chrono::hours(1)));
  EXPECT_EQ(ParseGrpcTimeout("99999999u"), std::chrono::nanoseconds(99999999000));
  EXPECT_EQ(ParseGrpcTimeout("7n"), std::chrono::nanoseconds(7));
  // Too long for 64-bit nanoseconds: saturated (gRPC reads it as no deadline).
  EXPECT_EQ(ParseGrpcTimeout("99999999H"), std::chrono::nanoseconds::max());
  EXPECT_EQ(ParseGrpcTimeout("2562048H"), std::chrono::nanoseconds::max());
  EXPECT_LT(*ParseGrpcTimeout("2562047H"), std::chrono::nanoseconds::max());
  for (const char* bad : {"", "m", "123456789m", "10x", "-1m", "1 m"})
    EXPECT_FALSE(ParseGrpcTimeout(bad).has_value()) << bad;
}

}  // namespace
}  // namespace encoderd::server
