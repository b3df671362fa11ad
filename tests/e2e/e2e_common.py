"""Helpers shared by the end-to-end tests of `encoderd serve`: checks that
collect failures, Python stubs generated at test time, starting the real
daemon on free loopback ports, health waits and /metrics scrapes.

Use /usr/bin/python3 (Debian's python3-grpcio).
"""
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import urllib.request

import grpc

HEALTH_PROTO = """
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health {
  rpc Check(HealthCheckRequest) returns (HealthCheckResponse);
  rpc Watch(HealthCheckRequest) returns (stream HealthCheckResponse);
}
"""

# Every failed check, in order; a test exits non-zero when it is not empty.
FAILURES = []


def check(condition, what):
    if not condition:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)
    return condition


def wait_until(predicate, timeout, step=0.01):
    """Whether `predicate()` held within `timeout` s (polled every `step`)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def report(name, logs):
    """The exit status of a test named `name` after its checks; `logs` is
    where a failure's server log is to be found."""
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed; server log: {logs}")
        return 1
    print(f"{name}: all checks passed")
    return 0


def parse_daemon_test_args(description):
    """--binary, --source-dir and --model-dir (default: the source's
    models/langid), as the daemon's end-to-end tests take them; `source` is
    the source directory as a path."""
    import argparse
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--binary", required=True)
    p.add_argument("--source-dir", required=True)
    p.add_argument("--model-dir")
    args = p.parse_args()
    args.source = pathlib.Path(args.source_dir)
    args.model_dir = args.model_dir or str(args.source / "models" / "langid")
    return args


def generate_stubs(source_dir, out_dir):
    """protoc + grpc_python_plugin for encoderd.proto and the health proto into
    `out_dir`, which is put on sys.path: then `from proto import encoderd_pb2`
    and `from health_v1 import health_pb2` work."""
    out_dir = pathlib.Path(out_dir)
    plugin = subprocess.run(["which", "grpc_python_plugin"], capture_output=True,
                            text=True, check=True).stdout.strip()
    health_dir = out_dir / "health_v1"
    health_dir.mkdir()
    (health_dir / "health.proto").write_text(HEALTH_PROTO)
    for include, proto in ((source_dir, "proto/encoderd.proto"), (out_dir, "health_v1/health.proto")):
        subprocess.run(["protoc", f"-I{include}", f"--python_out={out_dir}", f"--grpc_out={out_dir}",
                        f"--plugin=protoc-gen-grpc={plugin}", proto], check=True)
    sys.path.insert(0, str(out_dir))


class Daemon:
    """A running `encoderd serve`: the process, its gRPC port and (when
    metrics are on) its metrics port."""

    def __init__(self, proc, port, metrics_port, log_path, address="127.0.0.1"):
        self.proc = proc
        self.port = port
        self.metrics_port = metrics_port
        self.log_path = pathlib.Path(log_path)
        self.address = address

    def metrics_text(self):
        url = f"http://{connectable(self.address)}:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()

    def metric(self, name, labels=None):
        """Sum of the samples of `name` whose labels include `labels`."""
        return metric_value(self.metrics_text(), name, labels)

    def stop(self, timeout=20):
        stop_process(self.proc, timeout)


