// LoadOptions: everything one encoderd-loadtest invocation does, parsed from
// the command line. Parsing is separate from running so it can be tested
// without a server.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loadtest/arrival_process.h"
#include "loadtest/workload.h"

namespace encoderd::loadtest {

enum class LoadMode {
  kClosed,  // `concurrency` clients, each sends its next request on a reply
  kOpen,    // arrivals at `rate` per second, whatever the replies do
};

// kRerank: each request's texts are the documents; its query is the first
// text's first 8 words.
enum class RpcKind { kEmbed, kClassify, kEmbedStream, kRerank };

const char* RpcKindName(RpcKind kind);
const char* LoadModeName(LoadMode mode);

struct LoadOptions {
  // The server, host:port; nothing else is ever contacted.
  std::string target = "127.0.0.1:50051";
  // Set: TLS, the server verified against this PEM CA file, under tls_name
  // (empty: the target's host).
  std::string tls_ca_file;
  std::string tls_name;
  // Model name in each request (empty: the server's only model).
  std::string model;
  std::string prompt_name;  // each request's prompt_name (empty: the model's default)
  RpcKind rpc = RpcKind::kEmbed;
  LoadMode mode = LoadMode::kClosed;
  // Closed loop: clients. Open loop with EmbedStream: streams requests are
  // spread over (unary calls share one channel).
  int concurrency = 8;
  // Open loop: offered requests per second and how arrivals are spaced.
  double rate = 100;
  ArrivalKind arrival = ArrivalKind::kPoisson;
  // Open loop: at most this many calls in flight; beyond it sends wait (and
  // the wait counts in latency, which is measured from the intended time).
  int max_in_flight = 10000;
  // Measured phase length (0: bounded by `requests` only) and counted requests
  // (0: bounded by `duration_s` only). At least one must be set.
  double duration_s = 10;
  int64_t requests = 0;
  // Requests sent during the first warmup_s seconds are not counted.
  double warmup_s = 2;
  // Per-call deadline.
  int64_t timeout_ms = 30000;
  bool truncate = true;
  WorkloadSpec workload;
  std::string text_file;
  // Output: the text table always, plus JSON on stdout (--json) or to a file.
  bool json = false;
  std::string json_file;
  // One CSV row per second of the measured window (PerSecondCsv).
  std::string per_second_csv;
  // Sweep: one open-loop run per rate, ascending; stops after the first rate
  // the server cannot sustain (achieved < 90% of offered, or > 1% errors).
  std::vector<double> sweep_rates;
  std::string sweep_csv;
  // Print the first `requests` requests' texts as JSON lines and exit.
  bool dump_workload = false;
  bool help = false;
};

// Parses argv (flags as --name value or --name=value). Returns an error
// message naming the flag, or "" on success. Reads --text-file.
std::string ParseLoadOptions(int argc, const char* const* argv, LoadOptions* options);

std::string LoadOptionsUsage();

}  // namespace encoderd::loadtest
