#!/usr/bin/env python3
"""encoderd against its peers, each in its own process as its users run it,
on one checkpoint and one set of token ids, beside the machine's measured
limits. One command:

  /usr/bin/python3 bench/run_peers.py [--threads 2] [--reps 3] [--workloads W1,W2]

Needs the build (build/cli/encoderd, build/kernels/machine_limits), Debian's
python3-torch and node/npm (onnxruntime-node is installed into bench/ from
the npm registry on first use). Writes OUT/results.md, results.json and
results.png (OUT defaults to build/bench-peers); inputs go to build/bench-inputs.

Systems, one process each, one after another, pinned to the same cores
(taskset), each run --reps times: encoderd (`encoderd bench --engines
encoderd` on the model directory), PyTorch 1.13 in Python (slow path,
fastpath, nested fastpath in fp32, nested fastpath in bf16; bench/peer_pytorch.py),
ONNX Runtime from npm (padded batch and one sequence at a time;
bench/peer_ort.mjs), and with --with-inprocess the LibTorch path inside
`encoderd bench`, to compare with the Python process. The machine's limits
(build/kernels/machine_limits) are measured before the systems and after
each round of them, and the figures taken against the mean of the readings;
the read bandwidth of a reading is the best of its readers (a plain loop,
and vector loads with and without software prefetch, over memory in 4 KiB
pages and, where the kernel grants them, in 2 MiB pages). Right after each
process the GEMM peak of its dtype and the read bandwidth are measured once
more, and W1's % of peak and W2's multiple of its floor taken against that
reading as well (the "paired" columns).
"""
import argparse
import copy
import datetime
import hashlib
import json
import os
import pathlib
import platform
import random
import shutil
import statistics
import subprocess
import sys

import numpy as np

BENCH = pathlib.Path(__file__).resolve().parent
REPO = BENCH.parent
PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch

# PyTorch's processes run with these, the in-process LibTorch rows too: the
# Debian build's OpenBLAS keeps its own pthreads spinning after each GEMM
# while ATen's OpenMP threads wait for the cores. These two were the fastest
# settings tried on W1 and W2 (see the "Debian defaults" row, which runs
# without them). Until 2026-12-07 the in-process rows ran without them, and
# so took the "Debian defaults" row's W2, not the tuned Python process's.
PYTORCH_ENV = {"OMP_WAIT_POLICY": "passive", "OPENBLAS_THREAD_TIMEOUT": "4"}


def systems(a):
    """(key, label, dtype, argv builder, extra env) of every system to run."""
    enc = str(REPO / a.encoderd)
    common = ["--threads", str(a.threads), "--workloads", a.workloads,
              "--min-seconds", str(a.min_seconds)]

    def encoderd(dtype):
        return lambda out: [enc, "bench", "--engines", "encoderd", "--dtypes", dtype,
                            "--model", str(a.inputs / "model"),
                            "--inputs", str(a.inputs / "workloads.json"),
                            "--json", "--outputs", str(out)] + common

    def pytorch(mode, dtype):
        return lambda out: [PYTHON, str(BENCH / "peer_pytorch.py"), "--inputs", str(a.inputs),
                            "--mode", mode, "--dtype", dtype, "--outputs", str(out)] + common

    def ort(mode):
        return lambda out: ["node", str(BENCH / "peer_ort.mjs"), "--inputs", str(a.inputs),
                            "--mode", mode, "--outputs", str(out)] + common

    def inprocess(dtype):
        return lambda out: [enc, "bench", "--engines", "pytorch", "--dtypes", dtype,
                            "--skip-slow", "--model", str(a.inputs / "model"),
                            "--inputs", str(a.inputs / "workloads.json"), "--json"] + common

    out = [
        ("encoderd-fp32", "encoderd", "float32", encoderd("float32"), {}),
        ("encoderd-bf16", "encoderd", "bfloat16", encoderd("bfloat16"), {}),
        ("encoderd-int8", "encoderd", "int8", encoderd("int8"), {}),
        ("pytorch-slow", "PyTorch slow path (train mode)", "float32", pytorch("slow", "float32"),
         PYTORCH_ENV),
        ("pytorch-fastpath", "PyTorch fastpath, padded", "float32",
         pytorch("fastpath", "float32"), PYTORCH_ENV),
        ("pytorch-nested", "PyTorch nested fastpath", "float32", pytorch("nested", "float32"),
         PYTORCH_ENV),
        ("pytorch-nested-defaults", "PyTorch nested fastpath, Debian defaults", "float32",
         pytorch("nested", "float32"), {}),
        ("pytorch-nested-bf16", "PyTorch nested fastpath", "bfloat16",
         pytorch("nested", "bfloat16"), PYTORCH_ENV),
        ("pytorch-dynamic-int8", "PyTorch quantize_dynamic, padded", "int8",
         pytorch("dynamic-int8", "float32"), PYTORCH_ENV),
        ("ort-padded", "ONNX Runtime, padded batch", "float32", ort("padded"), {}),
        ("ort-per-sequence", "ONNX Runtime, one sequence at a time", "float32",
         ort("per-sequence"), {}),
    ]
    if a.with_inprocess:
        out += [("inprocess-nested", "PyTorch nested fastpath in encoderd's process (LibTorch)",
                 "float32", inprocess("float32"), PYTORCH_ENV),
                ("inprocess-nested-bf16",
                 "PyTorch nested fastpath in encoderd's process (LibTorch)", "bfloat16",
                 inprocess("bfloat16"), PYTORCH_ENV)]
    only = set(a.only.split(",")) if a.only else None
    return [s for s in out if only is None or s[0] in only]


