#!/usr/bin/env python3
"""Scrape latency of the metrics port while slow clients hold connections.

Starts `encoderd serve` on the default model, opens N connections to its
metrics port that each send half a request line and then nothing (a
slow-loris client), and times Prometheus-style scrapes of /metrics made while
they are connected. Benchmark, not a test: figures in docs/reliability.md.

    /usr/bin/python3 loadtest/scripts/slow_clients.py [--clients 100] [--scrapes 5]
"""
import argparse
import pathlib
import socket
import sys
import tempfile
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from e2e_common import start_daemon  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default=str(REPO / "build" / "cli" / "encoderd"))
    p.add_argument("--model-dir", default=str(REPO / "models" / "langid"))
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--scrapes", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        daemon = start_daemon(args.binary, ["--model-name", "langid", "--model-dir", args.model_dir],
                              pathlib.Path(tmp) / "serve.log")
        url = f"http://127.0.0.1:{daemon.metrics_port}/metrics"
        try:
            urllib.request.urlopen(url, timeout=30).read()
            slow = []
            for _ in range(args.clients):
                s = socket.create_connection(("127.0.0.1", daemon.metrics_port))
                s.sendall(b"GET /metr")
                slow.append(s)
            times = []
            for _ in range(args.scrapes):
                t = time.perf_counter()
                body = urllib.request.urlopen(url, timeout=600).read()
                times.append(time.perf_counter() - t)
                assert b"encoderd_" in body
            still_open = 0
            for s in slow:
                s.setblocking(False)
                try:
                    still_open += s.recv(1) != b""
                except BlockingIOError:
                    still_open += 1
                s.close()
            print(f"{args.clients} slow clients: scrape seconds {', '.join(f'{x:.3f}' for x in times)}; "
                  f"slow connections still open afterwards: {still_open}")
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
