// Workload generation and command-line parsing of encoderd-loadtest.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "loadtest/load_options.h"
#include "loadtest/report_format.h"
#include "loadtest/workload.h"

namespace encoderd::loadtest {
namespace {

int WordCount(const std::string& text) {
  std::istringstream in(text);
  std::string w;
  int n = 0;
  while (in >> w) ++n;
  return n;
}

TEST(LoadtestWorkloadTest, FixedLengthTextsAreDeterministicPerIndex) {
  WorkloadSpec spec;
  spec.texts_per_request = 3;
  spec.min_words = spec.max_words = 12;
  spec.seed = 5;
  Workload w(spec);
  std::set<std::string> distinct;
  for (uint64_t i = 0; i < 200; ++i) {
    auto texts = w.Texts(i);
    ASSERT_EQ(texts.size(), 3u);
    for (const auto& t : texts) {
      EXPECT_EQ(WordCount(t), 12) << t;
      distinct.insert(t);
    }
    EXPECT_EQ(texts, w.Texts(i));
  }
  EXPECT_GT(distinct.size(), 590u);  // 600 texts, practically all different
  spec.seed = 6;
  EXPECT_NE(Workload(spec).Texts(0), w.Texts(0));
}

TEST(LoadtestWorkloadTest, UniformLengthsCoverTheRange) {
  WorkloadSpec spec;
  spec.length_mode = TextLengthMode::kUniform;
  spec.min_words = 3;
  spec.max_words = 9;
  Workload w(spec);
  std::set<int> lengths;
  for (uint64_t i = 0; i < 2000; ++i) {
    const int n = WordCount(w.Texts(i)[0]);
    EXPECT_GE(n, 3);
    EXPECT_LE(n, 9);
    lengths.insert(n);
  }
  EXPECT_EQ(lengths.size(), 7u);
}

TEST(LoadtestWorkloadTest, CorpusFileIsSampled) {
  const std::string path = ::testing::TempDir() + "loadtest_corpus.txt";
  std::ofstream(path) << "first line\r\n\nsecond line\nthird\n";
  LoadOptions o;
  const char* argv[] = {"encoderd-loadtest", "--text-file", path.c_str(), "--texts=2"};
  ASSERT_EQ(ParseLoadOptions(4, argv, &o), "");
  ASSERT_EQ(o.workload.corpus, (std::vector<std::string>{"first line", "second line", "third"}));
  Workload w(o.workload);
  std::set<std::string> seen;
  for (uint64_t i = 0; i < 100; ++i)
    for (const auto& t : w.Texts(i)) seen.insert(t);
  EXPECT_EQ(seen.size(), 3u);
  std::remove(path.c_str());
}

TEST(LoadtestWorkloadTest, OptionsParseAndRejectBadValues) {
  LoadOptions o;
  const char* ok[] = {
      "x",    "--mode",     "open", "--rate=250.5", "--rpc", "embed_stream", "--words",
      "4-32", "--requests", "100",  "--duration",   "0",     "--json"};
  ASSERT_EQ(ParseLoadOptions(13, ok, &o), "");
  EXPECT_EQ(o.mode, LoadMode::kOpen);
  EXPECT_DOUBLE_EQ(o.rate, 250.5);
  EXPECT_EQ(o.rpc, RpcKind::kEmbedStream);
  EXPECT_EQ(o.workload.length_mode, TextLengthMode::kUniform);
  EXPECT_EQ(o.workload.max_words, 32);
  EXPECT_TRUE(o.json);
  const char* rerank[] = {"x", "--rpc", "rerank"};
  ASSERT_EQ(ParseLoadOptions(3, rerank, &o), "");
  EXPECT_EQ(o.rpc, RpcKind::kRerank);
  EXPECT_STREQ(RpcKindName(o.rpc), "rerank");
  EXPECT_EQ(o.prompt_name, "");
  const char* prompted[] = {"x", "--prompt-name", "query"};
  ASSERT_EQ(ParseLoadOptions(3, prompted, &o), "");
  EXPECT_EQ(o.prompt_name, "query");

  auto error = [](std::vector<const char*> args) {
    LoadOptions opts;
    args.insert(args.begin(), "x");
    return ParseLoadOptions(static_cast<int>(args.size()), args.data(), &opts);
  };
  EXPECT_NE(error({"--rate", "-1"}).find("--rate"), std::string::npos);
  EXPECT_NE(error({"--words", "9-3"}), "");
  EXPECT_NE(error({"--duration", "0"}).find("never stop"), std::string::npos);
  EXPECT_NE(error({"--sweep-rates", "100,50"}).find("--sweep-rates"), std::string::npos);
  // A sweep runs each rate for --duration: a request budget ended its
  // arrivals early, unseen by the saturation test, and --per-second-csv was
  // not written.
  EXPECT_NE(error({"--sweep-rates", "10,20", "--requests", "40"}).find("--requests"),
            std::string::npos);
  EXPECT_NE(error({"--sweep-rates", "10,20", "--per-second-csv", "s.csv"}).find("--per-second-csv"),
            std::string::npos);
  EXPECT_NE(error({"--text-file", "/nonexistent/file"}).find("/nonexistent/file"),
            std::string::npos);
  EXPECT_NE(error({"--frobnicate"}).find("--frobnicate"), std::string::npos);
  EXPECT_NE(error({"--concurrency"}).find("needs a value"), std::string::npos);
  // Values past an int or past nanoseconds' range are refused, not cut
  // (--max-in-flight 4294967296 became 0: the run waited forever; --duration
  // inf ended it at once).
  for (const std::vector<const char*>& bad :
       {std::vector<const char*>{"--max-in-flight", "4294967296"},
        {"--texts", "4294967297"},
        {"--words", "4294967297"},
        {"--words", "1-4294967297"},
        {"--words", "4294967297-5"},
        {"--words", "-3"},
        {"--words", "1--4294967295"},
        {"--duration", "inf"},
        // An infinite rate sent without end, none counted; 1e-12 slept 292
        // years (its offset overflowed).
        {"--rate", "inf"},
        {"--rate", "nan"},
        {"--rate", "2e6"},
        {"--sweep-rates", "10,inf"},
        {"--warmup", "1e300"},
        {"--timeout-ms", "9223372036854775807"}}) {
    EXPECT_NE(error(bad).find(bad[0]), std::string::npos) << bad[0] << " " << bad[1];
  }
}

TEST(LoadtestWorkloadTest, RecorderCountsAndSaturation) {
  Recorder r;
  for (int i = 0; i < 100; ++i) {
    CallOutcome c;
    c.intended_ns = i * 10'000'000LL;  // 100 req/s over 1 s
    c.sent_ns = c.intended_ns + 1000;
    c.done_ns = c.intended_ns + 5'000'000;
    c.texts = 2;
    c.token_count = 10;
    c.status_code = i < 3 ? 14 : 0;  // three UNAVAILABLE
    r.Record(c);
  }
  RunStats s = r.Snapshot();
  EXPECT_EQ(s.ok, 97);
  EXPECT_EQ(s.errors, 3);
  EXPECT_EQ(s.errors_by_code.at(14), 3);
  EXPECT_EQ(s.tokens, 970);
  EXPECT_EQ(s.texts, 194);
  EXPECT_NEAR(s.ElapsedSeconds(), 0.995, 1e-9);
  EXPECT_EQ(s.latency_us.ValueAtQuantile(0.5), 5000);
  // Failed calls count in latency_all_us only (they were in no latency).
  EXPECT_EQ(s.latency_us.Count(), 97);
  EXPECT_EQ(s.latency_all_us.Count(), 100);
  EXPECT_TRUE(IsSaturated(s));  // 3% errors
  EXPECT_NE(SweepCsvRow(100, s).find(",97,3,"), std::string::npos);
  EXPECT_EQ(SweepCsvRow(100, s).back(), '\n');

  Recorder healthy, backlog;
  for (int i = 0; i < 100; ++i) {
    CallOutcome c;
    c.intended_ns = i * 10'000'000LL;  // arrivals over 1 s
    c.sent_ns = c.intended_ns;
    c.done_ns = c.intended_ns + 5'000'000;
    healthy.Record(c);
    c.done_ns = c.intended_ns + 5'000'000 + i * 5'000'000LL;  // backlog grows
    backlog.Record(c);
  }
  EXPECT_FALSE(IsSaturated(healthy.Snapshot()));
  EXPECT_NEAR(healthy.Snapshot().LatencyGrowth(), 0, 1e-9);
  // 5 ms more per 10 ms of arrivals: the server completes 2/3 of them.
  EXPECT_NEAR(backlog.Snapshot().LatencyGrowth(), 0.5, 1e-9);
  EXPECT_TRUE(IsSaturated(backlog.Snapshot()));

  // A slow server that keeps up, and one slow call at the very end, are
  // not saturation (both were, read as OK calls per second from the first
  // send to the last completion against the arrivals' rate).
  Recorder slow, straggler;
  for (int i = 0; i < 50; ++i) {
    CallOutcome c;
    c.intended_ns = i * 200'000'000LL;  // 5 req/s over 10 s
    c.sent_ns = c.intended_ns;
    c.done_ns = c.intended_ns + 2'000'000'000LL;  // each 2 s
    slow.Record(c);
  }
  for (int i = 0; i < 99; ++i) {
    CallOutcome c;
    c.intended_ns = i * 100'000'000LL;  // 10 req/s over 10 s
    c.sent_ns = c.intended_ns;
    c.done_ns = c.intended_ns + (i == 98 ? 3'000'000'000LL : 5'000'000LL);
    straggler.Record(c);
  }
  EXPECT_FALSE(IsSaturated(slow.Snapshot()));
  EXPECT_FALSE(IsSaturated(straggler.Snapshot()));
  EXPECT_LT(straggler.Snapshot().LatencyGrowth(), 0.05);
  // The sustained column.
  EXPECT_NE(SweepCsvRow(10, straggler.Snapshot()).find(",1,"), std::string::npos);
}

// The sweep CSV's p99 is of OK calls; p99_all_ms counts every call, a failed
// one at its failure, so that a rate whose slowest 1% fail is not read as
// fast (serving_table.sh picks its rates by it; until 2026-12-04 the CSV
// had the OK calls' p99 only).
TEST(LoadtestWorkloadTest, TheSweepCsvHasThePercentileOfEveryCall) {
  EXPECT_EQ(SweepCsvHeader().substr(SweepCsvHeader().rfind(',')), ",p99_all_ms\n");
  Recorder r;
  for (int i = 0; i < 100; ++i) {
    CallOutcome c;
    c.intended_ns = i * 10'000'000LL;
    c.sent_ns = c.intended_ns;
    c.done_ns = c.intended_ns + (i < 2 ? 400'000'000LL : 4'000'000LL);
    c.status_code = i < 2 ? 4 : 0;  // two DEADLINE_EXCEEDED at 400 ms
    r.Record(c);
  }
  const std::string row = SweepCsvRow(100, r.Snapshot());
  std::vector<std::string> fields;
  std::stringstream cells(row);
  for (std::string cell; std::getline(cells, cell, ',');) fields.push_back(cell);
  ASSERT_EQ(fields.size(), 14u) << row;
  EXPECT_NEAR(std::stod(fields[7]), 4, 0.05) << row;    // p99_ms: OK calls
  EXPECT_NEAR(std::stod(fields[13]), 400, 2.5) << row;  // p99_all_ms
}

TEST(LoadtestWorkloadTest, OpenLoopUnaryJsonHasNoConcurrency) {
  LoadOptions o;
  o.mode = LoadMode::kOpen;
  const RunStats none;
  EXPECT_TRUE(ReportJson(o, 10, none)["concurrency"].is_null());
  o.rpc = RpcKind::kEmbedStream;  // its streams are the slots
  EXPECT_EQ(ReportJson(o, 10, none)["concurrency"], o.concurrency);
  o.rpc = RpcKind::kEmbed;
  o.mode = LoadMode::kClosed;
  EXPECT_EQ(ReportJson(o, 0, none)["concurrency"], o.concurrency);
}

TEST(LoadtestWorkloadTest, RecorderCountsCallsSentPastTheirDeadline) {
  Recorder r;
  CallOutcome on_time;
  on_time.status_code = 4;  // DEADLINE_EXCEEDED: the server's
  r.Record(on_time);
  CallOutcome late = on_time;  // the client's: sent after the deadline
  late.sent_past_deadline = true;
  r.Record(late);
  const RunStats s = r.Snapshot();
  EXPECT_EQ(s.errors_by_code.at(4), 2);
  EXPECT_EQ(s.sent_past_deadline, 1);
  EXPECT_NE(FormatReportText(LoadOptions{}, 0, s).find("1 calls sent after their deadline"),
            std::string::npos);
  EXPECT_EQ(ReportJson(LoadOptions{}, 0, s)["sent_past_deadline"], 1);
}

}  // namespace
}  // namespace encoderd::loadtest
