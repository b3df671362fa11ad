// Reading a whole file, for the small files a model or a server is described
// by (vocabularies, tokenizer models, JSON and YAML configs).
#pragma once

#include <string>

#include "core/status.h"

namespace encoderd {

// The whole of the regular file `path`. Errors name `what` and the path:
// NotFound when it is missing, not a regular file (a directory, or a FIFO
// that would block the reader) or cannot be opened; DataLoss when a read
// fails.
StatusOr<std::string> ReadWholeFile(const std::string& path, const std::string& what);

}  // namespace encoderd
