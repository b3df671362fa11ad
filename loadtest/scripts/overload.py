#!/usr/bin/env python3
"""Overload benchmark: goodput, latency and wasted work at and past capacity.

Starts `encoderd serve` on the default model, measures its capacity (closed
loop, 64 clients, Embed of one 8-24-word text), then drives it open loop
(Poisson, encoderd-loadtest) at 1x, 1.5x, 2x, 4x and 8x that capacity with
1 s deadlines, 100 ms deadlines and none. Per run: goodput (OK calls a second
of the measured window), p50/p99 latency of OK calls from their intended send
time, p99 time to a refusal, the codes, and the wasted sequences (computed by
the engine for calls that did not get OK, from the daemon's metrics). Then a
step test: 0.5x, 3x, 0.5x for --step-seconds each, with per-second goodput and
p99 (CSV and a gnuplot PNG). Then a burst below capacity, as the soak sees
one: 0.7x for 10 s, 3x for 2 s, 0.7x for --recovery-seconds, with 30 s
deadlines, per second: OK and refused calls, and the daemon's standing-queue
refusals; at 0.7x every call should be served once the burst has drained.

With --repeats N the capacity and the cells are measured N times in turn
(capacity, every cell, capacity, every cell, ...), each cell's goodput taken
against the capacity of its own round, and a second table gives each cell's
median and range over the rounds: on a shared VM the same closed loop reads
10-20% apart from one minute to the next, which one round cannot tell from
the policy. For that, each cell also reports the engine's own speed in it
(sequences computed per second of engine time, from the daemon's
`encoderd_batch_seconds_total`), the share of the cell its executor was busy,
and goodput over that speed: the engine's capacity at that very moment,
which the policy's losses (an idle executor, wasted work) take away from
and the machine's drift does not.

Benchmark, not a test: the figures go in docs/reliability.md. The load
generator shares the machine with the daemon (its CPU is in the JSON, with the
daemon's CPU and the CPU time the hypervisor took, steal), unless
--pin gives each its own CPU (the daemon CPU 1 with one engine thread, the load
generator CPU 0), as a load generator on another machine would: then the
figures are the daemon's alone.

    /usr/bin/python3 loadtest/scripts/overload.py [--out DIR] [--duration S] [--pin]
        [--repeats N] [--step-seconds 10] [--recovery-seconds 20]
        [--model-dir DIR] [--serve-arg=--predict-deadlines=false ...]
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from e2e_common import metric_value, proc_cpu_seconds, start_daemon, steal_seconds  # noqa: E402

WORKLOAD = ["--rpc", "embed", "--texts", "1", "--words", "8-24", "--seed", "1"]
MULTIPLES = [1, 1.5, 2, 4, 8]
DEADLINES_MS = [1000, 100, 0]  # 0: no deadline


def loadtest(args, port, tmp, name, extra):
    report = tmp / f"{name}.json"
    cmd = [*(["taskset", "-c", "0"] if args.pin else []), args.loadtest, "--target", f"127.0.0.1:{port}", *WORKLOAD, *extra,
           "--json-file", str(report)]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    return json.loads(report.read_text())


def counters(daemon):
    text = daemon.metrics_text()
    return {"computed": metric_value(text, "encoderd_batch_size_sequences_sum"),
            "batches": metric_value(text, "encoderd_batch_size_sequences_count"),
            "busy_s": metric_value(text, "encoderd_batch_seconds_total"),
            "refused_standing": metric_value(text, "encoderd_requests_dropped_total",
                                             {"reason": "refused_standing_queue"}),
            "ok": metric_value(text, "encoderd_requests_total", {"rpc": "Embed", "code": "OK"}),
            "in_flight": metric_value(text, "encoderd_in_flight_requests")}


def cpu_clock(args, daemon):
    """(daemon CPU seconds, seconds the hypervisor took from the daemon's CPU,
    or from all CPUs when not pinned): a cell measured while the host stole
    CPU says less about the daemon than about the host."""
    return proc_cpu_seconds(daemon.proc.pid), steal_seconds(1 if args.pin else None)


def settle(daemon):
    """Waits for the daemon's calls to end, then 1 s more; returns when they had."""
    deadline = time.time() + 60
    while time.time() < deadline and counters(daemon)["in_flight"] > 0:
        time.sleep(0.2)
    drained = time.monotonic()
    time.sleep(1.0)
    return drained


