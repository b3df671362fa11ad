#!/usr/bin/env python3
"""A flood of TLS handshakes against `encoderd serve`'s TLS port: legitimate
goodput alone and while --attackers processes each open connections as fast
as they can, send a ClientHello (ALPN h2) and close without waiting for the
answer, which leaves the server's side of the handshake (its key exchange and
signature) to be done for nothing. The attackers connect from --attacker-address
(127.0.0.2), the legitimate clients from 127.0.0.1. With the connection guard on, the guard's
one thread does those handshakes; with --serve-arg=--http2-guard=false
gRPC's threads do. Prints both goodputs, the ClientHellos sent, the daemon's
CPU during the attack and how its connections were closed. Benchmark, not a
test: figures in docs/reliability.md.

    /usr/bin/python3 loadtest/scripts/tls_handshake_flood.py [--seconds 6] [--attackers 1] [--pin]
"""
import multiprocessing
import pathlib
import socket
import ssl
import sys
import tempfile
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from e2e_common import (add_attack_args, attack_serve_args, benchmark_parser,  # noqa: E402
                        closed_loop, proc_cpu_seconds, self_signed_certificate,
                        start_daemon)


def flood(port, seconds, counter, keep, source):
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    end = time.time() + seconds
    sent = 0
    kept = []
    while time.time() < end:
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=5,
                                           source_address=(source, 0))
        except OSError:
            time.sleep(0.01)
            continue
        raw.setblocking(False)
        s = context.wrap_socket(raw, server_hostname="localhost", do_handshake_on_connect=False)
        try:
            s.do_handshake()  # writes the ClientHello, then wants the answer
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, OSError):
            pass
        kept.append(s)
        while len(kept) > keep:
            kept.pop(0).close()
        sent += 1
        if sent % 50 == 0:
            with counter.get_lock():
                counter.value += 50


def main():
    p = benchmark_parser(__doc__.split("\n")[0])
    p.add_argument("--seconds", type=int, default=6)
    p.add_argument("--clients", type=int, default=16,
                   help="legitimate closed-loop clients (0: none; the attack alone, to read the "
                        "daemon's CPU under it)")
    p.add_argument("--attackers", type=int, default=1)
    p.add_argument("--keep", type=int, default=0,
                   help="connections each attacker keeps open after its ClientHello (the oldest "
                        "closed beyond that; 0: each closed at once)")
    p.add_argument("--attacker-address", default="127.0.0.2",
                   help="the attackers' source address (the legitimate clients' is 127.0.0.1: "
                        "the guard tarpits an address, not a connection)")
    add_attack_args(p)
    args = p.parse_args()
    serve_args = attack_serve_args(args)
    with tempfile.TemporaryDirectory() as tmp:
        self_signed_certificate(tmp)
        serve_args += ["--tls-cert-file", f"{tmp}/server.pem", "--tls-key-file", f"{tmp}/server.key"]
        client_args = ["--tls-ca", f"{tmp}/server.pem", "--tls-name", "localhost"]
        daemon = start_daemon(args.binary, ["--model-name", "langid", "--model-dir", args.model_dir,
                                            *serve_args], pathlib.Path(tmp) / "serve.log",
                              prefix=["taskset", "-c", "1"] if args.pin else [])
        try:
            legitimate = args.clients > 0
            if legitimate:
                alone = closed_loop(args.loadtest, daemon.port, args.seconds, args.clients, client_args)
            cpu0, started = proc_cpu_seconds(daemon.proc.pid), time.time()
            counter = multiprocessing.Value("l", 0)
            attackers = [multiprocessing.Process(target=flood, args=(daemon.port, args.seconds + 2, counter,
                                                                  args.keep, args.attacker_address))
                         for _ in range(args.attackers)]
            for a in attackers:
                a.start()
            time.sleep(0.5)
            if legitimate:
                attacked = closed_loop(args.loadtest, daemon.port, args.seconds, args.clients, client_args)
            for a in attackers:
                a.join()
            attack_cpu = proc_cpu_seconds(daemon.proc.pid) - cpu0
            attack_s = time.time() - started
            metrics = urllib.request.urlopen(
                f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=30).read().decode()
        finally:
            daemon.stop()

    def summary(r):
        return (f"{r['requests_ok'] / r['elapsed_s']:.0f} OK calls/s, {r['requests_error']} errors "
                f"{r['errors_by_code']}, p99 {r['latency']['p99_us'] / 1000:.1f} ms")
    if legitimate:
        print(f"legitimate alone:        {summary(alone)}")
        print(f"legitimate under attack: {summary(attacked)}")
    print(f"attack: {counter.value} ClientHellos in {args.seconds + 2} s by {args.attackers} "
          f"process(es) ({counter.value / (args.seconds + 2):.0f}/s)")
    print(f"daemon CPU during the attack: {attack_cpu:.1f} s ({attack_cpu / attack_s:.2f} of a CPU)")
    for line in metrics.splitlines():
        if line.startswith("encoderd_connections_closed_total") and not line.endswith(" 0"):
            print(f"daemon after: {line}")


if __name__ == "__main__":
    main()
