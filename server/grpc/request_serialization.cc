#include "server/grpc/request_serialization.h"

#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

#include <mutex>

namespace encoderd::server {
namespace {

// libprotobuf logs, among others, "String field '...' contains invalid UTF-8
// data when parsing a protocol buffer" for every such request: at most debug.
void LogToSpdlog(google::protobuf::LogLevel level, const char* filename, int line,
                 const std::string& message) {
  if (level == google::protobuf::LOGLEVEL_FATAL) {
    spdlog::critical("protobuf {}:{}: {}", filename, line, message);
    return;
  }
  spdlog::debug("protobuf {}:{}: {}", filename, line, message);
}

}  // namespace

void RouteProtobufLogsToSpdlog() {
  static std::once_flag once;
  std::call_once(once, [] { google::protobuf::SetLogHandler(&LogToSpdlog); });
}

}  // namespace encoderd::server
