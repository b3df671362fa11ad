// The JSON log line format: one object per line, {"time", "level", "msg"},
// with the message escaped so that any text (quotes, newlines, control
// characters) still makes valid JSON.
#pragma once

#include <spdlog/formatter.h>

#include <memory>
#include <string>
#include <string_view>

namespace encoderd::server {

// Appends `text` escaped for use inside a JSON string (without the quotes).
void AppendJsonEscaped(std::string_view text, std::string* out);

std::unique_ptr<spdlog::formatter> MakeJsonLogFormatter();

}  // namespace encoderd::server
