// JSON written for people and scripts (encoderd inspect/encode/bench
// --json; the load tool, which uses nothing of core/, has its own copy in
// loadtest/main.cc). Strings that are not valid UTF-8 (a Latin-1 directory
// name, a checkpoint's tensor name, a line of a corpus file) get
// U+FFFD in place of each bad byte: nlohmann's dump() throws on them by
// default, and nothing caught it, so the command aborted.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace encoderd {

// json.dump(indent) with invalid UTF-8 replaced (-1: one line).
inline std::string JsonText(const nlohmann::json& json, int indent = -1) {
  return json.dump(indent, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

}  // namespace encoderd
