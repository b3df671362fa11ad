// `encoderd bench`: encoderd's CPU encoder against PyTorch's own execution
// paths (slow path, BetterTransformer fastpath, nested-tensor fastpath) run
// through LibTorch in the same process, on the same random weights and token ids.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace encoderd::server {

// `args` are the words after "bench". Returns the process exit code.
int RunBenchCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace encoderd::server
