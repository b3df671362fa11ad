#include "engine/model/json_file.h"

#include "core/file.h"
#include "core/json_depth.h"

namespace encoderd {

StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path, "JSON file"));
  if (!JsonDepthAtMost(text)) {
    return InvalidArgument(path + ": nests deeper than " + std::to_string(kMaxJsonDepth) +
                           " levels");
  }
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return InvalidArgument(path + ": not valid JSON");
  return json;
}

}  // namespace encoderd
