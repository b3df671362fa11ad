# Sourced by bench/gpu/run.sh and check.sh on the GPU machine, from the
# repository root with .gpu/bundle.tar.xz (bench/gpu/bundle.sh): unpacks the
# bundle into /tmp/g, points the loader at it and at the machine's cuBLASLt,
# links the fixtures where the tests look for them, and gives stamp().
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"; export OUT
T0=$(date +%s)
stamp() { echo "=== $1 ($(( $(date +%s) - T0 )) s)"; }
mkdir -p /tmp/g && tar -xJf .gpu/bundle.tar.xz -C /tmp/g
LT=$(find / -xdev -name 'libcublasLt.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=/tmp/g/lib:$(dirname "$LT")
export ENCODERD_SENTENCEPIECE_LIB=/tmp/g/lib/libencoderd_sentencepiece.so
# The tests look for their fixtures where the build put them.
FIXTURES=$(cat /tmp/g/fixtures_dir)
mkdir -p "$(dirname "$FIXTURES")" && ln -sfn /tmp/g/fixtures "$FIXTURES"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
# make_model: the BERT-base-shaped checkpoint and the workloads' token ids in /tmp/bi.
make_model() {
  mkdir -p /tmp/bi && python3 tests/fixtures/make_bert_base.py /tmp/bi/model > /dev/null &&
    cp /tmp/g/inputs/workloads.json /tmp/bi/
}
