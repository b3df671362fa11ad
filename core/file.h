// Reading a whole file, for the small files a model or a server is described
// by (vocabularies, tokenizer models, JSON and YAML configs).
#pragma once

#include <string>

#include "core/status.h"

namespace encoderd {

enum class FileKind {
  kRegular,    // a regular file only: a FIFO or device in a model folder
               // would block or never end
  kAnyStream,  // anything but a directory (a config given as /dev/stdin or
               // <(...)), read to its end
};

// The whole of the file at `path`. Errors name `what` and the path, with the
// system's reason: NotFound when it does not exist, cannot be opened, or is
// not of `kind`; DataLoss when a read fails part way.
StatusOr<std::string> ReadWholeFile(const std::string& path, const std::string& what,
                                    FileKind kind = FileKind::kRegular);

}  // namespace encoderd