def engine_figures(before, after, wall_s):
    """What the engine did between two counters() readings `wall_s` apart:
    its speed on this machine at that moment (sequences per second of
    engine time), how busy its executor was, and its mean batch. On a VM
    whose speed drifts from minute to minute, goodput over the speed the
    engine itself had in the same cell tells what the policy lost (idle
    executors, wasted work, small batches not included) from what the
    machine did."""
    busy = after["busy_s"] - before["busy_s"]
    batches = after["batches"] - before["batches"]
    computed = after["computed"] - before["computed"]
    return {"engine_per_s": computed / busy if busy else 0.0,
            "engine_busy": busy / wall_s if wall_s else 0.0,
            "mean_batch": computed / batches if batches else 0.0}


def open_run(args, daemon, tmp, name, rate, timeout_ms, duration, warmup, extra=()):
    settle(daemon)
    before = counters(daemon)
    start = time.monotonic()
    cpu0, steal0 = cpu_clock(args, daemon)
    r = loadtest(args, daemon.port, tmp, name,
                 ["--mode", "open", "--rate", f"{rate:.1f}", "--duration", str(duration),
                  "--warmup", str(warmup), "--timeout-ms", str(timeout_ms), *extra])
    cpu1, steal1 = cpu_clock(args, daemon)
    drained = settle(daemon)
    after = counters(daemon)
    computed = after["computed"] - before["computed"]
    ok = after["ok"] - before["ok"]
    engine = engine_figures(before, after, drained - start)
    return {**engine, "goodput_of_engine": r["requests_ok"] / duration / engine["engine_per_s"]
            if engine["engine_per_s"] else 0.0,
            "offered_per_s": rate, "timeout_ms": timeout_ms, "duration_s": duration,
            "goodput_per_s": r["requests_ok"] / duration,
            "p50_ms": r["latency"]["p50_us"] / 1e3, "p99_ms": r["latency"]["p99_us"] / 1e3,
            "refusal_p99_ms": r["refusal"]["p99_us"] / 1e3, "codes": r["errors_by_code"],
            # Failed by the client, sent after their deadline had passed.
            "sent_past_deadline": r.get("sent_past_deadline", 0),
            "ok": r["requests_ok"], "computed_sequences": computed, "ok_sequences": ok,
            "wasted_sequences": computed - ok,
            "wasted_fraction": (computed - ok) / computed if computed else 0.0,
            "client_cpu_s": r.get("client_cpu_s"),
            # Over warm-up and the measured window.
            "daemon_cpu_s": cpu1 - cpu0, "steal_s": steal1 - steal0,
            # How late the load generator sent its calls: past ~100 ms it, not
            # the daemon, is the bottleneck.
            "send_lag_p99_ms": r["send_lag"]["p99_us"] / 1e3}


