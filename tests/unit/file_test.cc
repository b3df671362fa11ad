#include "core/file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace encoderd {
namespace {

namespace fs = std::filesystem;

// A directory of this test's own (tests may run in parallel).
fs::path TestDir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("encoderd_file_test_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(ReadWholeFile, ReadsEveryByte) {
  const fs::path dir = TestDir("bytes");
  const fs::path path = dir / "vocab.txt";
  const std::string bytes("a\0b\r\n\xff", 6);
  std::ofstream(path, std::ios::binary) << bytes;
  auto read = ReadWholeFile(path.string(), "vocab file");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, bytes);
  // More than one read's worth.
  const std::string big(200000, 'x');
  std::ofstream(path, std::ios::binary | std::ios::trunc) << big;
  read = ReadWholeFile(path.string(), "vocab file");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, big);
  std::ofstream(path, std::ios::binary | std::ios::trunc);
  read = ReadWholeFile(path.string(), "vocab file");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, "");
  fs::remove_all(dir);
}

// Missing, a directory, or a FIFO (which would block a reader until someone
// writes to it): NotFound, naming what it is, where, and why.
TEST(ReadWholeFile, OnlyRegularFiles) {
  const fs::path dir = TestDir("kinds");
  fs::create_directories(dir / "sub");
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  const struct {
    const char* name;
    const char* why;
  } cases[] = {{"missing", " does not exist"},
               {"sub", " is a directory"},
               {"fifo", " is not a regular file (a FIFO, socket or device)"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = (dir / c.name).string();
    auto read = ReadWholeFile(path, "vocab file");
    ASSERT_FALSE(read.ok());
    EXPECT_EQ(read.status().code(), StatusCode::kNotFound);
    EXPECT_EQ(read.status().message(), "vocab file " + path + c.why);
  }
  fs::remove_all(dir);
}

// A config may come from a pipe (--config /dev/stdin, or <(...)): read to
// its end. A directory is still refused.
TEST(ReadWholeFile, AnyStreamReadsAPipe) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string text = "listen:\n  port: 50051\n";
  ASSERT_EQ(::write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fds[1]);
  auto read =
      ReadWholeFile("/dev/fd/" + std::to_string(fds[0]), "config file", FileKind::kAnyStream);
  ::close(fds[0]);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, text);
  const fs::path dir = TestDir("stream");
  read = ReadWholeFile(dir.string(), "config file", FileKind::kAnyStream);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().message(), "config file " + dir.string() + " is a directory");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace encoderd
