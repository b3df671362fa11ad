#!/usr/bin/python3
"""How long `encoderd serve` takes to exit after SIGTERM while clients hold
idle connections (not part of ctest): starts the daemon on its embedded
default config (the bundled model) with --shutdown-grace-s, opens
--channels grpcio channels that each make one Health.Check call and then sit
idle (or closes them first with --close-first), sends SIGTERM and prints the
seconds until the process exited, --rounds times.

usage: loadtest/scripts/drain_time.py [--binary build/cli/encoderd]
       [--channels 1] [--rounds 2] [--grace 10] [--close-first]
Use /usr/bin/python3 (Debian's python3-grpcio).
"""
import argparse
import signal
import socket
import subprocess
import time

import grpc

HEALTH_CHECK = "/grpc.health.v1.Health/Check"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_round(a):
    port = free_port()
    proc = subprocess.Popen([a.binary, "serve", "--port", str(port), "--shutdown-grace-s",
                             str(a.grace)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        channels = [grpc.insecure_channel(f"127.0.0.1:{port}") for _ in range(a.channels)]
        for c in channels:
            # An empty request asks for the server's status; SERVING is b"\x08\x01".
            deadline = time.monotonic() + 60
            while c.unary_unary(HEALTH_CHECK)(b"", timeout=10, wait_for_ready=True) != b"\x08\x01":
                if time.monotonic() > deadline:
                    raise SystemExit("the daemon did not become SERVING within 60 s")
                time.sleep(0.2)
        if a.close_first:
            for c in channels:
                c.close()
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=a.grace + 30)
        seconds = time.monotonic() - start
        for c in channels:
            c.close()
        return rc, seconds
    finally:
        if proc.poll() is None:
            proc.kill()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", default="build/cli/encoderd")
    p.add_argument("--channels", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--grace", type=float, default=10)
    p.add_argument("--close-first", action="store_true")
    a = p.parse_args()
    for r in range(a.rounds):
        rc, seconds = one_round(a)
        state = "closed" if a.close_first else "idle"
        print(f"round {r + 1}: exit {rc} {seconds:.2f} s after SIGTERM with {a.channels} "
              f"{state} channel(s) (grace {a.grace:g} s)", flush=True)


if __name__ == "__main__":
    main()
