#include "core/file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace encoderd {
namespace {

namespace fs = std::filesystem;

TEST(ReadWholeFile, ReadsEveryByte) {
  const fs::path path = fs::temp_directory_path() / "encoderd_file_test_bytes";
  const std::string bytes("a\0b\r\n\xff", 6);
  std::ofstream(path, std::ios::binary) << bytes;
  auto read = ReadWholeFile(path.string(), "vocab file");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, bytes);
  std::ofstream(path, std::ios::binary | std::ios::trunc);
  read = ReadWholeFile(path.string(), "vocab file");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, "");
  fs::remove(path);
}

// Missing, a directory, or a FIFO (which would block a reader until someone
// writes to it): NotFound, naming what it is and where.
TEST(ReadWholeFile, OnlyRegularFiles) {
  const fs::path dir = fs::temp_directory_path() / "encoderd_file_test_dir";
  fs::remove_all(dir);
  fs::create_directories(dir / "sub");
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  for (const char* name : {"missing", "sub", "fifo"}) {
    SCOPED_TRACE(name);
    const std::string path = (dir / name).string();
    auto read = ReadWholeFile(path, "vocab file");
    ASSERT_FALSE(read.ok());
    EXPECT_EQ(read.status().code(), StatusCode::kNotFound);
    EXPECT_EQ(read.status().message(), "vocab file " + path + " does not exist or is not a file");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace encoderd
