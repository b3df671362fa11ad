#include "loadtest/load_options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

namespace encoderd::loadtest {
namespace {

// Bounds on the values that become ints or nanoseconds (a --max-in-flight
// of 4294967296 became 0 and the run waited forever; --duration inf
// overflowed its nanoseconds and the run ended at once).
constexpr int64_t kMaxCount = 1000000;               // words, texts, calls in flight
constexpr double kMaxSeconds = 7 * 24 * 3600;        // a week
constexpr int64_t kMaxTimeoutMs = 24 * 3600 * 1000;  // a day

bool ParseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtod(s.c_str(), &end);
  return errno == 0 && end == s.c_str() + s.size();
}

bool ParseInt(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && end == s.c_str() + s.size();
}

// "N" (fixed) or "A-B" (uniform).
bool ParseWords(const std::string& s, WorkloadSpec* spec) {
  const size_t dash = s.find('-');
  int64_t a = 0, b = 0;
  if (dash == std::string::npos) {
    if (!ParseInt(s, &a) || a > kMaxCount) return false;
    spec->length_mode = TextLengthMode::kFixed;
    spec->min_words = spec->max_words = static_cast<int>(a);
    return true;
  }
  // Beyond an int's reach only: below 1 and out of order are ValidateWorkloadSpec's.
  constexpr int64_t kIntMin = std::numeric_limits<int>::min();
  if (!ParseInt(s.substr(0, dash), &a) || !ParseInt(s.substr(dash + 1), &b) || a > kMaxCount ||
      b > kMaxCount || a < kIntMin || b < kIntMin)
    return false;
  spec->length_mode = a == b ? TextLengthMode::kFixed : TextLengthMode::kUniform;
  spec->min_words = static_cast<int>(a);
  spec->max_words = static_cast<int>(b);
  return true;
}

// Open-loop rates: finite, positive and at most kMaxRate (an infinite rate
// sent without end, none counted, until 2026-12-04).
constexpr double kMaxRate = 1e6;
bool ValidRate(double r) { return std::isfinite(r) && r > 0 && r <= kMaxRate; }

bool ParseRates(const std::string& s, std::vector<double>* rates) {
  rates->clear();
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    double r = 0;
    if (!ParseDouble(item, &r) || !ValidRate(r)) return false;
    if (!rates->empty() && r <= rates->back()) return false;
    rates->push_back(r);
  }
  return !rates->empty();
}

}  // namespace

const char* RpcKindName(RpcKind kind) {
  switch (kind) {
    case RpcKind::kEmbed:
      return "embed";
    case RpcKind::kClassify:
      return "classify";
    case RpcKind::kEmbedStream:
      return "embed_stream";
    case RpcKind::kRerank:
      return "rerank";
  }
  return "?";
}

const char* LoadModeName(LoadMode mode) { return mode == LoadMode::kOpen ? "open" : "closed"; }

