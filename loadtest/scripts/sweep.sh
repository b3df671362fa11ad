#!/usr/bin/env bash
# Open-loop sweep against a running encoderd: rates from START doubling (or
# times FACTOR) up to MAX, stopping after the first rate the server cannot
# sustain; writes OUT.csv, OUT.json and the plot OUT.png.
# usage: sweep.sh OUT_PREFIX [--start R] [--factor F] [--max R] [-- loadtest flags...]
# e.g.   sweep.sh /tmp/langid --start 50 --max 6400 -- --target 127.0.0.1:50051 --duration 10
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
loadtest=${ENCODERD_LOADTEST:-$root/build/loadtest/encoderd-loadtest}
out=${1:?usage: sweep.sh OUT_PREFIX [--start R] [--factor F] [--max R] [-- loadtest flags...]}
shift
start=50 factor=2 max=12800
while (($#)); do
  case "$1" in
    --start) start=$2; shift 2 ;;
    --factor) factor=$2; shift 2 ;;
    --max) max=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "sweep.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
rates=$(awk -v s="$start" -v f="$factor" -v m="$max" \
  'BEGIN { r = s; out = ""; while (r <= m) { out = out (out ? "," : "") r; r *= f } print out }')
"$loadtest" --mode open --sweep-rates "$rates" --sweep-csv "$out.csv" --json-file "$out.json" "$@"
"$here/plot_sweep.sh" "$out.csv" "$out.png" "encoderd sweep: $(basename "$out")"
