#!/usr/bin/env python3
"""Fairness between clients: one floods, the other asks for little.

Starts `encoderd serve` on the default model, measures its capacity (closed
loop, 64 clients, Embed of one 8-24-word text), then runs two encoderd-loadtest
processes at once, each on its own connection, open loop with 1 s deadlines:
the flooder at --flood times capacity and the other client at --modest times
capacity. Per client: goodput (OK calls a second), the share of its offered
calls answered OK, p50/p99 latency of OK calls from their intended send time,
and its codes. Once with listen.fair_share on and once off (first come, first
served), each on a fresh daemon.

Benchmark, not a test: the figures go in docs/reliability.md. --pin puts the
daemon on CPU 1 (one engine thread) and both load generators on CPU 0.

    /usr/bin/python3 loadtest/scripts/fairness.py [--flood 4] [--modest 0.2] [--duration 8] [--pin]
"""
import json
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from e2e_common import benchmark_parser, start_daemon  # noqa: E402

WORKLOAD = ["--rpc", "embed", "--texts", "1", "--words", "8-24"]


def loadtest_cmd(args, port, report, extra):
    return [*(["taskset", "-c", "0"] if args.pin else []), args.loadtest,
            "--target", f"127.0.0.1:{port}", *WORKLOAD, *extra, "--json-file", str(report)]


def summary(name, offered, r, duration):
    ok = r["requests_ok"] / duration
    return {"client": name, "offered_per_s": round(offered, 1), "goodput_per_s": round(ok, 1),
            "answered_ok": round(ok / offered, 3) if offered else 0,
            "p50_ms": r["latency"]["p50_us"] / 1e3, "p99_ms": r["latency"]["p99_us"] / 1e3,
            "codes": r["errors_by_code"]}


def run(args, tmp, fair):
    serve = ["--model-name", "langid", "--model-dir", args.model_dir,
             "--fair-share", "true" if fair else "false"]
    if args.pin:
        serve += ["--num-threads", "1"]
    daemon = start_daemon(args.binary, serve, tmp / f"serve_{fair}.log",
                          prefix=["taskset", "-c", "1"] if args.pin else [])
    try:
        subprocess.run(loadtest_cmd(args, daemon.port, tmp / "warm.json",
                                    ["--concurrency", "64", "--duration", "3", "--warmup", "1"]),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        cap_json = tmp / "capacity.json"
        subprocess.run(loadtest_cmd(args, daemon.port, cap_json,
                                    ["--concurrency", "64", "--duration", str(args.duration),
                                     "--warmup", "2"]),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        capacity = json.loads(cap_json.read_text())["requests_ok"] / args.duration
        rates = {"flooder": args.flood * capacity, "modest": args.modest * capacity}
        procs = {}
        for name, rate in rates.items():
            procs[name] = subprocess.Popen(
                loadtest_cmd(args, daemon.port, tmp / f"{name}.json",
                             ["--mode", "open", "--rate", f"{rate:.1f}", "--seed",
                              "1" if name == "flooder" else "2",
                              "--duration", str(args.duration), "--warmup", "2",
                              "--timeout-ms", "1000"]),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for p in procs.values():
            p.wait(timeout=600)
        return capacity, [summary(name, rates[name], json.loads((tmp / f"{name}.json").read_text()),
                                  args.duration) for name in rates]
    finally:
        daemon.stop()


def main():
    p = benchmark_parser(__doc__.split("\n")[0])
    p.add_argument("--flood", type=float, default=4, help="the flooder's rate, times capacity")
    p.add_argument("--modest", type=float, default=0.2, help="the other's rate, times capacity")
    p.add_argument("--duration", type=float, default=8)
    p.add_argument("--pin", action="store_true",
                   help="daemon on CPU 1 (one engine thread), load generators on CPU 0")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for fair in (True, False):
            capacity, clients = run(args, pathlib.Path(tmp), fair)
            print(f"fair_share={'on' if fair else 'off'}: capacity {capacity:.0f} calls/s "
                  f"(closed loop, 64 clients)", flush=True)
            for c in clients:
                print(f"  {json.dumps(c)}", flush=True)


if __name__ == "__main__":
    main()