def stop_process(proc, timeout=20):
    """SIGTERM, then SIGKILL if `proc` has not exited within `timeout` s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_loadtest(binary, target, tmp, name, *flags, expect_rc=0):
    """`encoderd-loadtest --target target --json-file tmp/name.json *flags`:
    its JSON report, or None (a failed check) when it exits otherwise than
    `expect_rc`."""
    out = pathlib.Path(tmp) / f"{name}.json"
    cmd = [binary, "--target", target, "--json-file", str(out), *flags]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    print(res.stdout, res.stderr, sep="", flush=True)
    if not check(res.returncode == expect_rc, f"{name}: exit status {expect_rc} (got {res.returncode})"):
        return None
    return json.loads(out.read_text())


def connectable(address):
    """Where a client on this host reaches a daemon listening on `address`:
    loopback for an unspecified address, an IPv6 one in brackets."""
    bare = address.strip("[]")
    bare = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(bare, bare)
    return f"[{bare}]" if ":" in bare else bare


def start_daemon(binary, serve_args, log_path, timeout=60, prefix=(), address="127.0.0.1"):
    """Starts `[*prefix] binary serve --address ADDRESS --port 0
    --metrics-port 0 *serve_args` (prefix: e.g. taskset, which execs the
    daemon in the same process) and waits for its "listening on" line."""
    log = open(log_path, "w")
    proc = subprocess.Popen([*prefix, binary, "serve", "--address", address, "--port", "0",
                             "--metrics-port", "0", *serve_args],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + timeout
    bare = address.strip("[]")
    at = re.escape(f"[{bare}]" if ":" in bare else bare)  # IPv6 in brackets
    while time.time() < deadline:
        text = pathlib.Path(log_path).read_text()
        m = re.search(rf"listening on {at}:(\d+)", text)
        if m:
            mm = re.search(rf"metrics on http://{at}:(\d+)/metrics", text)
            return Daemon(proc, int(m.group(1)), int(mm.group(1)) if mm else None, log_path,
                          address)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("server did not start:\n" + pathlib.Path(log_path).read_text())


def wait_serving(health_pb2, health_stub, names, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if all(health_stub.Check(health_pb2.HealthCheckRequest(service=n)).status ==
                   health_pb2.HealthCheckResponse.SERVING for n in names):
                return True
        except grpc.RpcError:
            pass
        time.sleep(0.1)
    return False


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metric_value(text, name, labels=None):
    """Sum of the samples of `name` in Prometheus text format whose labels
    include every (key, value) of `labels`; 0 when there is none."""
    total = 0.0
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or m.group(1) != name:
            continue
        got = dict(_LABEL.findall(m.group(2) or ""))
        if all(got.get(k) == v for k, v in (labels or {}).items()):
            total += float(m.group(3))
    return total


def proc_threads(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise RuntimeError("no Threads line")


def proc_fds(pid):
    return len(list(pathlib.Path(f"/proc/{pid}/fd").iterdir()))


def proc_cpu_seconds(pid):
    """User + system CPU seconds of process `pid` so far."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def steal_seconds(cpu=None):
    """CPU seconds the hypervisor ran something else while this machine's
    CPUs (or CPU `cpu`) wanted to run; 0 outside a VM."""
    prefix = "cpu " if cpu is None else f"cpu{cpu} "
    for line in pathlib.Path("/proc/stat").read_text().splitlines():
        if line.startswith(prefix):
            fields = line.split()
            return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0
    raise RuntimeError(f"no {prefix.strip()} line in /proc/stat")


