// encoderd: one binary, several subcommands.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli/bench_command.h"
#include "cli/encode_command.h"
#include "cli/inspect_command.h"
#include "cli/serve_command.h"

namespace {

int Usage(FILE* out) {
  std::fprintf(
      out,
      "usage: encoderd <command> [args]\n"
      "commands:\n"
      "  inspect MODEL_DIR [--json]   describe a model directory\n"
      "  encode MODEL_DIR --text T    offline inference: label scores or embeddings\n"
      "  serve [flags]                run the gRPC daemon (serve --help)\n"
      "  bench [flags]                encoderd's engine (and PyTorch's, with LibTorch) on\n"
      "                               seeded or given weights and token ids (bench --help)\n"
      "  health [--address A] [--port P] [--service NAME] [--timeout S]\n"
      "                               ask a running daemon's health (exit 0: SERVING)\n");
  return out == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage(stderr);
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "-h" || command == "--help" || command == "help") return Usage(stdout);
  if (command == "inspect") return encoderd::server::RunInspectCommand(args, std::cout, std::cerr);
  if (command == "serve") return encoderd::server::RunServeCommand(args);
  if (command == "health") return encoderd::server::RunHealthCommand(args);
  if (command == "bench") return encoderd::server::RunBenchCommand(args, std::cout, std::cerr);
  if (command == "encode") return encoderd::server::RunEncodeCommand(args, std::cout, std::cerr);
  std::fprintf(stderr, "encoderd: unknown command '%s'\n", command.c_str());
  return Usage(stderr);
}