std::string LoadOptionsUsage() {
  return R"(usage: encoderd-loadtest [flags]
Drives `encoderd serve` over gRPC and reports throughput and latency.
  --target HOST:PORT        server address (default 127.0.0.1:50051)
  --tls-ca FILE             TLS: verify the server against this PEM CA (default plaintext)
  --tls-name NAME           TLS: the name the server's certificate must carry
                            (default the target's host)
  --model NAME              model name in requests (default: the server's only model)
  --prompt-name NAME        one of the model's prompts, in every request (default:
                            none named, so the model's default prompt)
  --rpc embed|classify|embed_stream|rerank
                            (default embed; rerank: the texts are the documents,
                            the query is the first text's first 8 words)
  --mode closed|open        closed: N clients back to back; open: arrivals at --rate,
                            latency measured from the intended send time (default closed)
  --concurrency N           closed-loop clients / embed_stream streams (default 8)
  --rate R                  open loop: offered requests/s, at most 1e6 (default 100)
  --arrival poisson|uniform open loop inter-arrival gaps (default poisson)
  --max-in-flight N         open loop: cap on outstanding calls (default 10000)
  --duration S              measured seconds, 0: until --requests (default 10)
  --requests N              counted requests, 0: until --duration (default 0)
  --warmup S                seconds whose requests are not counted (default 2)
  --timeout-ms MS           per-call deadline from the intended send time (unary
                            calls), 0: none (default 30000)
  --texts N                 texts per request (default 1)
  --words N | A-B           words per generated text, fixed or uniform (default 16)
  --text-file FILE          sample texts from FILE (one per line) instead
  --no-truncate             send truncate=false (over-long texts fail)
  --seed N                  workload and arrival seed (default 1)
  --json                    also print the report as JSON
  --json-file FILE          write the JSON report (sweep: one object per rate) to FILE
  --per-second-csv FILE     one row per second of the measured window: OK and failed
                            calls (by intended send time), p50/p99 latency of OK calls
  --sweep-rates R1,R2,...   open-loop runs at ascending rates; stops after saturation
  --sweep-csv FILE          sweep results as CSV (default sweep.csv)
  --dump-workload           print the first --requests requests as JSON lines, exit
)";
}

std::string ParseLoadOptions(int argc, const char* const* argv, LoadOptions* o) {
  using Setter = std::function<bool(const std::string&)>;
  const std::map<std::string, Setter> valued = {
      {"target",
       [&](const std::string& v) {
         o->target = v;
         return !v.empty();
       }},
      {"tls-ca",
       [&](const std::string& v) {
         o->tls_ca_file = v;
         return !v.empty();
       }},
      {"tls-name",
       [&](const std::string& v) {
         o->tls_name = v;
         return !v.empty();
       }},
      {"model",
       [&](const std::string& v) {
         o->model = v;
         return true;
       }},
      {"prompt-name",
       [&](const std::string& v) {
         o->prompt_name = v;
         return true;
       }},
      {"rpc",
       [&](const std::string& v) {
         if (v == "embed")
           o->rpc = RpcKind::kEmbed;
         else if (v == "classify")
           o->rpc = RpcKind::kClassify;
         else if (v == "embed_stream")
           o->rpc = RpcKind::kEmbedStream;
         else if (v == "rerank")
           o->rpc = RpcKind::kRerank;
         else
           return false;
         return true;
       }},
      {"mode",
       [&](const std::string& v) {
         if (v == "closed")
           o->mode = LoadMode::kClosed;
         else if (v == "open")
           o->mode = LoadMode::kOpen;
         else
           return false;
         return true;
       }},
      {"arrival",
       [&](const std::string& v) {
         if (v == "poisson")
           o->arrival = ArrivalKind::kPoisson;
         else if (v == "uniform")
           o->arrival = ArrivalKind::kUniform;
         else
           return false;
         return true;
       }},
      {"concurrency",
       [&](const std::string& v) {
         int64_t n;
         return ParseInt(v, &n) && n >= 1 && n <= 100000 && (o->concurrency = int(n), true);
       }},
      {"rate",
       [&](const std::string& v) { return ParseDouble(v, &o->rate) && ValidRate(o->rate); }},
      {"max-in-flight",
       [&](const std::string& v) {
         int64_t n;
         return ParseInt(v, &n) && n >= 1 && n <= kMaxCount && (o->max_in_flight = int(n), true);
       }},
      {"duration",
       [&](const std::string& v) {
         return ParseDouble(v, &o->duration_s) && o->duration_s >= 0 &&
                o->duration_s <= kMaxSeconds;
       }},
      {"requests",
       [&](const std::string& v) { return ParseInt(v, &o->requests) && o->requests >= 0; }},
      {"warmup",
       [&](const std::string& v) {
         return ParseDouble(v, &o->warmup_s) && o->warmup_s >= 0 && o->warmup_s <= kMaxSeconds;
       }},
      {"timeout-ms",
       [&](const std::string& v) {
         return ParseInt(v, &o->timeout_ms) && o->timeout_ms >= 0 && o->timeout_ms <= kMaxTimeoutMs;
       }},
      {"texts",
       [&](const std::string& v) {
         int64_t n;
         return ParseInt(v, &n) && n >= 1 && n <= kMaxCount &&
                (o->workload.texts_per_request = int(n), true);
       }},
      {"words", [&](const std::string& v) { return ParseWords(v, &o->workload); }},
      {"text-file",
       [&](const std::string& v) {
         o->text_file = v;
         return !v.empty();
       }},
      {"seed",
       [&](const std::string& v) {
         int64_t n;
         return ParseInt(v, &n) && (o->workload.seed = uint64_t(n), true);
       }},
      {"json-file",
       [&](const std::string& v) {
         o->json_file = v;
         return !v.empty();
       }},
      {"per-second-csv",
       [&](const std::string& v) {
         o->per_second_csv = v;
         return !v.empty();
       }},
      {"sweep-rates", [&](const std::string& v) { return ParseRates(v, &o->sweep_rates); }},
      {"sweep-csv",
       [&](const std::string& v) {
         o->sweep_csv = v;
         return !v.empty();
       }},
  };
  const std::map<std::string, std::function<void()>> switches = {
      {"json", [&] { o->json = true; }},
      {"no-truncate", [&] { o->truncate = false; }},
      {"dump-workload", [&] { o->dump_workload = true; }},
      {"help", [&] { o->help = true; }},
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h") arg = "--help";
    if (arg.rfind("--", 0) != 0) return "unexpected argument '" + arg + "'";
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (auto s = switches.find(name); s != switches.end() && !inline_value) {
      s->second();
      continue;
    }
    auto v = valued.find(name);
    if (v == valued.end()) return "unknown flag --" + name;
    if (!inline_value) {
      if (i + 1 >= argc) return "flag --" + name + " needs a value";
      value = argv[++i];
    }
    if (!v->second(value)) return "bad value '" + value + "' for --" + name;
  }
  if (o->help) return "";
  if (!o->text_file.empty()) {
    std::string error;
    if (!ReadCorpusFile(o->text_file, &o->workload.corpus, &error)) return error;
    o->workload.length_mode = TextLengthMode::kCorpus;
  }
  if (std::string e = ValidateWorkloadSpec(o->workload); !e.empty()) return e;
  if (o->duration_s == 0 && o->requests == 0)
    return "--duration and --requests are both 0: the run would never stop";
  if (!o->sweep_rates.empty()) {
    if (o->duration_s == 0) return "--sweep-rates needs --duration > 0";
    // Each rate runs for --duration; a request budget would end its
    // arrivals early, and one per-second series per file is written.
    if (o->requests != 0) return "--sweep-rates runs each rate for --duration: drop --requests";
    if (!o->per_second_csv.empty())
      return "--per-second-csv writes one run's seconds; a sweep writes --sweep-csv";
    o->mode = LoadMode::kOpen;
    if (o->sweep_csv.empty()) o->sweep_csv = "sweep.csv";
  }
  if (o->dump_workload && o->requests == 0) return "--dump-workload needs --requests";
  return "";
}

}  // namespace encoderd::loadtest
