// `encoderd inspect MODEL_DIR [--json]`: what encoderd makes of a model
// directory (family, hyperparameters, tokenizer, every checkpoint tensor).
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "engine/model/model_spec.h"

namespace encoderd::server {

// The description as one JSON object: "directory", "family", "config" {...},
// "tokenizer" {...} or null, "checkpoint" {"file", "format", "num_tensors",
// "num_parameters", "bytes", "tensors": [{"name", "dtype", "shape"}],
// "placeholder_globals"}.
nlohmann::json DescribeModelJson(const ModelBundle& bundle);

// The same for people.
std::string DescribeModelText(const ModelBundle& bundle);

// `args` are the words after "inspect". Writes the description to `out` and
// errors to `err`; returns the process exit code (0, 1 on a load error, 2 on
// bad usage).
int RunInspectCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace encoderd::server
