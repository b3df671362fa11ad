#include "core/file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace encoderd {

StatusOr<std::string> ReadWholeFile(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return NotFound(what + " " + path + " does not exist or is not a file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + what + " " + path);
  std::ostringstream data;
  data << in.rdbuf();
  if (in.bad()) return DataLoss("error reading " + what + " " + path);
  return data.str();
}

}  // namespace encoderd
