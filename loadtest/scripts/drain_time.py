#!/usr/bin/python3
"""How long `encoderd serve` takes to exit after SIGTERM while clients hold
idle connections (not part of ctest): starts the daemon on its embedded
default config (the bundled model) with --shutdown-grace-s, opens
--channels grpcio channels that each make one Health.Check call and then sit
idle (or closes them first with --close-first), sends SIGTERM and prints the
seconds until the process exited, --rounds times. With --tls the gRPC port
serves TLS (a self-signed certificate made with the `openssl` CLI), which
the connection guard terminates; with --no-guard the port is gRPC's own
(--http2-guard false), plaintext, or TLS with both flags. With --watch each channel also
holds a grpc.health.v1 Watch stream open (a raw call, read by a thread);
with --health-checking each channel is made with client-side health
checking (a service config with healthCheckConfig), so grpcio itself
watches the server's health. With --stream each channel also holds an
EmbedStream open (one message answered, then idle; a raw call).

usage: loadtest/scripts/drain_time.py [--binary build/cli/encoderd]
       [--channels 1] [--rounds 2] [--grace 10] [--close-first] [--tls] [--no-guard]
       [--watch] [--health-checking] [--stream]
Use /usr/bin/python3 (Debian's python3-grpcio).
"""
import argparse
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import grpc

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "e2e"))
from e2e_common import self_signed_certificate  # noqa: E402

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"
EMBED_STREAM = "/encoderd.v1.Encoder/EmbedStream"
HEALTH_CHECKING = ('{"loadBalancingConfig": [{"round_robin": {}}], '
                   '"healthCheckConfig": {"serviceName": ""}}')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_to_end(stream):
    """Reads a response stream until the server ends it."""
    try:
        for _ in stream:
            pass
    except grpc.RpcError:
        pass


def one_round(a, certs):
    port = free_port()
    extra = ["--http2-guard", "false"] if a.no_guard else []
    if certs:
        extra += ["--tls-cert-file", str(certs[0]), "--tls-key-file", str(certs[1])]
    proc = subprocess.Popen([a.binary, "serve", "--port", str(port), "--shutdown-grace-s",
                             str(a.grace), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        target = f"127.0.0.1:{port}"
        credentials = certs and grpc.ssl_channel_credentials(certs[0].read_bytes())
        options = [("grpc.service_config", HEALTH_CHECKING)] if a.health_checking else []
        channels = [grpc.secure_channel(target, credentials, options) if certs else
                    grpc.insecure_channel(target, options) for _ in range(a.channels)]
        for c in channels:
            # An empty request asks for the server's status; SERVING is b"\x08\x01".
            deadline = time.monotonic() + 60
            while c.unary_unary(HEALTH_CHECK)(b"", timeout=10, wait_for_ready=True) != b"\x08\x01":
                if time.monotonic() > deadline:
                    raise SystemExit("the daemon did not become SERVING within 60 s")
                time.sleep(0.2)
        if a.watch:
            for c in channels:
                watch = c.unary_stream(HEALTH_WATCH)(b"")
                next(watch)  # the first status
                threading.Thread(target=read_to_end, args=(watch,), daemon=True).start()
        held = threading.Event()  # set at the end: the streams' clients end their side
        if a.stream:
            def one_message():
                yield b"\x0a\x05hello"  # EmbedRequest{texts: ["hello"]}
                held.wait()
            for c in channels:
                stream = c.stream_stream(EMBED_STREAM)(one_message())
                next(stream)  # its answer
                threading.Thread(target=read_to_end, args=(stream,), daemon=True).start()
        if a.close_first:
            for c in channels:
                c.close()
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=a.grace + 30)
        seconds = time.monotonic() - start
        held.set()
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
    p.add_argument("--tls", action="store_true")
    p.add_argument("--no-guard", action="store_true")
    p.add_argument("--watch", action="store_true")
    p.add_argument("--health-checking", action="store_true")
    p.add_argument("--stream", action="store_true")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        certs = self_signed_certificate(d) if a.tls else None
        for r in range(a.rounds):
            rc, seconds = one_round(a, certs)
            state = "closed" if a.close_first else "idle"
            how = ("TLS, " if a.tls else "") + ("no guard" if a.no_guard else "guarded")
            how += ", a Watch each" if a.watch else ""
            how += ", client-side health checking" if a.health_checking else ""
            how += ", an idle EmbedStream each" if a.stream else ""
            print(f"round {r + 1}: exit {rc} {seconds:.2f} s after SIGTERM with {a.channels} "
                  f"{state} channel(s) ({how}, grace {a.grace:g} s)", flush=True)


if __name__ == "__main__":
    main()