def deadline_name(run):
    return f"{run['timeout_ms']} ms" if run["timeout_ms"] else "none"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default=str(REPO / "build" / "cli" / "encoderd"))
    p.add_argument("--loadtest", default=str(REPO / "build" / "loadtest" / "encoderd-loadtest"))
    p.add_argument("--model-dir", default=str(REPO / "models" / "langid"))
    p.add_argument("--out", default="/tmp/encoderd-overload")
    p.add_argument("--duration", type=float, default=8)
    p.add_argument("--warmup", type=float, default=2)
    p.add_argument("--step-seconds", type=int, default=10, help="0: no step test")
    p.add_argument("--recovery-seconds", type=int, default=20,
                   help="0.7x after the burst below capacity; 0: no burst test")
    p.add_argument("--multiples", default=",".join(str(m) for m in MULTIPLES))
    p.add_argument("--deadlines-ms", default=",".join(str(d) for d in DEADLINES_MS),
                   help="0: no deadline")
    p.add_argument("--repeats", type=int, default=1,
                   help="rounds of capacity and cells, each cell against its round's capacity")
    p.add_argument("--pin", action="store_true",
                   help="daemon on CPU 1 (one engine thread), load generator on CPU 0")
    p.add_argument("--serve-arg", action="append", default=[],
                   help="extra `encoderd serve` argument (repeatable), e.g. --serve-arg=--predict-deadlines=false")
    args = p.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    serve_args = []
    for a in args.serve_arg:
        serve_args.extend(a.split("=", 1) if a.startswith("--") and "=" in a else [a])
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        if args.pin:
            serve_args += ["--num-threads", "1"]
        model = pathlib.Path(args.model_dir).resolve().name
        daemon = start_daemon(args.binary, ["--model-name", model, "--model-dir", args.model_dir,
                                            *serve_args], tmp / "serve.log",
                              prefix=["taskset", "-c", "1"] if args.pin else [])
        try:
            loadtest(args, daemon.port, tmp, "warm", ["--concurrency", "64", "--duration", "3",
                                                      "--warmup", "1"])
            runs = []
            capacities = []
            for rnd in range(args.repeats):
                settle(daemon)
                cpu0, steal0 = cpu_clock(args, daemon)
                before, start = counters(daemon), time.monotonic()
                cap = loadtest(args, daemon.port, tmp, "capacity",
                               ["--concurrency", "64", "--duration", str(args.duration), "--warmup", "2"])
                wall = time.monotonic() - start
                cpu1, steal1 = cpu_clock(args, daemon)
                round_capacity = cap["requests_ok"] / args.duration
                capacities.append({"capacity_per_s": round_capacity, "daemon_cpu_s": cpu1 - cpu0,
                                   "steal_s": steal1 - steal0,
                                   **engine_figures(before, counters(daemon), wall)})
                print(f"round {rnd}: capacity (closed loop, 64 clients): {round_capacity:.0f} calls/s, "
                      f"{capacities[-1]}", flush=True)
                for timeout_ms in [int(d) for d in args.deadlines_ms.split(",")]:
                    for m in [float(x) for x in args.multiples.split(",")]:
                        r = open_run(args, daemon, tmp, f"open_{timeout_ms}_{m}", m * round_capacity,
                                     timeout_ms, args.duration, args.warmup)
                        probe = capacities[-1]["engine_per_s"]
                        r.update(multiple=m, round=rnd, capacity_per_s=round_capacity,
                                 goodput_share=r["goodput_per_s"] / round_capacity,
                                 engine_of_capacity_run=r["engine_per_s"] / probe if probe else 0.0)
                        runs.append(r)
                        print(json.dumps(r), flush=True)
            capacity = capacities[0]["capacity_per_s"]
            latest = capacities[-1]["capacity_per_s"]  # the step and burst tests' reference
            capacity_clock = {k: capacities[0][k] for k in ("daemon_cpu_s", "steal_s")}
            step = []
            settle(daemon)
            for phase, m in enumerate([0.5, 3, 0.5] if args.step_seconds > 0 else []):
                csv = tmp / f"step{phase}.csv"
                loadtest(args, daemon.port, tmp, f"step{phase}",
                         ["--mode", "open", "--rate", f"{m * latest:.1f}",
                          "--duration", str(args.step_seconds), "--warmup", "0",
                          "--timeout-ms", "1000", "--per-second-csv", str(csv)])
                for line in csv.read_text().splitlines()[1:args.step_seconds + 1]:
                    sec, ok, errors, p50, p99 = line.split(",")
                    step.append({"t": phase * args.step_seconds + int(sec), "multiple": m,
                                 "goodput": int(ok), "errors": int(errors), "p50_ms": float(p50),
                                 "p99_ms": float(p99)})
            recovery = []
            settle(daemon)
            phases = [(0.7, 10), (3, 2), (0.7, args.recovery_seconds)] if args.recovery_seconds > 0 else []
            t0 = 0
            for phase, (m, seconds) in enumerate(phases):
                csv = tmp / f"recovery{phase}.csv"
                before = counters(daemon)["refused_standing"]
                loadtest(args, daemon.port, tmp, f"recovery{phase}",
                         ["--mode", "open", "--rate", f"{m * latest:.1f}",
                          "--duration", str(seconds), "--warmup", "0", "--timeout-ms", "30000",
                          "--per-second-csv", str(csv)])
                for line in csv.read_text().splitlines()[1:seconds + 1]:
                    sec, ok, errors, p50, p99 = line.split(",")
                    recovery.append({"t": t0 + int(sec), "multiple": m, "ok": int(ok),
                                     "errors": int(errors), "p99_ms": float(p99)})
                # Counted when the phase's calls are done (the tool waits for them).
                if recovery:
                    recovery[-1]["refused_standing_in_phase"] = \
                        counters(daemon)["refused_standing"] - before
                t0 += seconds
        finally:
            daemon.stop()
    summary = {"model_dir": args.model_dir, "pin": args.pin, "capacity_per_s": capacity,
               "capacity_clock": capacity_clock, "capacities": capacities,
               "serve_args": serve_args, "runs": runs, "step": step, "recovery": recovery}
    (out / "overload.json").write_text(json.dumps(summary, indent=1) + "\n")
    rounds = ", ".join(f"{c['capacity_per_s']:.0f}" for c in capacities)
    lines = [f"{args.model_dir}: capacity {capacity:.0f} calls/s (closed loop, 64 clients"
             + (f"; rounds: {rounds}" if len(capacities) > 1 else "") + "); "
             f"serve args {serve_args or 'default'}"
             + ("; daemon on CPU 1, load generator on CPU 0" if args.pin else "")
             + f"; capacity run: daemon CPU {capacity_clock['daemon_cpu_s']:.1f} s, "
               f"steal {capacity_clock['steal_s']:.2f} s",
             "", "| round | deadline | load | offered/s | goodput/s | goodput / capacity | p50 ms "
             "| p99 ms | p99 refusal ms | codes | wasted sequences | client send lag p99 ms "
             "| daemon CPU s | steal s |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in runs:
        codes = ", ".join(f"{k} {v}" for k, v in sorted(r["codes"].items())) or "-"
        lines.append(f"| {r['round']} | {deadline_name(r)} | {r['multiple']}x | {r['offered_per_s']:.0f} "
                     f"| {r['goodput_per_s']:.0f} | {r['goodput_share']:.0%} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} "
                     f"| {r['refusal_p99_ms']:.1f} | {codes} | {r['wasted_fraction']:.1%} "
                     f"({r['wasted_sequences']:.0f}) | {r['send_lag_p99_ms']:.1f} "
                     f"| {r['daemon_cpu_s']:.1f} | {r['steal_s']:.2f} |")
    if runs:
        lines += ["", f"Over the {len(capacities)} round(s), median (lowest-highest): goodput as a share of "
                  "its round's capacity, p50 and p99 of OK calls; highest p99 time to a refusal and "
                  "wasted share; goodput over the engine's speed in the same cell (sequences per "
                  "second of engine time, `encoderd_batch_seconds_total`), the share of the cell the "
                  "executor was busy, the engine's speed over its speed in the round's capacity run, "
                  "and the mean batch (sequences)", "",
                  "| deadline | load | goodput / capacity | p50 ms | p99 ms | p99 refusal ms | wasted "
                  "| goodput / engine's speed | engine busy | engine's speed / capacity run's | mean batch |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for key in dict.fromkeys((r["timeout_ms"], r["multiple"]) for r in runs):
            cell = [r for r in runs if (r["timeout_ms"], r["multiple"]) == key]

            def spread(field, fmt, scale=1.0):
                v = [r[field] * scale for r in cell]
                return f"{statistics.median(v):{fmt}} ({min(v):{fmt}}-{max(v):{fmt}})"
            lines.append(f"| {deadline_name(cell[0])} | {key[1]}x | {spread('goodput_share', '.0f', 100)}% "
                         f"| {spread('p50_ms', '.0f')} | {spread('p99_ms', '.0f')} "
                         f"| {max(r['refusal_p99_ms'] for r in cell):.1f} "
                         f"| {max(r['wasted_fraction'] for r in cell):.1%} "
                         f"| {spread('goodput_of_engine', '.0f', 100)}% | {spread('engine_busy', '.0f', 100)}% "
                         f"| {spread('engine_of_capacity_run', '.0f', 100)}% | {spread('mean_batch', '.0f')} |")
    lines += ["", "Step test (1 s deadlines): second, load, goodput, p99 ms",
              "", "| t | load | goodput | p99 ms |", "|---:|---|---:|---:|"]
    lines += [f"| {s['t']} | {s['multiple']}x | {s['goodput']} | {s['p99_ms']:.1f} |" for s in step]
    lines += ["", "Burst below capacity (30 s deadlines): second, load, OK, failed (by intended "
              "send time), p99 ms of OK; standing-queue refusals in the phase (daemon)",
              "", "| t | load | OK | failed | p99 ms | standing refusals in phase |",
              "|---:|---|---:|---:|---:|---:|"]
    lines += [f"| {s['t']} | {s['multiple']}x | {s['ok']} | {s['errors']} | {s['p99_ms']:.1f} | "
              f"{s.get('refused_standing_in_phase', '')} |" for s in recovery]
    (out / "overload.md").write_text("\n".join(lines) + "\n")
    csv = out / "step.csv"
    csv.write_text("t,multiple,goodput,p99_ms\n" +
                   "".join(f"{s['t']},{s['multiple']},{s['goodput']},{s['p99_ms']}\n" for s in step))
    plot = (f"set terminal png size 900,500; set output '{out / 'step.png'}'; set datafile separator ',';"
            "set key outside; set xlabel 'second'; set ylabel 'OK calls/s'; set y2label 'p99 ms (OK)';"
            "set y2tics; set ytics nomirror; set title 'Step 0.5x -> 3x -> 0.5x of capacity';"
            f"plot '{csv}' every ::1 using 1:3 with linespoints title 'goodput',"
            f" '' every ::1 using 1:4 axes x1y2 with linespoints title 'p99'")
    if step:
        subprocess.run(["gnuplot", "-e", plot], check=False)
    print((out / "overload.md").read_text())


if __name__ == "__main__":
    main()
