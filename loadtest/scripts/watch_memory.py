#!/usr/bin/python3
"""What open grpc.health.v1 Watch streams cost `encoderd serve` (not part of
ctest): starts the daemon on its embedded default config (the bundled
model), opens --watches Watch streams over as few grpcio channels as the
server's 1,000 streams a connection allow (900 a channel), waits for each
one's first status, and prints the daemon's resident memory before and
after, per Watch, and how many Watches the daemon refused (at most 4 are
open at once on one connection, 4 x listen.max_connections in all;
--max-connections sets it). --per-channel 4 opens 4 Watches a channel,
each channel its own connection, so that only the total bounds them.

usage: loadtest/scripts/watch_memory.py [--binary build/cli/encoderd]
       [--watches 1800] [--max-connections N] [--per-channel 900]
Use /usr/bin/python3 (Debian's python3-grpcio).
"""
import argparse
import pathlib
import sys
import tempfile
import time

import grpc

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from e2e_common import start_daemon  # noqa: E402



def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit("no VmRSS for the daemon")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", default=str(REPO / "build" / "cli" / "encoderd"))
    p.add_argument("--watches", type=int, default=1800)
    p.add_argument("--max-connections", type=int)
    p.add_argument("--per-channel", type=int, default=900)
    a = p.parse_args()
    extra = ["--max-connections", str(a.max_connections)] if a.max_connections else []
    log = pathlib.Path(tempfile.mkdtemp(prefix="encoderd_watch_memory_")) / "serve.log"
    daemon = start_daemon(a.binary, extra, log)
    proc = daemon.proc
    try:
        target = f"127.0.0.1:{daemon.port}"
        channels = [grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
                    for _ in range((a.watches + a.per_channel - 1) // a.per_channel)]
        # An empty request asks for the server's status; SERVING is b"\x08\x01".
        deadline = time.monotonic() + 60
        for c in channels:
            while c.unary_unary("/grpc.health.v1.Health/Check")(
                    b"", timeout=10, wait_for_ready=True) != b"\x08\x01":
                if time.monotonic() > deadline:
                    raise SystemExit("the daemon did not become SERVING within 60 s")
                time.sleep(0.2)
        time.sleep(1)
        before = rss_kib(proc.pid)
        calls = [channels[i // a.per_channel].unary_stream("/grpc.health.v1.Health/Watch")(b"")
                 for i in range(a.watches)]
        refused = 0
        for call in calls:
            try:
                next(call)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
                refused += 1
        time.sleep(1)
        after = rss_kib(proc.pid)
        opened = a.watches - refused
        per = (after - before) * 1024 / opened if opened else 0
        print(f"{opened} Watch streams open, {refused} refused: RSS {before} -> {after} KiB, "
              f"{per:.0f} bytes per open Watch", flush=True)
        for c in channels:
            c.close()
    finally:
        daemon.stop()


if __name__ == "__main__":
    main()
