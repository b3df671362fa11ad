#!/usr/bin/env python3
"""Connection flood against `encoderd serve`: legitimate goodput and latency,
and the daemon's fds, threads and RSS, while one process holds --connections
idle TCP connections to the gRPC port (half send nothing, half send the
HTTP/2 preface and then nothing); with --reopen it opens a new one whenever
one is closed.

Starts the daemon on the default model (with --max-connections), measures
legitimate clients alone (encoderd-loadtest, closed loop), then with the
flood held for --seconds. Prints both runs, the daemon's peak fds, threads
and RSS, its encoderd_connections_closed_total by reason and its log lines
about the cap. Benchmark, not a test: figures in docs/reliability.md.

    /usr/bin/python3 loadtest/scripts/connection_flood.py [--connections 2000]
        [--max-connections 1000] [--seconds 15]
"""
import pathlib
import resource
import socket
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from e2e_common import (benchmark_parser, closed_loop, metric_value, proc_fds,  # noqa: E402
                        proc_threads_rss, start_daemon)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def flood(port, connections, stop, opened, reopen):
    socks = []
    while not stop.is_set():
        while len(socks) < connections and not stop.is_set() and (reopen or opened[0] < connections):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                if len(socks) % 2:
                    s.sendall(PREFACE)
                s.setblocking(False)
                socks.append(s)
                opened[0] += 1
            except OSError:
                time.sleep(0.05)
                break
        alive = []
        for s in socks:  # drop the ones the server closed
            try:
                if s.recv(4096) == b"":
                    s.close()
                    continue
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                continue
            alive.append(s)
        socks = alive
        time.sleep(0.1)
    for s in socks:
        s.close()


def main():
    p = benchmark_parser(__doc__.split("\n")[0])
    p.add_argument("--connections", type=int, default=2000)
    p.add_argument("--max-connections", type=int, default=1000)
    p.add_argument("--seconds", type=int, default=15)
    p.add_argument("--reopen", action="store_true",
                   help="open a new connection for each one the daemon closes (a churn flood)")
    p.add_argument("--serve-arg", action="append", default=[])
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    serve = ["--model-name", "langid", "--model-dir", args.model_dir,
             "--max-connections", str(args.max_connections),
             *[x for a in args.serve_arg for x in a.split("=", 1)]]
    with tempfile.TemporaryDirectory() as tmp:
        log = pathlib.Path(tmp) / "serve.log"
        daemon = start_daemon(args.binary, serve, log)
        pid = daemon.proc.pid
        try:
            alone = closed_loop(args.loadtest, daemon.port, 5)
            fds0, (threads0, rss0) = proc_fds(pid), proc_threads_rss(pid)
            stop, opened = threading.Event(), [0]
            flooder = threading.Thread(target=flood, args=(daemon.port, args.connections, stop,
                                                           opened, args.reopen))
            flooder.start()
            peak = [fds0, threads0, rss0]
            sampling = threading.Event()

            def sample():
                while not sampling.is_set() and daemon.proc.poll() is None:
                    t, r = proc_threads_rss(pid)
                    peak[:] = [max(peak[0], proc_fds(pid)), max(peak[1], t), max(peak[2], r)]
                    time.sleep(0.2)
            sampler = threading.Thread(target=sample)
            sampler.start()
            time.sleep(3)
            flooded = closed_loop(args.loadtest, daemon.port, args.seconds)
            stop.set()
            flooder.join()
            sampling.set()
            sampler.join()
            if daemon.proc.poll() is not None:
                print(f"THE DAEMON DIED (status {daemon.proc.returncode}):\n" +
                      "\n".join(log.read_text().splitlines()[-10:]))
                return 1
            text = daemon.metrics_text()
        finally:
            daemon.stop()
        cap_lines = [line for line in log.read_text().splitlines()
                     if "connection cap" in line or "max_connections lowered" in line]

    def summary(r):
        return (f"{r['requests_ok'] / r['elapsed_s']:.0f} OK calls/s, {r['requests_error']} errors, "
                f"p50 {r['latency']['p50_us'] / 1000:.1f} ms, p99 {r['latency']['p99_us'] / 1000:.1f} ms")
    print(f"legitimate alone:       {summary(alone)}")
    print(f"legitimate under flood: {summary(flooded)}")
    print(f"flood: {args.connections} held, {opened[0]} opened in all")
    for reason in ("connection_cap", "evicted_idle", "preface_timeout", "rapid_reset",
                   "too_many_streams"):
        print(f"closed {reason}: {metric_value(text, 'encoderd_connections_closed_total', {'reason': reason}):.0f}")
    print(f"daemon: fds {fds0} -> peak {peak[0]}; threads {threads0} -> peak {peak[1]}; "
          f"RSS {rss0 / 2**20:.0f} -> peak {peak[2] / 2**20:.0f} MiB")
    for line in cap_lines[:3]:
        print(f"log: {line}")


if __name__ == "__main__":
    sys.exit(main())
