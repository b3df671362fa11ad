#include "server/metrics/json_log_format.h"

#include <spdlog/pattern_formatter.h>

#include <cstdio>

namespace encoderd::server {
namespace {

// The %j flag: the log message, JSON-escaped.
class JsonEscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    std::string escaped;
    AppendJsonEscaped(std::string_view(msg.payload.data(), msg.payload.size()), &escaped);
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonEscapedMessage>();
  }
};

}  // namespace

void AppendJsonEscaped(std::string_view text, std::string* out) {
  for (const char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(ch);  // UTF-8 passes through unchanged
        }
    }
  }
}

std::unique_ptr<spdlog::formatter> MakeJsonLogFormatter() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<JsonEscapedMessage>('j').set_pattern(
      R"({"time":"%Y-%m-%dT%H:%M:%S.%f%z","level":"%l","msg":"%j"})");
  return formatter;
}

}  // namespace encoderd::server
