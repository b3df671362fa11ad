#!/usr/bin/env python3
"""Burst benchmark: a sudden open-loop burst far past capacity, from cold.

Per run: starts `encoderd serve` on the default model (CPU 1, one engine
thread), warms it with a closed loop of 64 clients for 4 s (so that its
throughput is known; not with --cold, where the burst meets a daemon that
has served nothing, its throughput only calibrated at load), then sends an
open-loop (Poisson) burst of Embed calls of one 8-24-word text at --rate
with --timeout-ms deadlines for --duration seconds, with no warm-up, from
encoderd-loadtest on CPU 0. Reports the OK calls, the codes, the daemon's
drops by reason, and the client connections the HTTP/2 guard closed as
abusive (from the daemon's log): a client whose calls expire at their
deadlines must not look like a rapid-reset attacker.

Benchmark, not a test (docs/reliability.md):

    /usr/bin/python3 loadtest/scripts/burst.py [--runs 5] [--rate 8000] [--timeout-ms 100]
        [--binary build/cli/encoderd] [--cold] [--out FILE.json]
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from e2e_common import start_daemon  # noqa: E402

WORKLOAD = ["--rpc", "embed", "--texts", "1", "--words", "8-24", "--seed", "1"]


def drops(text):
    """encoderd_requests_dropped_total by reason."""
    out = {}
    for m in re.finditer(r'^encoderd_requests_dropped_total\{[^}]*reason="([a-z_]+)"[^}]*\} (\S+)$',
                         text, re.M):
        out[m.group(1)] = out.get(m.group(1), 0) + float(m.group(2))
    return out


def one_run(args, tmp, n):
    log = tmp / f"serve{n}.log"
    model = pathlib.Path(args.model_dir).resolve().name
    daemon = start_daemon(args.binary, ["--model-name", model, "--model-dir", args.model_dir,
                                        "--num-threads", "1"], log, prefix=["taskset", "-c", "1"])
    try:
        load = ["taskset", "-c", "0", args.loadtest, "--target", f"127.0.0.1:{daemon.port}", *WORKLOAD]
        # From its model's readiness on, not from its port's: calls that come
        # while the model loads are refused, and made the warm-up exit 1 on a
        # machine that loads it in over a second.
        ready = time.time() + 120
        while "serving 1 model(s)" not in log.read_text():
            if time.time() > ready or daemon.proc.poll() is not None:
                sys.exit(f"the model did not get ready:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        if not args.cold:
            subprocess.run([*load, "--concurrency", "64", "--duration", "4", "--warmup", "1"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120,
                           check=True)
        before = drops(daemon.metrics_text())
        report = tmp / f"burst{n}.json"
        burst = subprocess.run([*load, "--mode", "open", "--rate", str(args.rate), "--duration",
                                str(args.duration), "--warmup", "0", "--timeout-ms",
                                str(args.timeout_ms), "--json-file", str(report)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=600)
        if not report.exists():  # it exits 1 when no call was OK, with its report
            sys.exit(f"encoderd-loadtest exited {burst.returncode}:\n{burst.stdout[-3000:]}")
        after = drops(daemon.metrics_text())
    finally:
        daemon.stop()
    r = json.loads(report.read_text())
    closed = re.findall(r"closing the connection from \S+ (\w+) \(", log.read_text())
    return {"ok": r["requests_ok"], "codes": r["errors_by_code"],
            "drops": {k: after[k] - before.get(k, 0) for k in sorted(after)
                      if after[k] - before.get(k, 0)},
            "connections_closed": {reason: closed.count(reason) for reason in sorted(set(closed))}}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default=str(REPO / "build" / "cli" / "encoderd"))
    p.add_argument("--loadtest", default=str(REPO / "build" / "loadtest" / "encoderd-loadtest"))
    p.add_argument("--model-dir", default=str(REPO / "models" / "langid"))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--rate", type=float, default=8000)
    p.add_argument("--timeout-ms", type=int, default=100)
    p.add_argument("--duration", type=float, default=8)
    p.add_argument("--cold", action="store_true",
                   help="no closed-loop warm-up: the burst is the daemon's first calls")
    p.add_argument("--out", help="write the runs as JSON here")
    args = p.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.runs):
            runs.append(one_run(args, pathlib.Path(tmp), n))
            print(json.dumps(runs[-1]), flush=True)
    closed = sum(1 for r in runs if r["connections_closed"])
    print(f"{args.runs} bursts of {args.rate:.0f} calls/s for {args.duration:.0f} s, "
          f"{args.timeout_ms} ms deadlines: OK calls {min(r['ok'] for r in runs)}-"
          f"{max(r['ok'] for r in runs)}; runs with a client connection closed by the guard: {closed}")
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(runs, indent=1) + "\n")


if __name__ == "__main__":
    main()
