#!/usr/bin/python3
"""End-to-end test of listen.max_connection_age_s: a long-lived client
channel reaches a replica started after it connected, and calls in flight
survive the GOAWAY that ends a connection's age.

A client with one channel keeps its HTTP/2 connections for as long as they
live, and gRPC re-resolves its target only when a connection ends. Here the
client uses `round_robin` over `dns://127.0.0.1:PORT/encoderd.test:P`, answered
by a small DNS server in this process (the resolver we control): first with
daemon A (127.0.0.1:P) only, then also with daemon B (127.0.0.2:P) started
after the client connected, as a Kubernetes headless Service would after a
scale-up.

- With max_connection_age_s on A, B gets calls within seconds.
- With it off (the control), B gets none: the test can fail.
- A call held in the queue (max_queue_delay_us) across the GOAWAY finishes OK
  with a grace longer than the call, and is cut off (UNAVAILABLE) with a
  grace shorter than it; the channel's next call succeeds either way.
- listen.max_connection_idle_s closes connections that carry no call (the
  daemon's open fds fall by one per quiet client); without it they stay.

usage: scaleout_e2e_test.py --binary build/cli/encoderd --source-dir REPO
       [--model-dir DIR]   (default: REPO/models/langid)
Exits 0 when every check passed; prints each failed check.
"""
import os

# The c-ares resolver (grpc's native one ignores a DNS server in the target);
# set before grpc is imported.
os.environ["GRPC_DNS_RESOLVER"] = "ares"

import pathlib  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import grpc  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import e2e_common as common  # noqa: E402
from e2e_common import check  # noqa: E402

NAME = "encoderd.test"


class DnsServer:
    """Answers A queries for any name with the current `addresses` (TTL 0);
    every other query (AAAA, the TXT service-config lookup) with no records."""

    def __init__(self):
        self.addresses = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.queries = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                query, peer = self.sock.recvfrom(512)
            except OSError:
                return
            if len(query) < 17:
                continue
            end = 12
            while end < len(query) and query[end] != 0:
                end += 1 + query[end]
            if end + 5 > len(query):
                continue
            qtype = struct.unpack(">H", query[end + 1:end + 3])[0]
            question = query[12:end + 5]
            answers = list(self.addresses) if qtype == 1 else []
            self.queries += qtype == 1
            reply = query[:2] + struct.pack(">HHHHH", 0x8180, 1, len(answers), 0, 0) + question
            for address in answers:
                reply += b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 0, 4) + socket.inet_aton(address)
            self.sock.sendto(reply, peer)

    def close(self):
        self.sock.close()


def free_port_on_both():
    """A TCP port free on 127.0.0.1 and on 127.0.0.2."""
    for _ in range(50):
        a = socket.socket()
        a.bind(("127.0.0.1", 0))
        port = a.getsockname()[1]
        b = socket.socket()
        try:
            b.bind(("127.0.0.2", port))
            return port
        except OSError:
            continue
        finally:
            a.close()
            b.close()
    raise RuntimeError("no port free on both 127.0.0.1 and 127.0.0.2")


def started(binary, daemon, timeout=120):
    """`daemon` once its health is SERVING (`encoderd health`: the models are
    loaded; it listens before)."""
    end = time.time() + timeout
    while time.time() < end:
        probe = subprocess.run([binary, "health", "--address", daemon.address,
                                "--port", str(daemon.port), "--timeout", "1"],
                               capture_output=True, timeout=30)
        if probe.returncode == 0:
            return daemon
        time.sleep(0.05)
    raise RuntimeError(f"not SERVING after {timeout} s; see {daemon.log_path}")


def ok_calls(daemon):
    return daemon.metric("encoderd_requests_total", {"rpc": "Embed", "code": "OK"})


def channel_to(dns, port):
    return grpc.insecure_channel(
        f"dns://127.0.0.1:{dns.port}/{NAME}:{port}",
        options=[("grpc.lb_policy_name", "round_robin"),
                 # gRPC re-resolves at most this often (30 s by default).
                 ("grpc.dns_min_time_between_resolutions_ms", 500)])


def spreads_to_new_replica(args, pb2, pb2_grpc, tmp, age_s, seconds):
    """Client on A; B joins; `seconds` of calls. Returns (calls B served,
    calls A served after B joined, codes that were not OK)."""
    port = free_port_on_both()
    serve = ["--port", str(port), "--model-name", "langid", "--model-dir", args.model_dir,
             "--max-connection-age-s", str(age_s), "--max-connection-age-grace-s", "5"]
    a = started(args.binary, common.start_daemon(args.binary, serve, tmp / f"a_{age_s}.log",
                                                 address="127.0.0.1"))
    b = None
    dns = DnsServer()
    dns.addresses = ["127.0.0.1"]
    channel = channel_to(dns, port)
    stub = pb2_grpc.EncoderStub(channel)
    request = pb2.EmbedRequest(model="langid", texts=["the quick brown fox"])
    errors = {}

    def call():
        try:
            stub.Embed(request, timeout=10)
        except grpc.RpcError as e:
            errors[e.code().name] = errors.get(e.code().name, 0) + 1

    try:
        for _ in range(20):
            call()
        b = started(args.binary, common.start_daemon(args.binary, serve, tmp / f"b_{age_s}.log",
                                                     address="127.0.0.2"))
        dns.addresses = ["127.0.0.1", "127.0.0.2"]
        a_before = ok_calls(a)
        end = time.time() + seconds
        while time.time() < end:
            call()
            time.sleep(0.01)
        return ok_calls(b), ok_calls(a) - a_before, errors
    finally:
        channel.close()
        dns.close()
        a.stop()
        if b:
            b.stop()


