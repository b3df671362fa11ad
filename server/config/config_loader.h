// Builds the effective ServerConfig from its sources, lowest precedence first:
// the struct defaults, the YAML file (--config or ENCODERD_CONFIG), ENCODERD_*
// environment variables, command-line flags.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "server/config/config.h"

namespace encoderd::server {

// Returns the value of an environment variable, or nullptr when unset.
using EnvLookup = std::function<const char*(const char* name)>;

// The process environment.
const char* ProcessEnv(const char* name);

// Usage text of the flags (for `encoderd serve --help`).
std::string ConfigFlagsUsage();

// `args` are the words after "serve". Errors name the flag, the variable, or
// the file, line and key.
StatusOr<ServerConfig> LoadServerConfig(const std::vector<std::string>& args,
                                        const EnvLookup& env = ProcessEnv);

}  // namespace encoderd::server
