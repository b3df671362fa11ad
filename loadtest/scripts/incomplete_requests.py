#!/usr/bin/python3
"""What calls whose requests never finish cost `encoderd serve` (not part of
ctest): starts the daemon on its embedded default config (the bundled
model), opens --connections raw HTTP/2 connections and on each --streams
Embed calls whose HEADERS come without END_STREAM and whose request never
follows (each such stream holds gRPC's call state), waits --settle seconds,
and prints the daemon's resident memory before and after, per call held,
and how many calls the daemon answered at once (the guard refuses new ones
past 256 such calls on a connection, or 16,384 in all for a connection
holding 4 or more). The connections stay open until the end.

usage: loadtest/scripts/incomplete_requests.py [--binary build/cli/encoderd]
       [--connections 4] [--streams 900] [--settle 3]
Use /usr/bin/python3 (Debian's python3-hyperframe and python3-hpack).
"""
import argparse
import pathlib
import selectors
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from e2e_common import RawHttp2Client, proc_rss_bytes, start_daemon  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", default=str(REPO / "build" / "cli" / "encoderd"))
    p.add_argument("--connections", type=int, default=4)
    p.add_argument("--streams", type=int, default=900, help="calls opened per connection")
    p.add_argument("--settle", type=float, default=3.0, help="seconds to wait for answers")
    a = p.parse_args()
    log = pathlib.Path(tempfile.mkdtemp(prefix="encoderd_incomplete_")) / "serve.log"
    daemon = start_daemon(a.binary, ["--max-connections", str(max(4096, a.connections + 16))], log)
    conns = []
    try:
        time.sleep(1)
        before = proc_rss_bytes(daemon.proc.pid)
        selector = selectors.DefaultSelector()
        for _ in range(a.connections):
            c = RawHttp2Client(daemon.port)
            c.open([1 + 2 * i for i in range(a.streams)])
            conns.append(c)
            selector.register(c.sock, selectors.EVENT_READ, c)
        end = time.monotonic() + a.settle
        while time.monotonic() < end:
            for key, _ in selector.select(timeout=0.1):
                c = key.data
                try:
                    data = c.sock.recv(65536)
                except OSError:
                    data = b""
                if not c.take(data):
                    selector.unregister(c.sock)
        after = proc_rss_bytes(daemon.proc.pid)
        answered = sum(len(c.statuses) for c in conns)
        codes = sorted({code for c in conns for code, _ in c.statuses.values()})
        held = a.connections * a.streams - answered
        closed = sum(c.closed for c in conns)
        per = (after - before) / held if held else 0
        print(f"{a.connections} connection(s) x {a.streams} calls: {held} held, {answered} "
              f"answered at once (grpc-status {codes}), {closed} connection(s) closed by the "
              f"daemon; RSS {before // 1024} -> {after // 1024} KiB, {per:.0f} bytes per call "
              f"held", flush=True)
    finally:
        for c in conns:
            c.close()
        daemon.stop()


if __name__ == "__main__":
    main()