def call_across_goaway(args, pb2, pb2_grpc, tmp, grace_s):
    """An Embed held ~3 s in the queue on a connection whose age is 1 s, then
    a Tokenize (not queued) on the same channel. Returns both codes."""
    daemon = started(args.binary, common.start_daemon(args.binary, [
        "--model-name", "langid", "--model-dir", args.model_dir,
        "--max-connection-age-s", "1", "--max-connection-age-grace-s", str(grace_s),
        "--max-queue-delay-us", "3000000"], tmp / f"grace_{grace_s}.log"))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{daemon.port}") as channel:
            stub = pb2_grpc.EncoderStub(channel)
            codes = []
            for rpc, request in ((stub.Embed, pb2.EmbedRequest(model="langid",
                                                               texts=["held in the queue"])),
                                 (stub.Tokenize, pb2.TokenizeRequest(model="langid",
                                                                     texts=["next"]))):
                try:
                    rpc(request, timeout=20)
                    codes.append("OK")
                except grpc.RpcError as e:
                    codes.append(e.code().name)
            return codes
    finally:
        daemon.stop()


def idle_connections_closed(args, pb2, pb2_grpc, tmp, idle_s):
    """Ten channels make one call each and go quiet. Returns the daemon's
    open fds before they connected and 3 s after their calls. (Read with
    them connected, the fds were the baseline before: on a slow machine
    the first connection could idle out before that reading.)"""
    serve = ["--model-name", "langid", "--model-dir", args.model_dir]
    if idle_s:
        serve += ["--max-connection-idle-s", str(idle_s)]
    daemon = started(args.binary,
                     common.start_daemon(args.binary, serve, tmp / f"idle_{idle_s}.log"))
    before = common.proc_fds(daemon.proc.pid)
    # A subchannel pool of its own each: ten connections, not one shared.
    channels = [grpc.insecure_channel(f"127.0.0.1:{daemon.port}",
                                      options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(10)]
    try:
        for channel in channels:
            pb2_grpc.EncoderStub(channel).Tokenize(
                pb2.TokenizeRequest(model="langid", texts=["hello"]), timeout=10)
        time.sleep(3)
        return before, common.proc_fds(daemon.proc.pid)
    finally:
        for channel in channels:
            channel.close()
        daemon.stop()


def main():
    args = common.parse_daemon_test_args(__doc__.split("\n")[0])
    source = args.source
    # Kept when a check fails: the daemons' logs are in it (a
    # TemporaryDirectory took them away with the failure).
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="encoderd_scaleout_"))
    common.generate_stubs(source, tmp)
    from proto import encoderd_pb2 as pb2, encoderd_pb2_grpc as pb2_grpc

    b_calls, a_calls, errors = spreads_to_new_replica(args, pb2, pb2_grpc, tmp, 1.5, 8)
    print(f"max_connection_age_s 1.5: after B joined, A served {a_calls:.0f} and B "
          f"{b_calls:.0f} calls; errors {errors}")
    check(b_calls >= 0.2 * (a_calls + b_calls),
          f"with max_connection_age_s, the new replica gets its share ({b_calls:.0f} of "
          f"{a_calls + b_calls:.0f} calls)")
    check(not errors, f"no call fails when connections age out ({errors})")

    b_calls, a_calls, errors = spreads_to_new_replica(args, pb2, pb2_grpc, tmp, 0, 4)
    print(f"max_connection_age_s 0 (control): A served {a_calls:.0f} and B {b_calls:.0f}; "
          f"errors {errors}")
    check(b_calls == 0 and a_calls > 0,
          f"without it, the long-lived channel never reaches the new replica "
          f"(B served {b_calls:.0f})")

    codes = call_across_goaway(args, pb2, pb2_grpc, tmp, 10)
    print(f"grace 10 s: the call held across the GOAWAY and the next call: {codes}")
    check(codes == ["OK", "OK"], f"a call in flight finishes within the grace ({codes})")
    codes = call_across_goaway(args, pb2, pb2_grpc, tmp, 0.5)
    print(f"grace 0.5 s: {codes}")
    check(codes[0] == "UNAVAILABLE" and codes[1] == "OK",
          f"past a shorter grace the call is cut off and the next one reconnects ({codes})")

    # A connection costs the daemon 3 fds (the client's socket, the guard's
    # socket pair to gRPC); closing it for idleness leaves the client's
    # socket half-closed until the client closes its side.
    before, later = idle_connections_closed(args, pb2, pb2_grpc, tmp, 1)
    print(f"max_connection_idle_s 1: daemon fds {before} before 10 quiet clients, "
          f"{later} 3 s after their calls")
    check(later <= before + 10 + 2, "quiet connections are closed after max_connection_idle_s")
    before, later = idle_connections_closed(args, pb2, pb2_grpc, tmp, 0)
    print(f"max_connection_idle_s 0 (control): {before} before, {later} 3 s after")
    check(later >= before + 30, "without it they stay open")
    status = common.report("scaleout_e2e_test", tmp)
    if status == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