def parse_lines(key, stdout):
    """workload -> (tokens, median ms) from a peer's JSON lines, or encoderd
    bench's JSON (the entries of its own engine for the in-process rows)."""
    found = {}
    text = stdout.strip()
    try:  # encoderd bench --json: one document
        doc = json.loads(text)
    except json.JSONDecodeError:  # a peer: one JSON object per line
        doc = None
    if isinstance(doc, dict) and "results" in doc:
        for r in doc["results"]:
            if key.startswith("inprocess") and r["engine"] != "pytorch nested fastpath":
                continue
            found[r["workload"]] = (r["tokens"], r["ms"])
        return found
    for line in text.splitlines():
        doc = json.loads(line)
        if "workload" in doc:
            found[doc["workload"]] = (doc["tokens"], doc["ms"])
    return found


def run_system(a, system, rep, log):
    key, _, _, argv, env = system
    out = a.out / "outputs" / f"{key}.{rep}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["taskset", "-c", f"0-{a.threads - 1}"] + argv(out)
    full_env = dict(os.environ, **env)
    print(f"[{key} #{rep}] {' '.join(cmd)}", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, env=full_env, capture_output=True, text=True)
    log.write(f"$ {' '.join(f'{k}={v}' for k, v in env.items())} {' '.join(cmd)}\n"
              f"{done.stdout}{done.stderr}\n")
    if done.returncode != 0:
        raise SystemExit(f"{key} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    # encoderd writes OUT/<dtype>/<workload>.f32; the peers OUT/<workload>.f32.
    for sub in out.glob("*/*.f32"):
        sub.rename(out / sub.name)
    return parse_lines(key, done.stdout)


def machine_limits(a, dtype=None, read_only=False):
    """The machine's limits: every dtype's GEMM peak and the read bandwidth,
    or with `dtype` that dtype's peak alone and the bandwidth (~6 s), or
    with `read_only` the read bandwidth alone."""
    cmd = ["taskset", "-c", f"0-{a.threads - 1}", str(REPO / a.machine_limits),
           "--threads", str(a.threads)] + (["--dtypes", dtype] if dtype else []) + (
               ["--read-only", "1"] if read_only else [])
    print(f"[machine limits] {' '.join(cmd)}", file=sys.stderr, flush=True)
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


VALUE_BYTES = {"float32": 4, "bfloat16": 2, "int8": 1}  # bytes per weight, by dtype


def floor_ms(params, dtype, read_gbs):
    """W2's floor: the encoder layers' weight bytes in `dtype` read at
    read_gbs."""
    return params * VALUE_BYTES[dtype] / (read_gbs * 1e9) * 1e3


def combined_limits(readings):
    """The limits the figures are taken against: each GEMM peak and the read
    bandwidth the mean of its readings (machine_limits before the systems and
    after each round of them: on a shared host they move by several percent
    within a run), the readings kept beside it."""
    out = copy.deepcopy(readings[0])
    for dtype, g in out["gemm"].items():
        peaks = [r["gemm"][dtype]["peak_gflops"] for r in readings]
        g["peak_gflops"] = None if None in peaks else statistics.mean(peaks)
        g["peak_readings"] = peaks
    bandwidths = [r["read_bandwidth_gbs"] for r in readings]
    out["read_bandwidth_gbs"] = statistics.mean(bandwidths)
    out["read_bandwidth_readings"] = bandwidths
    out["read_huge_pages_readings"] = [bool(r.get("read_huge_pages")) for r in readings]
    # The readers over 2 MiB pages ("..._2m") are in a reading only when the
    # kernel granted those pages: each reader's mean is over the readings
    # that have it.
    names = []
    for r in readings:
        for name in r.get("read_bandwidth_readers_gbs", {}):
            if name not in names:
                names.append(name)
    out["read_bandwidth_readers_gbs"] = {
        name: statistics.mean(r["read_bandwidth_readers_gbs"][name] for r in readings
                              if name in r.get("read_bandwidth_readers_gbs", {}))
        for name in names}
    return out


def layer_params(config):
    h, f = config["hidden_size"], config["intermediate_size"]
    return config["num_hidden_layers"] * (h * 3 * h + 3 * h + h * h + h + 2 * h * f + f + h + 4 * h)


def useful_flops(config, sequences):
    """Multiply-adds x 2 the encoder layers need for these sequences, unpadded."""
    h, f, n = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    tokens = sum(len(s) for s in sequences)
    linear = 2 * tokens * (h * 3 * h + h * h + 2 * h * f)
    attention = sum(2 * 2 * len(s) * len(s) * h for s in sequences)
    return n * (linear + attention)


def accuracy(a, key, reference_key, workloads):
    """(max abs error, lowest per-token cosine) of `key`'s outputs against the
    reference's, over every workload; (inf, nan) when an output is missing
    values or holds one that is not finite, or a token's state is all zeros
    (max() and min() pass NaN by unseen: a NaN output once read as 0 error
    and cosine 1). Until 2026-12-02 the cosine was one per sequence, in which
    a single bad token of 256 moved it by ~2e-4."""
    worst, lowest = 0.0, 1.0
    for name, sequences in workloads.items():
        ref = np.fromfile(a.out / "outputs" / f"{reference_key}.1" / f"{name}.f32", np.float32)
        path = a.out / "outputs" / f"{key}.1" / f"{name}.f32"
        if not path.exists():
            return None
        got = np.fromfile(path, np.float32)
        if got.size != ref.size or not np.isfinite(got).all():
            return (float("inf"), float("nan"))
        worst = max(worst, float(np.abs(got - ref).max()))
        hidden = ref.size // sum(len(s) for s in sequences)
        x = got.reshape(-1, hidden).astype(np.float64)
        y = ref.reshape(-1, hidden).astype(np.float64)
        norms = np.sqrt((x * x).sum(1) * (y * y).sum(1))
        if not (norms > 0).all():
            return (float("inf"), float("nan"))
        lowest = min(lowest, float(((x * y).sum(1) / norms).min()))
    return worst, lowest


def provenance(a, log_text):
    """What the figures came from: the commit (and whether the tree had
    changes), the encoderd binary's hash, the checkpoint's and ONNX file's
    hashes, and the versions the peers printed."""
    def run(*cmd):
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    def sha256(path):
        path = pathlib.Path(path)
        if not path.exists():
            return None
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()

    versions = {}
    for line in log_text.splitlines():
        if line.startswith("{") and ("torch" in line or "onnxruntime" in line):
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                continue
            for name in ("torch", "onnxruntime"):
                if name in doc:
                    versions[name] = doc[name]
    return {"commit": run("git", "rev-parse", "HEAD"),
            "tree_changed": bool(run("git", "status", "--porcelain", "--untracked-files=no")),
            "encoderd_sha256": sha256(REPO / a.encoderd),
            "checkpoint_sha256": sha256(a.inputs / "model/pytorch_model.bin"),
            "onnx_sha256": sha256(a.inputs / "model.onnx"),
            "versions": versions}


def cpu_identity(cpuinfo):
    """The first CPU's model name and its family, model and stepping from
    /proc/cpuinfo's text (a VM may name only the vendor's line, "AMD EPYC",
    for CPUs of different generations)."""
    fields = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name", "unknown CPU")
    ids = [f"{k} {fields[k]}" for k in ("cpu family", "model", "stepping") if k in fields]
    return f"{name} ({', '.join(ids)})" if ids else name


def machine_description(a, limits):
    model = cpu_identity(pathlib.Path("/proc/cpuinfo").read_text())
    return {
        "cpu": model, "features": limits["cpu_features"], "threads": a.threads,
        "pinned": f"taskset -c 0-{a.threads - 1}", "logical_cpus": os.cpu_count(),
        "kernel": platform.release(), "date": datetime.date.today().isoformat(),
    }


def gemm_peak(limits, dtype):
    """The GEMM peak a dtype's % of peak is taken against: its own oneDNN
    GEMM's, or where oneDNN has none for it on this CPU (bf16 on AVX2 CPUs,
    where encoderd runs bf16 on fp32 GEMMs), the fp32 one."""
    peak = limits["gemm"][dtype]["peak_gflops"]
    return peak if peak is not None else limits["gemm"]["float32"]["peak_gflops"]


def readings_text(values, fmt):
    """' (a before the systems, then b, c after each round)', or '' for one
    reading."""
    if len(values) < 2:
        return ""
    after = ", ".join(f"{v:{fmt}}" for v in values[1:])
    return f" ({values[0]:{fmt}} before the systems, then {after} after each round)"


def peak_text(limits, dtype, unit=""):
    g = limits["gemm"][dtype]
    if g["peak_gflops"] is None:
        return "none (no oneDNN GEMM for it on this CPU: % of the fp32 peak)"
    if g["native_instructions"]:
        how = ""
    elif dtype == "bfloat16":
        # machine_limits times bf16 on fp32 GEMMs where encoderd runs it so.
        how = " (on fp32 GEMMs, as encoderd runs bf16 on this CPU)"
    else:
        how = " (emulated)"
    return (f"{g['peak_gflops']:.0f}{unit}{how}"
            + readings_text(g.get("peak_readings", []), ".0f"))


def huge_pages_text(granted):
    """Whether the readings' "..._2m" readers had 2 MiB pages (machine_limits'
    read_huge_pages); empty for a run recorded before they were measured."""
    if not granted:
        return ""
    if all(granted):
        return "2 MiB pages granted in every reading"
    if not any(granted):
        return "no 2 MiB pages granted: 4 KiB pages only"
    return f"2 MiB pages granted in {sum(granted)} of {len(granted)} readings"


def write_report(a, doc):
    m = doc["machine"]
    lim = doc["limits"]
    lines = [
        f"Machine: {m['cpu']}, {m['logical_cpus']} logical CPUs; {m['features']}; "
        f"{m['threads']} threads per system, each process under `{m['pinned']}`; {m['date']}.",
        "",
        f"Limits measured in the same run (`build/kernels/machine_limits --threads {m['threads']}` "
        f"before the systems and after each round of them, the mean of the readings): "
        f"oneDNN GEMM at M = {lim['rows']} on the BERT layer shapes, best shape: "
        f"fp32 {peak_text(lim, 'float32', ' GFLOP/s')}, "
        f"bf16 {peak_text(lim, 'bfloat16')}, int8 {peak_text(lim, 'int8')}; "
        f"memory read {lim['read_bandwidth_gbs']:.1f} GB/s"
        f"{readings_text(lim.get('read_bandwidth_readings', []), '.1f')}, "
        f"each reading the best of its readers (their means: "
        + ", ".join(f"{name} {gbs:.1f}"
                    for name, gbs in lim.get("read_bandwidth_readers_gbs", {}).items())
        + "".join("; " + t for t in [huge_pages_text(lim.get("read_huge_pages_readings", []))] if t)
        + "). "
        f"W2 floor = encoder-layer weight bytes / read bandwidth: "
        f"fp32 {doc['floor_ms']['float32']:.1f} ms, bf16 {doc['floor_ms']['bfloat16']:.1f} ms, "
        f"int8 {doc['floor_ms']['int8']:.1f} ms.",
        "",
    ]
    workloads = doc["workloads"]
    header = "| system | dtype |"
    rule = "|---|---|"
    for w in workloads:
        if w == "W2":
            header += " W2 ms (spread) | W2 × floor | W2 × floor, paired |"
            rule += "---:|---:|---:|"
        else:
            header += f" {w} tokens/s (spread) | {w} % of GEMM peak | {w} % of peak, paired |"
            rule += "---:|---:|---:|"
    header += " max abs error vs PyTorch fp32 | min cosine |"
    rule += "---:|---:|"
    lines += [header, rule]
    for r in doc["rows"]:
        line = f"| {r['label']} | {r['dtype']} |"
        for w in workloads:
            c = r["workloads"].get(w)
            if c is None:
                line += " | | |"
            elif w == "W2":
                paired = c.get("x_floor_paired")
                line += (f" {c['ms']:.1f} ({c['ms_min']:.1f}-{c['ms_max']:.1f}) |"
                         f" {c['x_floor']:.2f}× |"
                         + (f" {paired:.2f}× |" if paired is not None else " |"))
            else:
                paired = c.get("pct_peak_paired")
                line += (f" {c['tokens_per_s']:,.0f} ({c['tps_min']:,.0f}-{c['tps_max']:,.0f}) |"
                         f" {c['pct_peak']:.0f}% |"
                         + (f" {paired:.0f}% |" if paired is not None else " |"))
        acc = r.get("accuracy")
        line += (f" {acc[0]:.1e} | {acc[1]:.5f} |" if acc else " (reference) | |"
                 if r["key"] == doc["reference"] else " | |")
        lines.append(line)
    lines += [
        "",
        f"Medians of {a.reps} processes per system (spread: their lowest and highest median); "
        f"each process times at least 3 forwards and {a.min_seconds} s after a warm-up. "
        "% of GEMM peak: the encoder layers' useful FLOPs (no padding) per second over the "
        "peak of the system's dtype (the mean of its readings above); paired: the median "
        "over the processes of each one's rate over the peak of its dtype measured right "
        "after it (`machine_limits --dtypes DTYPE`). "
        "W2 × floor: the median W2 time over the floor at the "
        "mean read bandwidth above; paired: the median over the processes of each one's W2 "
        "time over the floor at the mean of the read bandwidth measured right before and "
        "right after it (`machine_limits --read-only 1`; with --workloads W1,W2, W2 is each "
        "process's last workload). Each round runs the systems in its own (seeded) order. "
        "Accuracy: last hidden states of every token of every "
        f"workload against the {doc['reference_label']}: the largest absolute error and "
        "the lowest cosine of one token's state (a value that is not finite: inf and nan).",
    ]
    beside = sorted(g for r in doc["rows"] for g in r["workloads"].get("W2", {}).get(
        "read_gbs_beside", []))
    if beside:
        lines += ["", f"Read bandwidth beside each process (the mean of before and after): "
                      f"{beside[0]:.1f} to {beside[-1]:.1f} GB/s (median "
                      f"{statistics.median(beside):.1f})."]
    for dtype in VALUE_BYTES:
        peaks = sorted(p for r in doc["rows"] if r["dtype"] == dtype
                       for w in r["workloads"].values() for p in w.get("peak_beside", []) or []
                       if p is not None)
        if peaks:
            lines += ["", f"{dtype} GEMM peak right after each {dtype} process: {peaks[0]:.0f} "
                          f"to {peaks[-1]:.0f} GFLOP/s (median {statistics.median(peaks):.0f})."]
    (a.out / "results.md").write_text("\n".join(lines) + "\n")


def write_chart(a, doc):
    if shutil.which("gnuplot") is None:
        print("gnuplot not found: no results.png", file=sys.stderr)
        return
    data = a.out / "chart.dat"
    first = [w for w in doc["workloads"] if w != "W2"][:1]
    with data.open("w") as f:
        for r in doc["rows"]:
            w1 = r["workloads"].get(first[0], {}).get("tokens_per_s", 0) if first else 0
            w2 = r["workloads"].get("W2", {}).get("ms", 0)
            f.write(f"\"{r['label']} ({r['dtype']})\" {w1:.1f} {w2:.2f}\n")
    rows = len(doc["rows"])
    # Labels are literal (no "_" subscripts); the W1 axis ends a tenth past
    # the longest bar and has at most about six ticks, which stay legible.
    w1_max = max([r["workloads"].get(first[0], {}).get("tokens_per_s", 0)
                  for r in doc["rows"]] + [1]) if first else 1
    step = min(m * 10 ** e for e in range(0, 9) for m in (1, 2, 2.5, 5)
               if w1_max * 1.1 / (m * 10 ** e) <= 6)
    script = f"""
set terminal pngcairo noenhanced size 1300,{160 + 36 * rows} font ',10'
set output '{a.out / 'results.png'}'
set multiplot title "{doc['machine']['cpu']}, {a.threads} threads, medians of {a.reps} processes"
set style fill solid 0.8
set yrange [{rows} - 0.5:-0.5]
set ytics nomirror
set grid x
unset key
set origin 0,0
set size 0.66,0.95
set title '{first[0] if first else ''} tokens/s (higher is better)'
set xrange [0:{w1_max * 1.1:.0f}]
set xtics {step:g}
plot '{data}' using (column(2)*0.5):0:(column(2)*0.5):(0.35):yticlabels(1) with boxxyerror
set origin 0.66,0
set size 0.34,0.95
set lmargin 2
set title 'W2 ms (lower is better)'
set ytics format ''
set autoscale x
set xtics autofreq
plot '{data}' using (column(3)*0.5):0:(column(3)*0.5):(0.35) with boxxyerror
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--workloads", default="W1,W2")
    p.add_argument("--min-seconds", type=float, default=3.0)
    p.add_argument("--inputs", type=pathlib.Path, default=REPO / "build/bench-inputs")
    p.add_argument("--out", type=pathlib.Path, default=REPO / "build/bench-peers")
    p.add_argument("--encoderd", default="build/cli/encoderd")
    p.add_argument("--machine-limits", default="build/kernels/machine_limits")
    p.add_argument("--with-inprocess", action="store_true",
                   help="also time the LibTorch path inside encoderd bench")
    p.add_argument("--only", help="comma-separated system keys (default: all)")
    p.add_argument("--report-only", action="store_true",
                   help="rewrite results.md and results.png from OUT/results.json")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.report_only:
        doc = json.loads((a.out / "results.json").read_text())
        a.reps, a.threads = doc["reps"], doc["machine"]["threads"]
        a.min_seconds = doc.get("min_seconds", a.min_seconds)
        write_report(a, doc)
        write_chart(a, doc)
        print((a.out / "results.md").read_text())
        return
    onnx, checkpoint = a.inputs / "model.onnx", a.inputs / "model/pytorch_model.bin"
    if (not onnx.exists() or not (a.inputs / "workloads.json").exists() or
            not checkpoint.exists() or onnx.stat().st_mtime < checkpoint.stat().st_mtime):
        subprocess.run([PYTHON, str(BENCH / "make_inputs.py"), str(a.inputs)], check=True)
    if not (BENCH / "node_modules/onnxruntime-node").exists():
        # --ignore-scripts: the package's install script only fetches GPU
        # libraries (from outside the npm registry); the CPU ones ship in it.
        subprocess.run(["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund"],
                       cwd=BENCH, check=True)
    config = json.loads((a.inputs / "model/config.json").read_text())
    all_workloads = json.loads((a.inputs / "workloads.json").read_text())
    workloads = {w: all_workloads[w] for w in a.workloads.split(",")}

    readings = [machine_limits(a)]
    chosen = systems(a)
    timings = {s[0]: {} for s in chosen}  # key -> workload -> [(tokens, ms) per rep]
    # The read bandwidth and the GEMM peak of the system's dtype right after
    # each process (its last workload ran just before): key -> [GB/s per
    # rep] and [GFLOP/s per rep] (None: no oneDNN GEMM of that dtype here).
    # ... and the read bandwidth right before and right after each process
    # (read alone, before the GEMMs of the peak: key -> [(before, after)
    # GB/s per rep]), whose mean the process's W2 is paired with.
    beside = {s[0]: [] for s in chosen}
    peak_beside = {s[0]: [] for s in chosen}
    order = []  # each round's systems, in the order they ran
    with (a.out / "runs.log").open("w") as log:
        for rep in range(1, a.reps + 1):
            # Each round in its own order (seeded): the host's memory and
            # clocks drift in bursts, and a fixed order paired each system
            # with the same part of every round (until 2026-12-02).
            round_systems = list(chosen)
            random.Random(1000 + rep).shuffle(round_systems)
            order.append([system[0] for system in round_systems])
            for system in round_systems:
                before = machine_limits(a, read_only=True)["read_bandwidth_gbs"]
                for w, value in run_system(a, system, rep, log).items():
                    timings[system[0]].setdefault(w, []).append(value)
                after = machine_limits(a, read_only=True)["read_bandwidth_gbs"]
                beside[system[0]].append((before, after))
                peak = machine_limits(a, dtype=system[2])
                peak_beside[system[0]].append(peak["gemm"][system[2]]["peak_gflops"])
            # The limits drift as the systems do: read them between rounds too.
            readings.append(machine_limits(a))
    limits = combined_limits(readings)
    params = layer_params(config)
    floors = {dtype: floor_ms(params, dtype, limits["read_bandwidth_gbs"])
              for dtype in VALUE_BYTES}

    reference = "pytorch-slow" if "pytorch-slow" in timings else None
    rows = []
    for key, label, dtype, _, env in chosen:
        row = {"key": key, "label": label, "dtype": dtype, "env": env, "workloads": {}}
        for w, values in timings[key].items():
            tokens = values[0][0]
            ms = [v[1] for v in values]
            med = statistics.median(ms)
            cell = {"tokens": tokens, "ms": med, "ms_min": min(ms), "ms_max": max(ms),
                    "ms_per_rep": ms, "tokens_per_s": tokens / med * 1e3,
                    "tps_min": tokens / max(ms) * 1e3, "tps_max": tokens / min(ms) * 1e3}
            peak = gemm_peak(limits, dtype)
            cell["gflops"] = useful_flops(config, workloads[w]) / med / 1e6
            cell["pct_peak"] = 100 * cell["gflops"] / peak
            # Each process against the peak measured right after it.
            cell["peak_beside"] = peak_beside[key]
            flops = useful_flops(config, workloads[w])
            cell["pct_peak_paired"] = None if None in peak_beside[key] else statistics.median(
                100 * flops / v / 1e6 / p for v, p in zip(ms, peak_beside[key]))
            cell["x_floor"] = med / floors[dtype]
            # Each process against the floor at the mean of the bandwidth
            # read right before and right after it: the host's memory moves
            # by tens of percent within a run. (Until 2026-12-02 the reading
            # came after the process and the GEMMs of its dtype's peak.)
            cell["read_gbs_before_after"] = beside[key]
            cell["read_gbs_beside"] = [statistics.mean(pair) for pair in beside[key]]
            cell["x_floor_paired"] = statistics.median(
                v / floor_ms(params, dtype, gbs) for v, gbs in zip(ms, cell["read_gbs_beside"]))
            row["workloads"][w] = cell
        if reference and key != reference and not key.startswith("inprocess"):
            row["accuracy"] = accuracy(a, key, reference, workloads)
        rows.append(row)
    doc = {"machine": machine_description(a, limits), "limits": limits, "floor_ms": floors,
           "order": order, "provenance": provenance(a, log_text=(a.out / "runs.log").read_text()),
           "workloads": list(workloads), "reps": a.reps, "min_seconds": a.min_seconds, "reference": reference,
           "reference_label": "PyTorch fp32 slow path", "pytorch_env": PYTORCH_ENV, "rows": rows}
    (a.out / "results.json").write_text(json.dumps(doc, indent=1))
    write_report(a, doc)
    write_chart(a, doc)
    print((a.out / "results.md").read_text())


if __name__ == "__main__":
    main()
