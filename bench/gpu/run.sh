#!/bin/bash
# On the GPU machine, from the repository root with .gpu/bundle.tar.xz
# (bench/gpu/bundle.sh): the CUDA tests, encoderd against PyTorch on the GPU
# (W1, W2, W5; fp32 nested fastpath as the reference), CUDA graphs, serving over loopback,
# per-kernel times. Logs and JSON go to $OUT (default ./gpu-out).
#
#   bash bench/gpu/run.sh
set -u
source bench/gpu/env.sh
stamp tests
timeout 180 /tmp/g/bin/encoderd_tests --gtest_filter='*Cuda*:*cuda*' > $OUT/tests.log 2>&1; echo "tests rc=$?"
grep -E "^\[  PASSED|^\[  FAILED|^\[  SKIPPED" $OUT/tests.log | head -20
grep "^\[ parity" $OUT/tests.log > $OUT/parity.txt; wc -l < $OUT/parity.txt
grep -A8 "Failure" $OUT/tests.log | head -30
stamp limits
python3 bench/gpu_limits.py > $OUT/limits.json 2>&1; cat $OUT/limits.json
stamp model
make_model
# The serving mix offline: 50 sequences of 136..512 tokens (mean 324, as served below).
mkdir -p /tmp/bm && ln -sfn /tmp/bi/model /tmp/bm/model && python3 -c "
import json, random; r = random.Random(7)
json.dump({'W3': [[r.randrange(5, 30522) for _ in range(r.randint(136, 512))] for _ in range(50)]}, open('/tmp/bm/workloads.json', 'w'))"
stamp encoderd-bench
# Rep 1 as shipped; rep 2 replays batches from CUDA graphs (ENCODERD_CUDA_GRAPHS=1,
# batches of at most 4,096 tokens). Each also times the forward that brings
# back only mean-pooled rows (--pooled mean).
for rep in 1 2; do
g=0; [ $rep = 2 ] && g=1
ENCODERD_CUDA_GRAPHS=$g timeout 120 /tmp/g/bin/encoderd bench --device cuda --engines encoderd \
  --workloads W1,W2,W5 --model /tmp/bi/model --pooled mean \
  --inputs /tmp/bi/workloads.json --outputs /tmp/bo$rep --min-seconds 1.5 --json > $OUT/encoderd_bench$rep.json 2>> $OUT/encoderd_bench.err
python3 -c "
import json; d=json.load(open('$OUT/encoderd_bench$rep.json'))
for r in d['results']: print('rep $rep graphs $g', r['workload'], r['dtype'], r['engine'], round(r['ms'],3), 'ms', round(r['tokens_per_s']), 'tok/s', 'min', round(min(r['runs_ms']),3))"
done
ln -sfn /tmp/bo1 /tmp/bo
timeout 60 /tmp/g/bin/encoderd bench --device cuda --engines encoderd --workloads W3 --dtypes float16 --model /tmp/bm/model \
  --inputs /tmp/bm/workloads.json --min-seconds 2 --pooled mean | tail -2
