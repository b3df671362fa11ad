#!/bin/bash
# Builds what the GPU runs (bench/gpu/run.sh) on this machine and packs it,
# with the shared libraries it needs, into .gpu/bundle.tar.xz: the machine
# with the GPU needs only a driver, cuBLASLt 13 and Python with PyTorch.
#
#   bash bench/gpu/bundle.sh        # then carry .gpu to the GPU machine
#
# build-gpu/ is a Release build without LibTorch (its libraries would not
# fit) for Hopper (sm_90); fixtures come from build/fixtures (ctest -R
# generate_fixtures makes them), the token ids from bench/make_inputs.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DENCODERD_WITH_TORCH=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null
ninja -C build-gpu encoderd encoderd_tests encoderd-loadtest encoderd_sentencepiece
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,lib,inputs} "$stage/fixtures/models" .gpu
cp build-gpu/cli/encoderd build-gpu/tests/encoderd_tests build-gpu/loadtest/encoderd-loadtest \
  "$stage/bin/"
cp build-gpu/engine/text/libencoderd_sentencepiece.so "$stage/lib/"
# Every library outside glibc, libstdc++ and cuBLASLt (the GPU machine has those).
ldd "$stage"/bin/* "$stage"/lib/*.so | awk '/=>/ {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so|ld-linux|libcublas' |
  xargs -r -I{} cp -L {} "$stage/lib/"
for d in build/fixtures/models/*; do
  [ "$(basename "$d")" = bad ] || cp -r "$d" "$stage/fixtures/models/"
done
/usr/bin/python3 -c "
import json, sys; sys.path.insert(0, 'bench'); import make_inputs
json.dump(make_inputs.workloads(30522), open('$stage/inputs/workloads.json', 'w'))"
# The tests read their fixtures from the path compiled in: run.sh links it.
echo "$PWD/build-gpu/fixtures" > "$stage/fixtures_dir"
tar -C "$stage" -cf - . | xz -T2 -6 > .gpu/bundle.tar.xz
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.gpu/' >> .git/info/exclude; }
ls -la .gpu/bundle.tar.xz
