// The commands' argument parser (cli/flags.h) and the commands that use it.
#include "cli/flags.h"

#include <gtest/gtest.h>

#include <sstream>

#include "cli/bench_command.h"
#include "cli/encode_command.h"
#include "cli/inspect_command.h"

namespace encoderd::server {
namespace {

TEST(FlagsTest, ReadsEveryKindAndNamesTheBadOne) {
  std::string dir, mode = "a";
  std::vector<std::string> texts;
  int threads = 0;
  double seconds = 1;
  bool json = false;
  Flags flags;
  flags.Positional("MODEL_DIR", &dir);
  flags.Strings("--text", &texts);
  flags.String("--mode", &mode);
  flags.Int("--threads", &threads, 0);
  flags.Number("--seconds", &seconds, 0);
  flags.Switch("--json", &json);
  EXPECT_EQ(flags.Parse({"m", "--text", "x", "--json", "--text", "y", "--threads", "3", "--seconds",
                         "0.5", "--mode", "b"}),
            "");
  EXPECT_EQ(dir, "m");
  EXPECT_EQ(texts, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(threads, 3);
  EXPECT_EQ(seconds, 0.5);
  EXPECT_TRUE(json);
  EXPECT_EQ(mode, "b");

  EXPECT_EQ(flags.Parse({"m", "--threads", "-1"}),
            "--threads: '-1' is not an integer in 0..2147483647");
  EXPECT_EQ(flags.Parse({"m", "--threads", "2x"}),
            "--threads: '2x' is not an integer in 0..2147483647");
  // Past the field's type: refused, not cut (2147483648 became INT_MIN, past
  // the check for >= 0; 4294967297 became 1).
  EXPECT_EQ(flags.Parse({"m", "--threads", "2147483648"}),
            "--threads: '2147483648' is not an integer in 0..2147483647");
  EXPECT_EQ(flags.Parse({"m", "--threads", "4294967297"}),
            "--threads: '4294967297' is not an integer in 0..2147483647");
  EXPECT_EQ(threads, 3);
  EXPECT_EQ(flags.Parse({"m", "--seconds"}), "--seconds needs a value");
  EXPECT_EQ(flags.Parse({"m", "--bogus"}), "unknown option --bogus");
  EXPECT_EQ(flags.Parse({"m", "n"}), "unexpected argument 'n'");
  EXPECT_EQ(flags.Parse({"--json"}), "missing MODEL_DIR");
}

// bench read --min-seconds with atof: "abc" became 0 and the benchmark ran.
TEST(FlagsTest, CommandsRefuseBadValuesBeforeDoingAnything) {
  std::ostringstream out, err;
  EXPECT_EQ(RunBenchCommand({"--min-seconds", "abc"}, out, err), 2);
  EXPECT_NE(err.str().find("--min-seconds: 'abc' is not a number"), std::string::npos) << err.str();
  err.str("");
  EXPECT_EQ(RunBenchCommand({"--workloads", "W1,W9"}, out, err), 2);
  EXPECT_NE(err.str().find("--workloads: 'W1,W9' is not a list of W1, W2, W3, W4"),
            std::string::npos)
      << err.str();
  err.str("");
  EXPECT_EQ(RunEncodeCommand({"dir", "--text", "a", "--device", "tpu"}, out, err), 2);
  EXPECT_NE(err.str().find("--device: 'tpu' is not cpu or cuda"), std::string::npos) << err.str();
  err.str("");
  EXPECT_EQ(RunEncodeCommand({"dir"}, out, err), 2);
  EXPECT_NE(err.str().find("give at least one --text"), std::string::npos) << err.str();
  err.str("");
  EXPECT_EQ(RunInspectCommand({"a", "b"}, out, err), 2);
  EXPECT_NE(err.str().find("unexpected argument 'b'"), std::string::npos) << err.str();
  EXPECT_EQ(out.str(), "");
}

}  // namespace
}  // namespace encoderd::server
