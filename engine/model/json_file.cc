#include "engine/model/json_file.h"

#include <fstream>
#include <sstream>

namespace encoderd {

StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return InvalidArgument(path + ": not valid JSON");
  return json;
}

}  // namespace encoderd