stamp peers
for spec in nested:float32 nested:float16 nested:bfloat16 hf-sdpa:float16 hf-sdpa:bfloat16; do
  m=${spec%%:*}; d=${spec##*:}
  PYTHONUNBUFFERED=1 timeout 120 python3 bench/peer_pytorch_gpu.py --inputs /tmp/bi --mode $m --dtype $d \
    --workloads ${PEER_WORKLOADS:-W1,W2,W5} --outputs /tmp/po/$m-$d >> $OUT/peers.jsonl 2>> $OUT/peers.err
done
python3 -c "
import json
for l in open('$OUT/peers.jsonl'):
  r=json.loads(l)
  if 'workload' in r: print(r['mode'], r['dtype'], r['workload'], round(r['ms'],3), 'ms device', round(r['ms_with_copy'],3), 'ms with copy')"
stamp compare
for w in W1 W2 W5; do
  python3 bench/compare_rows.py --inputs /tmp/bi --workload $w /tmp/po/nested-float32/$w.f32 \
    /tmp/bo/float16/$w.f32 /tmp/bo/bfloat16/$w.f32 /tmp/po/nested-float16/$w.f32 /tmp/po/nested-bfloat16/$w.f32 \
    /tmp/po/hf-sdpa-float16/$w.f32 /tmp/po/hf-sdpa-bfloat16/$w.f32
done > $OUT/compare.jsonl 2>&1
python3 -c "
import json
for l in open('$OUT/compare.jsonl'):
  try: r=json.loads(l); print(r['workload'], r['file'].split('/')[-2], round(r['min_cosine'],7), '%.4g' % r['max_abs_diff'], r['finite'])
  except Exception: print(l.strip())"
stamp serve
/tmp/g/bin/encoderd serve --model-dir /tmp/bi/model --model-name bert --device cuda --dtype float16 \
  --port 50071 --metrics-port 9471 --max-batch-tokens 16384 --max-batch-sequences 256 > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 60); do grep -q "listening on" $OUT/serve.log && break; sleep 1; done
for c in 64; do
  /tmp/g/bin/encoderd-loadtest --target 127.0.0.1:50071 --mode closed --concurrency $c --texts 8 \
    --words 12-190 --duration 15 --warmup 3 --json-file $OUT/serve_c$c.json 2>&1 | grep -E "throughput|requests ok|latency" | head -4
done
python3 - <<'PY' > $OUT/serve_metrics.txt
import urllib.request
print(urllib.request.urlopen("http://127.0.0.1:9471/metrics", timeout=5).read().decode())
PY
grep -E "^encoderd_batch_size_tokens_(sum|count)|^encoderd_batch_size_sequences_(sum|count)" $OUT/serve_metrics.txt
kill -INT $SP; sleep 2
stamp ncu
# Both forwards of W5 fp16 (hidden states, then mean-pooled rows), 4 each.
timeout 90 ncu --cache-control none --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel --csv \
  /tmp/g/bin/encoderd bench --device cuda --engines encoderd --workloads W5 --dtypes float16 --model /tmp/bi/model \
  --inputs /tmp/bi/workloads.json --min-seconds 0 --pooled mean > $OUT/ncu.csv 2> $OUT/ncu.err; echo "ncu rc=$?"
python3 - <<'PY'
import csv, os, re
rows = list(csv.reader(open(os.environ["OUT"] + "/ncu.csv")))
hdr = None; found = []
for r in rows:
    if "Kernel Name" in r: hdr = r; continue
    if hdr and len(r) == len(hdr):
        d = dict(zip(hdr, r))
        found.append((int(d["Invocations"]), float(d["Average"].replace(",", "")), d["Kernel Name"]))
# One embedding kernel per forward; half of them return hidden states (the
# fp32 cast runs there), half pooled rows (the pooling kernel runs there).
forwards = sum(n for n, _, k in found if "Embedding" in k) or 1
common = hidden_only = pooled_only = 0; out = []
for n, avg, k in found:
    only_hidden = re.search(r"CastKernel<[^,>]+, *float>", k) is not None  # to fp32
    only_pooled = "PoolKernel" in k
    if re.search(r"CastKernel<float,", k): continue  # the weights' upload, at load
    us = avg * n / (forwards / 2 if only_hidden or only_pooled else forwards) / 1e3
    if only_hidden: hidden_only += us
    elif only_pooled: pooled_only += us
    else: common += us
    out.append((us, n, k[:70]))
for v, n, k in sorted(out, reverse=True)[:12]: print(f"{v:9.1f} us per forward that runs it {n:4d}x  {k}")
print(f"{forwards} forwards profiled: {common + hidden_only:.1f} us per hidden-state forward, "
      f"{common + pooled_only:.1f} us per pooled forward")
PY
stamp done
