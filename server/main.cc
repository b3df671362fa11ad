// encoderd: one binary, several subcommands.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "server/inspect_command.h"

namespace {

int Usage(FILE* out) {
  std::fprintf(out,
               "usage: encoderd <command> [args]\n"
               "commands:\n"
               "  inspect MODEL_DIR [--json]   describe a model directory\n");
  return out == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage(stderr);
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "-h" || command == "--help" || command == "help") return Usage(stdout);
  if (command == "inspect") return encoderd::server::RunInspectCommand(args, std::cout, std::cerr);
  std::fprintf(stderr, "encoderd: unknown command '%s'\n", command.c_str());
  return Usage(stderr);
}
