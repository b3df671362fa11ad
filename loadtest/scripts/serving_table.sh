#!/usr/bin/env bash
# Reproduces the serving table of the README on this machine: for the default
# model (models/langid) and a BERT-base-shaped model, with dynamic batching off
# (max_batch_sequences 1) and on (config/default.yaml), it measures
#   (a) closed-loop throughput and latency with 32 concurrent clients, and
#   (c) the highest open-loop (Poisson) rate whose p99 latency is <= 100 ms,
#       from a geometric rate sweep (also plotted: OUT/<model>_<batching>.png).
# Each server runs alone on the machine; hold the build lock so no build
# competes for the cores: flock /tmp/encoderd-build.lock serving_table.sh
#
# usage: serving_table.sh [--out DIR] [--langid-dir DIR] [--no-bert] [--duration S] [--warmup S]
# Writes OUT/serving_table.md (printed at the end) and the raw CSV/JSON beside it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
server=${ENCODERD_BINARY:-$root/build/cli/encoderd}
loadtest=${ENCODERD_LOADTEST:-$root/build/loadtest/encoderd-loadtest}
out=/tmp/encoderd-serving
langid_dir=$root/models/langid
bert=1 duration=8 warmup=2
while (($#)); do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --langid-dir) langid_dir=$2; shift 2 ;;
    --no-bert) bert=0; shift ;;
    --duration) duration=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    *) echo "serving_table.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
workload=(--texts 1 --words 8-24 --seed 1 --timeout-ms 10000)
server_pid=""
cleanup() { [ -z "$server_pid" ] || { kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; }; }
trap cleanup EXIT

# start_server LOG MODEL_DIR [flags...]: sets $server_pid and $port.
start_server() {
  local log=$1 dir=$2
  shift 2
  "$server" serve --address 127.0.0.1 --port 0 --metrics-port 0 --model-dir "$dir" "$@" >"$log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do
    if grep -q "serving 1 model" "$log"; then
      port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -n1)
      return 0
    fi
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "serving_table.sh: server did not start:" >&2
  cat "$log" >&2
  exit 1
}

rates() {  # rates START FACTOR MAX -> comma-separated geometric series
  awk -v s="$1" -v f="$2" -v m="$3" 'BEGIN { r = s; o = ""; while (r <= m) { o = o (o ? "," : "") sprintf("%.3g", r); r *= f } print o }'
}

# measure NAME MODEL_DIR SWEEP_START SWEEP_MAX
measure() {
  local name=$1 dir=$2 start=$3 max=$4
  for batching in off on; do
    local tag=${name}_batching_${batching} flags=()
    [ "$batching" = on ] || flags=(--max-batch-sequences 1)
    echo "== $tag" >&2
    start_server "$out/$tag.server.log" "$dir" "${flags[@]}"
    "$loadtest" --target "127.0.0.1:$port" --mode closed --concurrency 32 --duration "$duration" \
      --warmup "$warmup" "${workload[@]}" --json-file "$out/$tag.closed.json" >&2
    "$loadtest" --target "127.0.0.1:$port" --sweep-rates "$(rates "$start" 1.5 "$max")" \
      --duration "$duration" --warmup "$warmup" "${workload[@]}" \
      --sweep-csv "$out/$tag.sweep.csv" --json-file "$out/$tag.sweep.json" >&2
    "$here/plot_sweep.sh" "$out/$tag.sweep.csv" "$out/$tag.png" "$tag" >&2 || true
    cleanup
    server_pid=""
  done
}

measure langid "$langid_dir" 50 50000
if ((bert)); then
  fixture=$root/build/fixtures/models/hf_bert_legacy
  [ -d "$fixture" ] || /usr/bin/python3 "$root/tests/fixtures/make_fixtures.py" --out "$root/build/fixtures"
  /usr/bin/python3 "$here/make_bert_base.py" --fixture "$fixture" --out "$out/bert_base_model" >&2
  measure bert_base "$out/bert_base_model" 1 500
fi

/usr/bin/python3 - "$out" "$root" <<'PY'
import csv, json, pathlib, platform, subprocess, sys
out, root = pathlib.Path(sys.argv[1]), sys.argv[2]
def sh(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in sh("lscpu").splitlines() if l.startswith("Model name")), "?")
mem_gib = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal"))) / 2**20
rev = sh("git", "-C", root, "rev-parse", "--short", "HEAD")
dirty = " (uncommitted changes)" if sh("git", "-C", root, "status", "--porcelain") else ""
lines = [f"Machine: {cpu}, {sh('nproc')} cores, {mem_gib:.0f} GiB RAM, Linux {platform.release()}; "
         f"encoderd {rev}{dirty}; client and server on the same machine.",
         "Workload: Embed, 1 text of 8-24 random words per request (seed 1).", "",
         "| model | batching | closed loop, 32 clients: req/s | tokens/s | p50 ms | p99 ms "
         "| max rate with p99 <= 100 ms (open loop, Poisson) | p50 / p99 ms at that rate |",
         "|---|---|---|---|---|---|---|---|"]
for path in sorted(out.glob("*.closed.json")):
    tag = path.name[:-len(".closed.json")]
    model, batching = tag.split("_batching_")
    c = json.loads(path.read_text())
    best = None
    for row in csv.DictReader(open(out / f"{tag}.sweep.csv")):
        # p99 of every call, a failed one at its failure: a rate whose 1%
        # refusals or deadline misses are left out reads as fast as the rest.
        if row["sustained"] == "1" and float(row["p99_all_ms"]) <= 100:
            best = row
    first = next(csv.DictReader(open(out / f"{tag}.sweep.csv")), None)
    rate = (f"{float(best['offered_rps']):g} req/s" if best else
            f"none: p99 {first['p99_all_ms']} ms at {float(first['offered_rps']):g} req/s" if first else "-")
    at = f"{best['p50_ms']} / {best['p99_all_ms']}" if best else "-"
    lines.append(f"| {model} | {batching} | {c['requests_per_s']:.1f} | {c['tokens_per_s']:.0f} "
                 f"| {c['latency']['p50_us'] / 1000:.1f} | {c['latency']['p99_us'] / 1000:.1f} "
                 f"| {rate} | {at} |")
(out / "serving_table.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
