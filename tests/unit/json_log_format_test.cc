#include "server/metrics/json_log_format.h"

#include <gtest/gtest.h>
#include <spdlog/details/log_msg.h>

#include <nlohmann/json.hpp>
#include <string>

namespace encoderd::server {
namespace {

// Formats one message as the daemon's JSON log line and parses it back.
nlohmann::json FormatAndParse(const std::string& message) {
  auto formatter = MakeJsonLogFormatter();
  spdlog::details::log_msg msg("encoderd", spdlog::level::err, message);
  spdlog::memory_buf_t out;
  formatter->format(msg, out);
  return nlohmann::json::parse(std::string(out.data(), out.size()));
}

TEST(JsonLogFormatTest, EveryMessageIsOneValidJsonObject) {
  for (const std::string& message :
       {std::string("plain"), std::string("model \"xlmr\" failed: C:\\path"),
        std::string("two\nlines\tand\r"), std::string("nul \x01 bell \x07", 12),
        std::string("Привет, 世界 🙂"), std::string("")}) {
    const nlohmann::json line = FormatAndParse(message);
    EXPECT_EQ(line.at("msg").get<std::string>(), message);
    EXPECT_EQ(line.at("level").get<std::string>(), "error");
    EXPECT_FALSE(line.at("time").get<std::string>().empty());
  }
}

}  // namespace
}  // namespace encoderd::server
