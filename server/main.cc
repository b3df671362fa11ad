// encoderd: one binary, several subcommands.
#include <cstdio>
#include <cstring>
#include <string>

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
  if (command == "-h" || command == "--help" || command == "help") return Usage(stdout);
  std::fprintf(stderr, "encoderd: unknown command '%s'\n", command.c_str());
  return Usage(stderr);
}
