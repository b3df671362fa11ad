// encoderd bench's inputs and outputs: the workloads file of
// bench/make_inputs.py, the hidden states written for bench/run_peers.py's
// accuracy cross-check, and the refusals. (Speed is never asserted.)
#include "cli/bench_command.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace encoderd::server {
namespace {

namespace fs = std::filesystem;

// A tiny shape so the test runs in milliseconds.
const std::vector<std::string> kTiny = {"--layers",      "1", "--hidden",  "16",
                                        "--heads",       "2", "--ffn",     "32",
                                        "--min-seconds", "0", "--engines", "encoderd"};

std::vector<std::string> Tiny(std::vector<std::string> more) {
  std::vector<std::string> args = kTiny;
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

fs::path TempDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("bench_command_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// `bench --help`, as `encoderd`'s usage points to it: the flags on stdout,
// exit 0 (it was an unknown option, exit 2).
TEST(BenchCommandTest, HelpPrintsTheUsage) {
  std::ostringstream out, err;
  EXPECT_EQ(RunBenchCommand({"--help"}, out, err), 0);
  EXPECT_NE(out.str().find("usage: encoderd bench"), std::string::npos) << out.str();
  EXPECT_EQ(err.str(), "");
}

TEST(BenchCommandTest, RunsTheGivenTokenIdsAndWritesEveryValidRow) {
  const fs::path dir = TempDir("rows");
  std::ofstream(dir / "workloads.json") << R"({"W2": [[5, 6, 7], [8, 9]], "W1": [[10]]})";
  std::ostringstream out, err;
  ASSERT_EQ(RunBenchCommand(Tiny({"--workloads", "W2", "--dtypes", "float32,bfloat16,int8",
                                  "--inputs", (dir / "workloads.json").string(), "--outputs",
                                  (dir / "out").string(), "--json"}),
                            out, err),
            0)
      << err.str();
  const auto json = nlohmann::json::parse(out.str());
  ASSERT_EQ(json["results"].size(), 3u);  // encoderd in three dtypes, no PyTorch
  for (const auto& r : json["results"]) {
    EXPECT_EQ(r["engine"], "encoderd");
    EXPECT_EQ(r["workload"], "W2");
    EXPECT_EQ(r["tokens"], 5);  // the file's ids, not the generated W2 (10 tokens)
    EXPECT_GE(r["runs_ms"].size(), 3u);
  }
  for (const char* dtype : {"float32", "bfloat16", "int8"}) {
    const fs::path rows = dir / "out" / dtype / "W2.f32";
    ASSERT_TRUE(fs::exists(rows)) << rows;
    EXPECT_EQ(fs::file_size(rows), 5u * 16 * sizeof(float));  // 5 tokens x hidden 16
  }
  EXPECT_FALSE(fs::exists(dir / "out" / "float32" / "W1.f32"));  // not asked for
}

TEST(BenchCommandTest, OpProfileGivesEachOpOfEachDtype) {
  std::ostringstream out, err;
  ASSERT_EQ(RunBenchCommand(
                Tiny({"--workloads", "W2", "--dtypes", "float32,int8", "--op-profile", "--json"}),
                out, err),
            0)
      << err.str();
  const auto json = nlohmann::json::parse(out.str());
  ASSERT_EQ(json["op_profile"].size(), 2u * 6);  // six ops a dtype
  double share = 0;
  for (const auto& r : json["op_profile"]) {
    EXPECT_EQ(r["workload"], "W2");
    share += r["share"].get<double>();
    const std::string op = r["op"];
    // GFLOP/s only where the op multiplies matrices (NaN is written as null).
    EXPECT_EQ(r["gflops"].is_null(), op == "embeddings" || op == "layer norms") << op;
  }
  EXPECT_NEAR(share, 2.0, 1e-9);  // each dtype's shares add up to 1

  std::ostringstream table, err2;
  ASSERT_EQ(RunBenchCommand(Tiny({"--workloads", "W2", "--dtypes", "bfloat16", "--op-profile"}),
                            table, err2),
            0)
      << err2.str();
  EXPECT_NE(table.str().find("| W2 | bfloat16 | attention.qkv | "), std::string::npos)
      << table.str();
}

TEST(BenchCommandTest, TableMarksWhatWasNotMeasuredWithADash) {
  // Without PyTorch there is no nested-fastpath time or output to compare
  // with: those cells read "-", not "nan"/"nanx".
  const fs::path dir = TempDir("table");
  std::ofstream(dir / "workloads.json") << R"({"W2": [[5, 6, 7], [8, 9]]})";
  std::ostringstream out, err;
  ASSERT_EQ(RunBenchCommand(Tiny({"--workloads", "W2", "--dtypes", "float32,int8", "--inputs",
                                  (dir / "workloads.json").string()}),
                            out, err),
            0)
      << err.str();
  const std::string table = out.str();
  EXPECT_EQ(table.find("nan"), std::string::npos) << table;
  int rows = 0;
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| W2 | encoderd |", 0) != 0) continue;
    ++rows;
    EXPECT_NE(line.find(" | - | - | - |"), std::string::npos) << line;
  }
  EXPECT_EQ(rows, 2) << table;
}

TEST(BenchCommandTest, RefusesInputsItCannotRun) {
  const fs::path dir = TempDir("refusals");
  std::ostringstream out, err;
  std::ofstream(dir / "bad_id.json") << R"({"W2": [[5, 99999999]]})";
  EXPECT_EQ(RunBenchCommand(Tiny({"--workloads", "W2", "--inputs", (dir / "bad_id.json").string()}),
                            out, err),
            1);
  EXPECT_NE(err.str().find("W2 has an id outside the vocabulary"), std::string::npos) << err.str();
  err.str("");
  std::ofstream(dir / "no_w1.json") << R"({"W2": [[5]]})";
  EXPECT_EQ(RunBenchCommand(Tiny({"--workloads", "W1", "--inputs", (dir / "no_w1.json").string()}),
                            out, err),
            1);
  EXPECT_NE(err.str().find("no workload W1"), std::string::npos) << err.str();
  err.str("");
  // Longer than the model takes: refused before any forward (was a forward's
  // error used as a result).
  std::string long_row = "[5";
  for (int i = 1; i < 600; ++i) long_row += ", 5";
  std::ofstream(dir / "too_long.json") << R"({"W4": [)" + long_row + "]]}";
  EXPECT_EQ(
      RunBenchCommand(Tiny({"--workloads", "W4", "--inputs", (dir / "too_long.json").string()}),
                      out, err),
      1);
  EXPECT_NE(err.str().find("W4 has a sequence of 600 tokens; the model takes 512"),
            std::string::npos)
      << err.str();
  err.str("");
  EXPECT_EQ(RunBenchCommand(Tiny({"--inputs", (dir / "missing.json").string()}), out, err), 1);
  EXPECT_NE(
      err.str().find("the --inputs file " + (dir / "missing.json").string() + " does not exist"),
      std::string::npos)
      << err.str();
  err.str("");
  // A directory opens as a stream and read as nothing (was "not a JSON
  // object").
  EXPECT_EQ(RunBenchCommand(Tiny({"--inputs", dir.string()}), out, err), 1);
  EXPECT_NE(err.str().find("the --inputs file " + dir.string() + " is a directory"),
            std::string::npos)
      << err.str();
  err.str("");
  EXPECT_EQ(RunBenchCommand({"--model", (dir / "m").string(), "--layers", "2"}, out, err), 2);
  EXPECT_NE(err.str().find("--model takes the shape from the model"), std::string::npos)
      << err.str();
  err.str("");
  EXPECT_EQ(RunBenchCommand({"--engines", "encoderd,onnx"}, out, err), 2);
  EXPECT_NE(err.str().find("--engines: 'encoderd,onnx' is not a list of encoderd, pytorch"),
            std::string::npos)
      << err.str();
  err.str("");
  // float16 is a GPU type: refused on the CPU, and PyTorch (LibTorch here)
  // does not run on the GPU in this command.
  EXPECT_EQ(RunBenchCommand({"--dtypes", "float16"}, out, err), 2);
  EXPECT_NE(err.str().find("dtype float16 is not supported on cpu"), std::string::npos)
      << err.str();
  err.str("");
  EXPECT_EQ(RunBenchCommand({"--dtypes", "float64"}, out, err), 2);
  EXPECT_NE(err.str().find("--dtypes: 'float64' is not a list of float32, bfloat16, int8, float16"),
            std::string::npos)
      << err.str();
  err.str("");
  EXPECT_EQ(RunBenchCommand({"--device", "cuda", "--engines", "encoderd,pytorch"}, out, err), 2);
  EXPECT_NE(err.str().find("--device cuda runs encoderd alone"), std::string::npos) << err.str();
  err.str("");
  EXPECT_EQ(
      RunBenchCommand({"--device", "cuda", "--engines", "encoderd", "--dtypes", "int8"}, out, err),
      2);
  EXPECT_NE(err.str().find("dtype int8 is not supported on cuda"), std::string::npos) << err.str();
  err.str("");
  EXPECT_EQ(RunBenchCommand({"--workloads", "W6"}, out, err), 2);
  err.str("");
  // A bad list is a usage error, found before any weights are made.
  EXPECT_EQ(RunBenchCommand(Tiny({"--workloads", "W2", "--dtypes", "int8", "--int8-fp32-linears",
                                  "ffn.middle"}),
                            out, err),
            2);
  EXPECT_NE(err.str().find("--int8-fp32-linears: 'ffn.middle'"), std::string::npos) << err.str();
}

}  // namespace
}  // namespace encoderd::server
