#!/bin/bash
# On the GPU machine (as run.sh): the attention variants of docs/gpu.md
# ("main again on an H200", 2026-12-01). Build here first:
#   bash bench/gpu/bundle.sh && xz -T2 -c build-gpu/cli/encoderd > .gpu/encoderd.old.xz
#   git apply bench/gpu/attention_variants.patch && bash bench/gpu/bundle.sh
#   git apply -R bench/gpu/attention_variants.patch
# The patch adds ENCODERD_CUDA_ATTENTION_VARIANT=1..10 for head size 64 (8-10,
# which leave out the softmax or the key/value loads, were never run). This
# script runs the CUDA tests, each variant's attention and encoder tests, three
# alternated rounds of W1/W5 against main's binary, ncu of the attention kernel,
# and serving with main's binary.
set -u
source bench/gpu/env.sh
VARIANTS=${VARIANTS:-"1 2 4 5 6 7"}
stamp tests
timeout 150 /tmp/g/bin/encoderd_tests --gtest_filter='*Cuda*:*cuda*' > $OUT/tests.log 2>&1; echo "tests rc=$?"
grep -E "^\[  PASSED|^\[  FAILED|^\[  SKIPPED" $OUT/tests.log | head -8
grep -A6 "Failure" $OUT/tests.log | head -20
for v in $VARIANTS; do
  ENCODERD_CUDA_ATTENTION_VARIANT=$v timeout 60 /tmp/g/bin/encoderd_tests \
    --gtest_filter='*CudaOpsTest.Attention*:*CudaEncoder*' > $OUT/tests_v$v.log 2>&1
  echo "variant $v tests rc=$? $(grep -cE '^\[       OK' $OUT/tests_v$v.log) ok $(grep -E '^\[  FAILED' $OUT/tests_v$v.log | head -3)"
done
stamp model
make_model
xz -dc .gpu/encoderd.old.xz > /tmp/g/bin/encoderd.old && chmod +x /tmp/g/bin/encoderd.old
stamp ab
for round in 1 2 3; do
  for v in old $VARIANTS; do
    bin=/tmp/g/bin/encoderd; [ $v = old ] && bin=/tmp/g/bin/encoderd.old
    outputs=(); [ $round = 1 ] && outputs=(--outputs /tmp/ab-$v)
    ENCODERD_CUDA_ATTENTION_VARIANT=$v timeout 60 $bin bench --device cuda --engines encoderd --workloads W1,W5 \
      --dtypes float16,bfloat16 --model /tmp/bi/model --inputs /tmp/bi/workloads.json --min-seconds 0.7 \
      "${outputs[@]}" --json > $OUT/ab-$v-$round.json 2>> $OUT/ab.err
    python3 -c "
import json; d=json.load(open('$OUT/ab-$v-$round.json'))
print('round $round v$v', '  '.join('%s %s %.3f' % (r['workload'], r['dtype'][:4], r['ms']) for r in d['results']))"
  done
done
python3 - <<PY
import numpy as np
for v in "$VARIANTS".split():
  for f in ["float16/W1", "float16/W5", "bfloat16/W5"]:
    a = np.fromfile(f"/tmp/ab-old/{f}.f32", np.float32).reshape(-1, 768)
    b = np.fromfile(f"/tmp/ab-{v}/{f}.f32", np.float32).reshape(-1, 768)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    print(f"v{v} {f} vs old: max abs {np.abs(a - b).max():.4g} min token cosine {cos.min():.7f} same bytes {bool((a == b).all())}")
PY
stamp ncu
for v in old $VARIANTS; do
  bin=/tmp/g/bin/encoderd; [ $v = old ] && bin=/tmp/g/bin/encoderd.old
  ENCODERD_CUDA_ATTENTION_VARIANT=$v timeout 60 ncu --cache-control none --clock-control none --kernel-name regex:FlashAttention \
    --launch-skip 12 --launch-count 24 --metrics gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread --csv \
    $bin bench --device cuda --engines encoderd --workloads W5 --dtypes float16 --model /tmp/bi/model \
    --inputs /tmp/bi/workloads.json --min-seconds 0 > $OUT/ncu-$v.csv 2> $OUT/ncu-$v.err
  python3 - $OUT/ncu-$v.csv $v <<'PY'
import csv, sys, statistics
rows = [r for r in csv.reader(open(sys.argv[1]))]
hdr = next((r for r in rows if "Metric Name" in r), None)
if not hdr: print("v" + sys.argv[2], "no ncu rows"); sys.exit()
m = {}
for r in rows[rows.index(hdr) + 1:]:
    d = dict(zip(hdr, r)); m.setdefault(d["Metric Name"], []).append(float(d["Metric Value"].replace(",", "")))
t = m.get("gpu__time_duration.sum", [0])
print(f"v{sys.argv[2]} attention per W5 fp16 forward {sum(t)/len(t)*12/1e6:.3f} ms (median kernel {statistics.median(t)/1e3:.1f} us, {len(t)} kernels)"
      f" warps active {statistics.median(m.get('sm__warps_active.avg.pct_of_peak_sustained_active',[0])):.1f}% regs {m.get('launch__registers_per_thread',[0])[0]:.0f}")
PY
done
stamp serve
/tmp/g/bin/encoderd.old serve --model-dir /tmp/bi/model --model-name bert --device cuda --dtype float16 \
  --port 50071 --metrics-port 9471 --max-batch-tokens 16384 --max-batch-sequences 256 > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 60); do grep -q "listening on" $OUT/serve.log && break; sleep 1; done
/tmp/g/bin/encoderd-loadtest --target 127.0.0.1:50071 --mode closed --concurrency 64 --texts 8 \
  --words 12-190 --duration 12 --warmup 3 --json-file $OUT/serve_c64.json 2>&1 | grep -E "throughput|requests ok|latency" | head -4
kill -INT $SP; sleep 2
stamp done
