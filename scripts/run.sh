#!/usr/bin/env bash
# README command 1: install every dependency, build, and start the daemon
# serving the default model (models/langid) with the embedded default config
# (config/default.yaml): gRPC on :50051. Extra arguments go to `encoderd serve`
# (e.g. --port 50052, --config my.yaml). Stop it with Ctrl-C (SIGINT) or SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
export CCACHE_BASEDIR="$PWD"
BUILD=${ENCODERD_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" --target encoderd -j"$(nproc)"
exec "$BUILD/cli/encoderd" serve "$@"
