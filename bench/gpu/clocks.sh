#!/bin/bash
# On the GPU machine (as run.sh): the SM clock, power, its limit and the temperature
# (nvidia-smi every 100 ms) while encoderd runs W5 fp16 forwards back to back
# for 4 s, the forwards' times first and last, and the SM clock of the same
# forward's kernels when ncu replays them one at a time. Tells a forward's
# wall time from its kernels' ncu times: clocks, or gaps between kernels.
#
#   bash bench/gpu/clocks.sh
set -u
source bench/gpu/env.sh
make_model
nvidia-smi --query-gpu=clocks.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader,nounits -lms 100 > $OUT/smi.csv & S=$!
sleep 2
/tmp/g/bin/encoderd bench --device cuda --engines encoderd --workloads W5 --dtypes float16 --model /tmp/bi/model --inputs /tmp/bi/workloads.json --pooled mean --min-seconds 4 --json > $OUT/w5.json 2>$OUT/w5.err
sleep 1; kill $S
python3 - <<'PY'
import json, os, statistics as st
o = os.environ["OUT"]
rows = [l.split(", ") for l in open(o + "/smi.csv") if l.count(",") == 3]
busy = [r for r in rows if float(r[1]) > 150]
print("samples", len(rows), "busy", len(busy))
if busy:
    clk = [float(r[0]) for r in busy]; pw = [float(r[1]) for r in busy]
    print("SM MHz busy: min %.0f median %.0f max %.0f; power W median %.0f max %.0f; temp %s-%s" % (min(clk), st.median(clk), max(clk), st.median(pw), max(pw), busy[0][3], busy[-1][3]))
    print("power limit W", busy[0][2])
print("idle SM MHz", [r[0] for r in rows[:3]])
d = json.load(open(o + "/w5.json"))
for r in d["results"]:
    x = r["runs_ms"]; n = len(x)
    print(r["engine"], "median %.2f min %.2f; first 10 median %.2f, last 10 median %.2f, n %d" % (st.median(x), min(x), st.median(x[:10]), st.median(x[-10:]), n))
PY
timeout 100 ncu --cache-control none --clock-control none --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second --csv /tmp/g/bin/encoderd bench --device cuda --engines encoderd --workloads W5 --dtypes float16 --model /tmp/bi/model --inputs /tmp/bi/workloads.json --min-seconds 0 > $OUT/ncu_clk.csv 2>/dev/null
python3 - <<'PY'
import csv, os, statistics as st
rows = list(csv.reader(open(os.environ["OUT"] + "/ncu_clk.csv")))
h = None; c = []
for r in rows:
    if "Metric Name" in r: h = r; continue
    if h and len(r) == len(h):
        d = dict(zip(h, r))
        if d["Metric Name"] == "sm__cycles_elapsed.avg.per_second":
            c.append(float(d["Metric Value"].replace(",", ""))); unit = d["Metric Unit"]
if c:
    print("ncu: %d kernels, SM clock median %.4g min %.4g max %.4g %s" % (len(c), st.median(c), min(c), max(c), unit))
else:
    print("ncu: no rows")
PY
