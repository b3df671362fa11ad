#!/usr/bin/env python3
"""Checks every #include of the project against its layers.

Each part of the tree may include only the parts it is allowed to use
(BELOW; docs/architecture.md): core <- kernels <- engine (io, text <- model
<- runtime); server/metrics uses
only core; server/config the engine; server/core both; server/exporter and
server/grpc server/core and below; server/net only core and server/metrics;
cli everything.

Outside kernels/, the device implementations (kernels/cpu/, kernels/cuda/)
are private: the engine calls the device-neutral ops of kernels/*.h, and
only the CUDA backend's context header (device memory, stream, graphs) is
shared.

Outside headers are confined: gRPC to the gRPC edge, LibTorch to
engine/torch, prometheus-cpp to the metrics parts. The daemon does not
include the generated service at all (it registers raw callback handlers):
only the load tool, a client, does.

usage: check_layers.py [--root DIR] [--self-test]
Prints each violation as `file:line: message`; exit status 1 when any.
"""
import argparse
import os
import re
import sys

# The parts, most specific prefix first, with the project parts each may include.
BELOW = {
    "core": [],
    "kernels": ["core"],
    "engine/io": ["core"],
    "engine/text": ["core"],
    "engine/model": ["core", "engine/io", "engine/text"],
    "engine/runtime": ["core", "kernels", "engine/io", "engine/text", "engine/model"],
    "engine/torch": ["core", "engine/io", "engine/text", "engine/model"],
    "server/metrics": ["core", "proto/grpc_code_name.h"],
    "server/config": ["core", "kernels", "engine"],
    "server/core": ["core", "kernels", "engine", "server/config", "server/metrics"],
    "server/exporter": ["core", "kernels", "engine", "server/config", "server/metrics",
                        "server/core"],
    "server/net": ["core", "server/metrics"],
    "server/grpc": ["core", "kernels", "engine", "server/config", "server/metrics",
                    "server/core", "proto"],
    "cli": ["core", "kernels", "engine", "server", "proto"],
    "loadtest": ["proto"],
}
# Folders private to kernels/, and the headers of them the rest may include.
PRIVATE = {
    "kernels/cpu": [],
    "kernels/cuda": ["kernels/cuda/cuda_context.h"],
}
# Outside headers (by include prefix) and the parts that may use them.
CONFINED = {
    "grpcpp/": ["server/grpc", "cli/serve_command.cc", "loadtest"],
    "grpc/": ["server/grpc", "cli/serve_command.cc", "loadtest"],
    "torch/": ["engine/torch"],
    "ATen/": ["engine/torch"],
    "prometheus/": ["server/metrics", "server/exporter"],
    "google/protobuf/": ["server/grpc", "loadtest"],
}
GENERATED_SERVICE = "proto/encoderd.grpc.pb.h"
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
SOURCES = (".h", ".cc", ".cu", ".cuh")


def part_of(path):
    """The most specific part that holds `path`, or None (tests, tools)."""
    best = None
    for part in BELOW:
        if path == part or path.startswith(part + "/"):
            if best is None or len(part) > len(best):
                best = part
    return best


def within(path, prefixes):
    """`path` is one of `prefixes` or lies under one."""
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def check(path, text):
    """Violations of one file: a list of (line, message)."""
    part = part_of(path)
    if part is None:
        return []
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        quoted, header = m.group(1) == '"', m.group(2)
        if quoted:
            if header == GENERATED_SERVICE and part != "loadtest":
                problems.append((number, f"includes {header}: the daemon registers raw callback "
                                         "handlers (server/grpc/encoder_service_base.h)"))
                continue
            target = part_of(header)
            if target is None and not header.startswith("proto/"):
                continue  # a header outside the layered tree
            private = [p for p in PRIVATE if within(header, [p])]
            if private and not within(path, ["kernels"]) and header not in PRIVATE[private[0]]:
                problems.append((number, f"{header} is private to kernels/: include the op's "
                                         "device-neutral header (kernels/*.h)"))
                continue
            if target == part or within(header, BELOW[part]):
                continue
            problems.append((number, f"{part} may not include {header} "
                                     f"(allowed: {', '.join(BELOW[part]) or 'nothing'})"))
        else:
            for prefix, allowed in CONFINED.items():
                if header.startswith(prefix) and not within(path, allowed):
                    problems.append((number, f"<{header}> is confined to {', '.join(allowed)}"))
    return problems


def self_test():
    cases = [
        ("kernels/linear.cc", '#include "engine/runtime/encoder.h"\n', 1),
        ("engine/io/state_dict.cc", '#include "engine/model/model_spec.h"\n', 1),
        ("engine/model/model_spec.cc", '#include "engine/io/checkpoint_reader.h"\n', 0),
        ("server/core/dynamic_batcher.cc", '#include "server/grpc/grpc_status.h"\n', 1),
        ("server/core/dynamic_batcher.cc", "#include <grpcpp/server.h>\n", 1),
        ("server/grpc/encoder_service.h", '#include "proto/encoderd.grpc.pb.h"\n', 1),
        ("engine/runtime/cpu_encoder.cc", "#include <torch/script.h>\n", 1),
        ("server/core/served_model.cc", "#include <google/protobuf/message.h>\n", 1),
        ("server/core/served_model.h", '#include "server/config/config.h"\n', 0),
        ("loadtest/unary_sink.cc", '#include "proto/encoderd.grpc.pb.h"\n', 0),
        ("cli/serve_command.cc", "#include <grpcpp/server.h>\n", 0),
        ("tests/unit/x_test.cc", '#include "server/grpc/grpc_status.h"\n', 0),
        ("engine/runtime/cpu_encoder.cc", '#include "kernels/cpu/linear_cpu.h"\n', 1),
        ("engine/runtime/cuda_encoder.cc", '#include "kernels/cuda/cuda_ops.h"\n', 1),
        ("engine/runtime/cuda_encoder.cc", '#include "kernels/cuda/cuda_context.h"\n', 0),
        ("engine/runtime/cuda_encoder.cc", '#include "kernels/linear.h"\n', 0),
        ("kernels/linear.cc", '#include "kernels/cpu/linear_cpu.h"\n', 0),
        ("cli/bench_command.cc", '#include "kernels/cpu/bf16_convert.h"\n', 1),
    ]
    for path, text, want in cases:
        got = len(check(path, text))
        if got != want:
            print(f"self-test: {path} {text.strip()}: {got} violations, want {want}")
            return 1
    print(f"self-test: {len(cases)} cases ok")
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    root = os.path.abspath(args.root)
    count = files = 0
    for top in sorted(set(p.split("/")[0] for p in BELOW)):
        for directory, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith(SOURCES):
                    continue
                full = os.path.join(directory, name)
                path = os.path.relpath(full, root)
                with open(full, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                files += 1
                for line, message in check(path, text):
                    print(f"{path}:{line}: {message}")
                    count += 1
    print(f"check_layers: {files} files, {count} violations")
    return 1 if count else 0


if __name__ == "__main__":
    sys.exit(main())