def proc_rss_bytes(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS line")


def proc_threads_rss(pid):
    """(threads, RSS bytes) of process `pid`."""
    return proc_threads(pid), proc_rss_bytes(pid)


def benchmark_parser(description):
    """The arguments the loadtest/scripts benchmarks share: --binary,
    --loadtest and --model-dir, defaulting to the build and the default model."""
    import argparse
    repo = pathlib.Path(__file__).resolve().parents[2]
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--binary", default=str(repo / "build" / "cli" / "encoderd"))
    p.add_argument("--loadtest", default=str(repo / "build" / "loadtest" / "encoderd-loadtest"))
    p.add_argument("--model-dir", default=str(repo / "models" / "langid"))
    return p


def free_port():
    """A TCP port free on 127.0.0.1, below the kernel's ephemeral range: a
    port the daemon binds with 0 (its gRPC or metrics port) can never be
    given this one before the daemon binds it (a free ephemeral port can:
    `cannot listen on ... (listen.health_port)` in a run of e2e_access)."""
    import random
    import socket
    low = 32768
    try:
        low = int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    for _ in range(1000):
        port = random.randrange(10000, max(low, 10001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def self_signed_certificate(d):
    """server.pem (self-signed, for localhost and 127.0.0.1: its own CA) and
    server.key in directory `d`, made with the openssl CLI; their paths."""
    d = pathlib.Path(d)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(d / "server.key"), "-out", str(d / "server.pem")],
                   check=True, capture_output=True)
    return d / "server.pem", d / "server.key"


def add_attack_args(p):
    """--pin and --serve-arg, as the loadtest/scripts attack benchmarks take them."""
    p.add_argument("--pin", action="store_true",
                   help="daemon on CPU 1 (one engine thread); attackers and load generator on "
                        "CPU 0, so the attack's own CPU is not the daemon's")
    p.add_argument("--serve-arg", action="append", default=[],
                   help="extra `encoderd serve` argument, e.g. --serve-arg=--http2-guard=false")


def attack_serve_args(args):
    """The `encoderd serve` arguments of add_attack_args' flags; with --pin this
    process (and what it starts) moves to CPU 0."""
    serve_args = [x for a in args.serve_arg for x in a.split("=", 1)]
    if args.pin:
        serve_args += ["--num-threads", "1"]
        os.sched_setaffinity(0, {0})
    return serve_args


def closed_loop(loadtest, port, seconds, clients=16, extra=()):
    """`clients` legitimate closed-loop Embed clients (one 8-24-word text, 5 s
    deadlines) for `seconds` after 1 s of warm-up: encoderd-loadtest's JSON
    report. `extra`: more encoderd-loadtest flags (e.g. --tls-ca FILE)."""
    out = subprocess.run([loadtest, "--target", f"127.0.0.1:{port}", "--rpc", "embed",
                          "--mode", "closed", "--concurrency", str(clients),
                          "--duration", str(seconds), "--warmup", "1", "--timeout-ms", "5000",
                          "--words", "8-24", "--json", *extra], capture_output=True, text=True)
    if "{" not in out.stdout:
        raise RuntimeError(f"encoderd-loadtest failed: {out.stdout[-500:]} {out.stderr[-500:]}")
    return json.loads(out.stdout[out.stdout.index("{"):])


def raw_grpc_call(port, path, body, extra_headers=(), timeout=30):
    """One unary gRPC call written frame by frame with python3-h2, for what a
    gRPC library will not send (e.g. a grpc-timeout of 0, which libraries
    fail on their side). Returns the first grpc-status the server sends (int)
    and its grpc-message; (None, "...") when the stream is reset or the
    connection closes first. The server's frames are read with hyperframe and
    hpack, without h2's stream state machine: a server may legally send a
    reset after the trailers."""
    import socket
    import struct
    import h2.config
    import h2.connection
    import hpack
    import hyperframe.frame as hf
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    stream = conn.get_next_available_stream_id()
    conn.send_headers(stream, [(":method", "POST"), (":scheme", "http"), (":path", path),
                               (":authority", f"127.0.0.1:{port}"),
                               ("content-type", "application/grpc"), ("te", "trailers"),
                               *extra_headers])
    if body is None:  # no request message at all: the headers end the stream
        conn.end_stream(stream)
    else:
        conn.send_data(stream, b"\x00" + struct.pack(">I", len(body)) + body, end_stream=True)
    sock.sendall(conn.data_to_send())
    decoder, buf = hpack.Decoder(), b""
    try:
        while True:
            while len(buf) >= 9:
                frame, length = hf.Frame.parse_frame_header(memoryview(buf[:9]))
                if len(buf) < 9 + length:
                    break
                frame.parse_body(memoryview(buf[9:9 + length]))
                buf = buf[9 + length:]
                if isinstance(frame, hf.HeadersFrame):
                    fields = {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
                              for k, v in decoder.decode(frame.data)}
                    if "grpc-status" in fields and frame.stream_id == stream:
                        return int(fields["grpc-status"]), fields.get("grpc-message", "")
                elif isinstance(frame, hf.RstStreamFrame) and frame.stream_id == stream:
                    return None, f"stream reset (HTTP/2 error {frame.error_code})"
                elif isinstance(frame, hf.SettingsFrame) and "ACK" not in frame.flags:
                    sock.sendall(hf.SettingsFrame(0, flags=["ACK"]).serialize())
            data = sock.recv(65536)
            if not data:
                return None, "connection closed"
            buf += data
    finally:
        sock.close()


class RawHttp2Client:
    """One HTTP/2 connection written frame by frame (python3-hyperframe and
    hpack), for what a gRPC library will not do: open calls and leave their
    requests unfinished. It answers the server's SETTINGS and PINGs and
    records the grpc-status and grpc-message of every stream it hears of.
    With `window_updates`, it also gives back the flow-control window of the
    DATA it reads, as a gRPC client does; `rcvbuf` sets the socket's receive
    buffer (SO_RCVBUF) before it connects."""

    def __init__(self, port, settings=None, window_updates=False, rcvbuf=None):
        import socket
        import hpack
        import hyperframe.frame as hf
        self.hf = hf
        self.window_updates = window_updates
        self.window_update_failed = False
        if rcvbuf is None:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.sock.settimeout(30)
            self.sock.connect(("127.0.0.1", port))
        self.encoder, self.decoder = hpack.Encoder(), hpack.Decoder()
        self.statuses, self.buf, self.goaway, self.closed = {}, b"", None, False
        self.ping_acks = 0
        self.headers = [(":method", "POST"), (":scheme", "http"),
                        (":path", "/encoderd.v1.Encoder/Embed"), (":authority", f"127.0.0.1:{port}"),
                        ("content-type", "application/grpc"), ("te", "trailers")]
        self.sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
                          hf.SettingsFrame(0, settings=settings or {}).serialize())

    def open(self, streams, method="Embed"):
        """HEADERS (no END_STREAM) for each stream id, in one write."""
        headers = [(k, f"/encoderd.v1.Encoder/{method}" if k == ":path" else v)
                   for k, v in self.headers]
        self.sock.sendall(b"".join(
            self.hf.HeadersFrame(s, data=self.encoder.encode(headers),
                                 flags=["END_HEADERS"]).serialize() for s in streams))

    def finish(self, stream, text):
        """The stream's request: one EmbedRequest, ending the client's side."""
        raw = text.encode()
        message = b"\x0a" + bytes([len(raw)]) + raw
        body = b"\x00" + len(message).to_bytes(4, "big") + message
        self.sock.sendall(self.hf.DataFrame(stream, data=body, flags=["END_STREAM"]).serialize())

    def ping(self, timeout=30):
        """A PING and its ACK: the server has read every frame sent before
        it (True), or the connection closed or nothing came (False)."""
        before = self.ping_acks
        self.sock.sendall(self.hf.PingFrame(0, opaque_data=b"encoderd").serialize())
        return self.wait(lambda _: self.ping_acks > before, timeout)

    def wait(self, predicate, timeout=30, chunk=65536, pause=0.0):
        """Reads frames until predicate(statuses) holds; False on timeout or
        once the server closed the connection (then `closed`). Reads at most
        `chunk` bytes at a time, `pause` s apart (a client reading slowly)."""
        deadline = time.time() + timeout
        while not predicate(self.statuses):
            if time.time() > deadline:
                return False
            self.sock.settimeout(max(0.01, deadline - time.time()))
            try:
                data = self.sock.recv(chunk)
            except TimeoutError:
                continue
            except OSError:
                data = b""
            if not self.take(data):
                return False
            time.sleep(pause)
        return True

    def take(self, data):
        """Reads the frames in `data` (the next bytes received; b"": the
        server closed the connection). Returns False once closed."""
        if not data:
            self.closed = True
            return False
        self.buf += data
        while len(self.buf) >= 9:
            frame, length = self.hf.Frame.parse_frame_header(memoryview(self.buf[:9]))
            if len(self.buf) < 9 + length:
                break
            frame.parse_body(memoryview(self.buf[9:9 + length]))
            self.buf = self.buf[9 + length:]
            if isinstance(frame, self.hf.HeadersFrame):
                fields = {(k.decode() if isinstance(k, bytes) else k):
                          (v.decode() if isinstance(v, bytes) else v)
                          for k, v in self.decoder.decode(frame.data)}
                if "grpc-status" in fields:
                    self.statuses[frame.stream_id] = (int(fields["grpc-status"]),
                                                      fields.get("grpc-message", ""))
            elif isinstance(frame, self.hf.SettingsFrame) and "ACK" not in frame.flags:
                self.sock.sendall(self.hf.SettingsFrame(0, flags=["ACK"]).serialize())
            elif isinstance(frame, self.hf.GoAwayFrame):
                self.goaway = frame.error_code
            elif isinstance(frame, self.hf.DataFrame) and self.window_updates and length > 0:
                # The whole frame counts against the windows, padding included.
                update = self.hf.WindowUpdateFrame(0, window_increment=length).serialize()
                if "END_STREAM" not in frame.flags:
                    update += self.hf.WindowUpdateFrame(frame.stream_id,
                                                        window_increment=length).serialize()
                try:
                    self.sock.sendall(update)
                except OSError:  # what came before the reset is still read
                    self.window_update_failed = True
            elif isinstance(frame, self.hf.PingFrame) and "ACK" in frame.flags:
                self.ping_acks += 1
            elif isinstance(frame, self.hf.PingFrame):
                self.sock.sendall(self.hf.PingFrame(0, flags=["ACK"],
                                                    opaque_data=frame.opaque_data).serialize())
        return True

    def close(self):
        self.sock.close()
