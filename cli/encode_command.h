// `encoderd encode MODEL_DIR --text T [--text T ...]`: offline inference on a
// model directory, printing label scores (models with a classification head)
// or pooled embeddings.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace encoderd::server {

// `args` are the words after "encode". Returns the process exit code
// (0; 1 on a load or inference error; 2 on bad usage).
int RunEncodeCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace encoderd::server
