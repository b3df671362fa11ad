// Reading the JSON files of a model folder (config.json, modules.json, ...),
// for the readers inside engine/model only.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace encoderd {

// The parsed file, or an error naming it (cannot open, nested deeper than
// kMaxJsonDepth, not valid JSON).
StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);

}  // namespace encoderd
