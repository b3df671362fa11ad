#!/usr/bin/python3
"""End-to-end test of access control in `encoderd serve`: TLS, mutual TLS,
the plaintext health port, bearer tokens, server reflection and start-up
errors for missing files.

Certificates are made with the `openssl` CLI in a temporary directory: a CA,
a server certificate for localhost/127.0.0.1 signed by it, a client
certificate signed by it, and a self-signed "rogue" client certificate.

usage: access_e2e_test.py --binary build/cli/encoderd --source-dir REPO
       [--model-dir DIR]   (default: REPO/models/langid)
Exits 0 when every check passed; prints each failed check.
"""
import contextlib
import json
import pathlib
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

import grpc

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import e2e_common as common  # noqa: E402
from e2e_common import check, free_port, wait_until  # noqa: E402

MODEL = "langid"

TOKEN = "s3cr3t-token_0123456789abcdef"
REFLECTION_METHOD = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
# ServerReflectionRequest{list_services: ""}: field 7, length-delimited, empty.
LIST_SERVICES = b"\x3a\x00"


# P-256 keys: generated in milliseconds, unlike RSA.
EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certificates(d):
    """ca.pem, server.{pem,key}, client.{pem,key} (signed by the CA), rogue.{pem,key}."""
    (d / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                                  "extendedKeyUsage=serverAuth\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    openssl("req", "-x509", *EC_KEY, "-nodes", "-days", "2", "-subj",
            "/CN=encoderd test CA", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    for name in ("server", "client"):
        openssl("req", *EC_KEY, "-nodes", "-subj", f"/CN={name}",
                "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext",
                "-out", f"{name}.pem", cwd=d)
    openssl("req", "-x509", *EC_KEY, "-nodes", "-days", "2", "-subj", "/CN=rogue",
            "-keyout", "rogue.key", "-out", "rogue.pem", cwd=d)
    return {p.name: p.read_bytes() for p in d.iterdir()}


# Channels the test opened; closed before each daemon is stopped, as clients
# that leave do (an idle one is closed by the drain a second after the
# GOAWAY: check_drain_closes_idle_tls_connections).
CHANNELS = []


def open_channel(target, creds=None, own_connection=False):
    """A channel the test closes at the end; own_connection: not shared with
    the process's other channels to the same target (grpcio shares them)."""
    options = [("grpc.use_local_subchannel_pool", 1)] if own_connection else []
    c = grpc.secure_channel(target, creds, options) if creds else grpc.insecure_channel(target, options)
    CHANNELS.append(c)
    return c


def tls_channel(port, certs, client=None):
    """A TLS channel trusting the test CA, presenting `client` ("client",
    "rogue") as its certificate when given."""
    key = certs[f"{client}.key"] if client else None
    chain = certs[f"{client}.pem"] if client else None
    creds = grpc.ssl_channel_credentials(root_certificates=certs["ca.pem"], private_key=key,
                                         certificate_chain=chain)
    return open_channel(f"127.0.0.1:{port}", creds)


def classify_code(pb, pb_grpc, channel, metadata=None):
    """The status code of a Classify call on `channel`."""
    try:
        pb_grpc.EncoderStub(channel).Classify(pb.ClassifyRequest(texts=["Guten Morgen"]),
                                              timeout=10, metadata=metadata)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details()


def reflection_code(channel):
    """The status code of a reflection ListServices call on `channel`."""
    call = channel.stream_stream(REFLECTION_METHOD)
    try:
        replies = list(call(iter([LIST_SERVICES]), timeout=10))
        return grpc.StatusCode.OK if replies and b"encoderd.v1.Encoder" in replies[0] else None
    except grpc.RpcError as e:
        return e.code()


def health_status(health_pb2, health_pb2_grpc, channel, service=""):
    return health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=service), timeout=10).status


def start(args, log_path, flags):
    return common.start_daemon(args.binary, ["--model-name", MODEL, "--model-dir", args.model_dir,
                                             "--shutdown-grace-s", "10", *flags], log_path)


def stop(daemon, what, signalled=False):
    """SIGTERM (unless `signalled`: a second one forces exit 1) drains and exits 0."""
    while CHANNELS:
        CHANNELS.pop().close()
    proc = daemon.proc
    if not signalled:
        proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = "killed after 20 s"
    check(rc == 0, f"{what}: SIGTERM exits 0 (got {rc})")


def check_tls_and_health_port(args, mods, certs, tmp):
    pb, pb_grpc, health_pb2, health_pb2_grpc = mods
    health_port = free_port()
    daemon = start(args, tmp / "tls.log",
        ["--tls-cert-file", str(tmp / "certs" / "server.pem"), "--tls-key-file", str(tmp / "certs" / "server.key"),
         "--health-port", str(health_port), "--metrics", "false"])
    try:
        secure = tls_channel(daemon.port, certs)
        health_secure = health_pb2_grpc.HealthStub(secure)
        if not check(common.wait_serving(health_pb2, health_secure, ["", MODEL]),
                     "TLS server SERVING to a TLS client"):
            return
        check(classify_code(pb, pb_grpc, secure)[0] == grpc.StatusCode.OK,
              "TLS server answers Classify over TLS")
        code = classify_code(pb, pb_grpc, open_channel(f"127.0.0.1:{daemon.port}"))[0]
        check(code == grpc.StatusCode.UNAVAILABLE,
              f"TLS server refuses a plaintext client ({code})")
        plain_health = open_channel(f"127.0.0.1:{health_port}")
        for service in ("", MODEL):
            status = health_status(health_pb2, health_pb2_grpc, plain_health, service)
            check(status == health_pb2.HealthCheckResponse.SERVING,
                  f"health port answers SERVING for '{service}' over plaintext ({status})")
        code, details = classify_code(pb, pb_grpc, plain_health)
        check(code == grpc.StatusCode.UNIMPLEMENTED,
              f"health port does not serve encoderd.v1.Encoder ({code} {details})")
        code = reflection_code(plain_health)
        check(code == grpc.StatusCode.UNIMPLEMENTED, f"health port serves no reflection ({code})")
        code = reflection_code(secure)
        check(code == grpc.StatusCode.UNIMPLEMENTED,
              f"reflection is off when listen.reflection is not set ({code})")
        check_health_port_drains(mods, daemon, secure, plain_health, certs)
    finally:
        stop(daemon, "TLS server with a health port", signalled=getattr(daemon, "signalled", False))
    try:
        health_status(health_pb2, health_pb2_grpc, open_channel(f"127.0.0.1:{health_port}"))
        check(False, "the health port is closed after shutdown")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.UNAVAILABLE, f"health port closed after shutdown ({e.code()})")


def check_health_port_drains(mods, daemon, secure, plain_health, certs):
    """A call whose request is still arriving (an Embed call's HEADERS from a
    raw client) holds the gRPC port's drain after SIGTERM; meanwhile the
    health port answers NOT_SERVING, as the gRPC port does. An open
    EmbedStream does not hold it: the drain ends it UNAVAILABLE."""
    pb, pb_grpc, health_pb2, health_pb2_grpc = mods
    release = threading.Event()

    def requests():
        yield pb.EmbedRequest(texts=["an open stream"])
        release.wait(30)

    stream = pb_grpc.EncoderStub(secure).EmbedStream(requests(), timeout=30)
    check(len(next(stream).embeddings) == 1, "an EmbedStream is open over TLS")
    holder = http2_over_tls(daemon.port, certs["ca.pem"])
    holder.sendall(h2_frame(0x1, 0x4, 1, b"".join(literal_header(n, v) for n, v in (
        (b":method", b"POST"), (b":scheme", b"https"), (b":path", b"/encoderd.v1.Encoder/Embed"),
        (b":authority", b"localhost"), (b"content-type", b"application/grpc"),
        (b"te", b"trailers")))))  # HEADERS, END_HEADERS: the request to follow
    check(ping_answered(holder), "a call whose request is still arriving is open")
    daemon.proc.send_signal(signal.SIGTERM)
    daemon.signalled = True
    status, deadline = None, time.time() + 5
    while time.time() < deadline:
        status = health_status(health_pb2, health_pb2_grpc, plain_health)
        if status != health_pb2.HealthCheckResponse.SERVING:
            break
        time.sleep(0.02)
    check(status == health_pb2.HealthCheckResponse.NOT_SERVING,
          f"health port answers NOT_SERVING while the gRPC port drains ({status})")
    try:
        list(stream)
        ended = (grpc.StatusCode.OK, "")
    except grpc.RpcError as e:
        ended = (e.code(), e.details())
    check(ended == (grpc.StatusCode.UNAVAILABLE, "the server is shutting down"),
          f"the drain ends the open EmbedStream ({ended})")
    release.set()
    holder.close()  # gRPC cancels its call: nothing holds the drain


def h2_frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def http2_over_tls(port, ca_pem):
    """A TLS connection to `port` that has sent the HTTP/2 preface and its
    settings and acknowledged the server's. An end without TLS's close_notify
    raises ssl.SSLEOFError (suppress_ragged_eofs off); one with it reads as
    b"" (how_closed)."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    context.set_alpn_protocols(["h2"])
    # Debian's Python sets this by default, which reads an end without a
    # close_notify as one with it.
    context.options &= ~getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", 0)
    conn = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                               server_hostname="localhost", suppress_ragged_eofs=False)
    conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(0x4, 0, 0))
    conn.recv(65536)
    conn.sendall(h2_frame(0x4, 0x1, 0))  # SETTINGS ACK
    return conn


def read_frames(conn, timeout, on_frame):
    """Reads `conn`'s frames for up to `timeout` s, calling on_frame(kind,
    flags, stream, payload) on each until it returns something other than
    None, which is returned; None if the connection closes or nothing more
    comes."""
    deadline, pending = time.monotonic() + timeout, b""
    while time.monotonic() < deadline:
        conn.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = conn.recv(65536)
        except (socket.timeout, OSError):
            return None
        if not data:
            return None
        pending += data
        while len(pending) >= 9 and len(pending) >= 9 + int.from_bytes(pending[:3], "big"):
            length = int.from_bytes(pending[:3], "big")
            result = on_frame(pending[3], pending[4], int.from_bytes(pending[5:9], "big") & 0x7FFFFFFF,
                              pending[9:9 + length])
            if result is not None:
                return result
            pending = pending[9 + length:]
    return None


def ping_answered(conn, timeout=10):
    """Sends a PING and reads until its ACK: the server has read every frame
    sent before it. False if the connection closes or nothing comes."""
    conn.sendall(h2_frame(0x6, 0, 0, b"encoderd"))
    acked = read_frames(conn, timeout, lambda kind, flags, stream, payload:
                        True if kind == 0x6 and flags & 0x1 and payload == b"encoderd" else None)
    return bool(acked)


def how_closed(conn, timeout):
    """How the server ends `conn` within `timeout` s: "end" (a plaintext
    connection's end, or a TLS one's after its close_notify), "eof without
    close_notify" (TLS, http2_over_tls), "error: ..." (another OSError), or
    None if it is still open. What the server sends meanwhile (its GOAWAY,
    and the PING that comes with it) is read and left unanswered, as a
    client that stopped (a stuck process, or a host gone without a FIN)
    leaves it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        conn.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if not conn.recv(65536):
                return "end"
        except socket.timeout:
            return None
        except ssl.SSLError as e:  # Debian's Python: SSLError, "unexpected eof"
            if isinstance(e, ssl.SSLEOFError) or "UNEXPECTED_EOF" in str(e):
                return "eof without close_notify"
            return f"error: {e}"
        except OSError as e:
            return f"error: {e}"
    return None


def closed_by_server(conn, timeout):
    """Whether the server closes `conn` within `timeout` s (how_closed)."""
    return how_closed(conn, timeout) is not None


def first_frame_on_stream(conn, stream, timeout):
    """The type of the first frame other than WINDOW_UPDATE the server sends
    on `stream` within `timeout` s (its PINGs answered meanwhile, as a live
    client does), or None if the connection closes or nothing comes."""
    def on_frame(kind, flags, on, payload):
        if on == stream and kind != 0x8:
            return kind
        if kind == 0x6 and not flags & 0x1:  # PING: the same 8 bytes back, ACK set
            try:
                conn.sendall(h2_frame(0x6, 0x1, 0, payload))
            except OSError:
                return -1
        return None
    kind = read_frames(conn, timeout, on_frame)
    return None if kind == -1 else kind


def rapid_reset_goaway(conn, path, scheme):
    """Sends 3,000 streams opened and reset at once on `conn` (past the 2,000
    premature resets an address may make in a burst, listen.http2_max_reset_rate)
    and returns the error code of the GOAWAY that follows (None: none within
    20 s). Closes `conn`."""
    headers = b"".join(literal_header(n, v) for n, v in (
        (b":method", b"POST"), (b":scheme", scheme), (b":path", path),
        (b":authority", b"localhost"), (b"content-type", b"application/grpc"),
        (b"te", b"trailers")))
    burst = b"".join(h2_frame(0x1, 0x4, stream, headers) + h2_frame(0x3, 0, stream, (8).to_bytes(4, "big"))
                     for stream in range(1, 6001, 2))
    try:
        conn.sendall(burst)
    except OSError:
        pass
    goaway = read_frames(conn, 20, lambda kind, flags, stream, payload:
                         int.from_bytes(payload[4:8], "big") if kind == 0x7 else None)
    conn.close()
    return goaway


def literal_header(name, value):
    """HPACK: a literal header field without indexing, a new name, no Huffman."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


@contextlib.contextmanager
def draining_tls_daemon(args, mods, certs, tmp, name, extra=()):
    """A TLS daemon (60 s grace; `extra` flags), once SERVING, with the
    test's channels closed and one raw HTTP/2 connection to it: (daemon,
    conn), conn None if it never served. The daemon is killed on the way out
    if still running."""
    health_pb2, health_pb2_grpc = mods[2], mods[3]
    daemon = start(args, tmp / f"{name}.log",
        ["--tls-cert-file", str(tmp / "certs" / "server.pem"), "--tls-key-file", str(tmp / "certs" / "server.key"),
         "--metrics", "false", "--shutdown-grace-s", "60", *extra])
    try:
        if not check(common.wait_serving(health_pb2, health_pb2_grpc.HealthStub(
                tls_channel(daemon.port, certs)), [""]), f"{name}: TLS server SERVING"):
            yield daemon, None
            return
        while CHANNELS:
            CHANNELS.pop().close()
        conn = http2_over_tls(daemon.port, certs["ca.pem"])
        try:
            yield daemon, conn
        finally:
            conn.close()
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()


def wait_exit(daemon, what):
    try:
        rc = daemon.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        rc = "still running 30 s after SIGTERM"
    check(rc == 0, f"{what}: exits 0 ({rc})")


def check_drain_closes_idle_tls_connections(args, mods, certs, tmp):
    """On SIGTERM, a TLS port's connections are closed once its GOAWAY went
    out a second ago and no stream is open, instead of waiting for the
    clients: one that answers nothing held the exit 20 s (gRPC's wait for
    the answer to its GOAWAY's PING), or the grace period if shorter. By the
    connection guard, which terminates TLS, and on a port without the guard
    (gRPC's TLS) by the drain's closer (channelz's count of open streams).
    A call whose request is still arriving keeps the connection open: it is
    answered before the connection closes (with an error status from gRPC,
    as a call whose request arrives after the shutdown began is)."""
    pb = mods[0]
    # What closes it is the drain (its log line), not gRPC's own 20 s wait
    # for the answer to its GOAWAY's PING; the wait here only stays under
    # the 60 s grace. The guard's line is at debug level.
    for name, flags, closer in (
            ("tls_drain_guarded", ["--log-level", "debug"],
             r"closing the connection from 127\.0\.0\.1:\d+: drained"),
            ("tls_drain", ["--http2-guard", "false"],
             r"gRPC port: no stream open 1 s after the GOAWAY; closing its connections")):
        with draining_tls_daemon(args, mods, certs, tmp, name, flags) as (daemon, conn):
            if conn is None:
                return
            daemon.proc.send_signal(signal.SIGTERM)
            how = how_closed(conn, 50)
            check(how is not None,
                  f"{name}: a connection whose client answers nothing is closed before the grace ends")
            # The guard, which terminates TLS, ends it in order: a close_notify
            # before the socket's end (until 2026-12-03, none: the client's TLS
            # saw the connection cut off). gRPC's own TLS ends it without one.
            print(f"{name}: closed: {how}", flush=True)
            if name == "tls_drain_guarded":
                check(how == "end", f"{name}: the guard ends it with a close_notify ({how})")
            wait_exit(daemon, name)
            log = pathlib.Path(tmp / f"{name}.log").read_text()
            check(re.search(closer, log) is not None, f"{name}: the drain closed it (log)")

    for name, flags in (("tls_drain_upload_guarded", []),
                        ("tls_drain_upload", ["--http2-guard", "false"])):
        with draining_tls_daemon(args, mods, certs, tmp, name, flags) as (daemon, conn):
            if conn is None:
                return
            # An Embed call's headers, its request to follow: a stream open on the
            # connection, which reaches the service only once the request is in.
            headers = b"".join(literal_header(n, v) for n, v in (
                (b":method", b"POST"), (b":scheme", b"https"), (b":path", b"/encoderd.v1.Encoder/Embed"),
                (b":authority", b"localhost"), (b"content-type", b"application/grpc"),
                (b"te", b"trailers")))
            conn.sendall(h2_frame(0x1, 0x4, 1, headers))  # HEADERS, END_HEADERS
            # The server has read the HEADERS before the drain begins (a fixed
            # 0.5 s wait here assumed it).
            check(ping_answered(conn), f"{name}: the stream is open before SIGTERM")
            daemon.proc.send_signal(signal.SIGTERM)
            time.sleep(2.5)  # past the drain's second
            request = pb.EmbedRequest(texts=["still arriving"]).SerializeToString()
            message = b"\x00" + len(request).to_bytes(4, "big") + request
            try:
                conn.sendall(h2_frame(0x0, 0x1, 1, message))  # DATA, END_STREAM
            except OSError:
                pass
            kind = first_frame_on_stream(conn, 1, 20)
            check(kind == 0x1, f"{name}: a call whose request was still arriving is answered "
                               f"before its connection closes (first frame on its stream: {kind})")
            wait_exit(daemon, name)


def check_tls_port_guarded(args, mods, certs, tmp):
    """A TLS port has the plaintext port's defences: the connection guard
    terminates TLS and reads the HTTP/2 inside. A rapid-reset client over TLS
    is closed with GOAWAY(ENHANCE_YOUR_CALM) and counted (gRPC's own TLS port,
    which the daemon used before, let it run); a plaintext client, and a
    ClientHello sent and left, are closed and counted as `tls`, a TCP probe
    is not; a TLS client is served meanwhile."""
    pb, pb_grpc, health_pb2, health_pb2_grpc = mods
    daemon = start(args, tmp / "tls_guard.log",
        ["--tls-cert-file", str(tmp / "certs" / "server.pem"), "--tls-key-file", str(tmp / "certs" / "server.key")])
    try:
        secure = tls_channel(daemon.port, certs)
        if not check(common.wait_serving(health_pb2, health_pb2_grpc.HealthStub(secure), [""]),
                     "tls_guard: TLS server SERVING"):
            return
        log = (tmp / "tls_guard.log").read_text()
        check("TLS, terminated by the HTTP/2 guard" in log, "tls_guard: the guard terminates TLS (log)")
        closed = lambda reason: daemon.metric("encoderd_connections_closed_total", {"reason": reason})
        resets_before, tls_before = closed("rapid_reset"), closed("tls")

        goaway = rapid_reset_goaway(http2_over_tls(daemon.port, certs["ca.pem"]),
                                    b"/encoderd.v1.Encoder/Embed", b"https")
        check(goaway == 11, f"tls_guard: a rapid-reset client over TLS gets GOAWAY(ENHANCE_YOUR_CALM) "
                            f"(error code {goaway})")
        check(closed("rapid_reset") - resets_before == 1,
              f"tls_guard: counted as rapid_reset ({closed('rapid_reset') - resets_before})")

        # A TCP probe (connect, then close having sent nothing): not a TLS
        # failure. A ClientHello sent and left: closed unanswered, counted.
        socket.create_connection(("127.0.0.1", daemon.port), timeout=10).close()
        context = ssl.create_default_context(cadata=certs["ca.pem"].decode())
        context.set_alpn_protocols(["h2"])
        raw = socket.create_connection(("127.0.0.1", daemon.port), timeout=10)
        raw.setblocking(False)
        left = context.wrap_socket(raw, server_hostname="localhost", do_handshake_on_connect=False)
        try:
            left.do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        left.close()
        plain = socket.create_connection(("127.0.0.1", daemon.port), timeout=10)
        plain.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(0x4, 0, 0))
        check(closed_by_server(plain, 10), "tls_guard: a plaintext HTTP/2 client is closed")
        plain.close()
        deadline = time.monotonic() + 10
        while closed("tls") - tls_before < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # a third count would come by now
        check(closed("tls") - tls_before == 2,
              f"tls_guard: the plaintext client and the ClientHello left are counted as tls, the "
              f"TCP probe is not ({closed('tls') - tls_before})")
        # The address was tarpitted for a second after the abuse; the channel
        # connected before it is served.
        check(classify_code(pb, pb_grpc, secure)[0] == grpc.StatusCode.OK,
              "tls_guard: a TLS client is served")
    finally:
        stop(daemon, "TLS server behind the guard")


def check_drain_ends_health_watches(args, mods, tmp):
    """On SIGTERM, every grpc.health.v1 Watch stream, on the gRPC port and on
    the health port, is sent NOT_SERVING and, once its port's GOAWAY went
    out, ended with UNAVAILABLE, so that the exit does not wait for them: gRPC's default health service
    never ended one, and each held the exit until the grace (here 60 s), a
    grpcio channel with client-side health checking (healthCheckConfig) 4.1 s.
    A Watch of a service the server does not know is sent SERVICE_UNKNOWN.
    The health-checking channel's own Watch is cancelled by grpcio when the
    GOAWAY reaches it. Asserted by what ends the streams (the drain's status
    and message, and its log line), not by how soon: a Watch that only the
    grace's end cancelled would carry gRPC's status instead."""
    health_pb2, health_pb2_grpc = mods[2], mods[3]
    status = health_pb2.HealthCheckResponse
    health_port = free_port()
    daemon = start(args, tmp / "watch_drain.log",
                   ["--health-port", str(health_port), "--metrics", "false", "--shutdown-grace-s", "60"])
    try:
        main_channel = open_channel(f"127.0.0.1:{daemon.port}")
        health_channel = open_channel(f"127.0.0.1:{health_port}")
        if not check(all(common.wait_serving(health_pb2, health_pb2_grpc.HealthStub(c), [""])
                         for c in (main_channel, health_channel)), "watch_drain: SERVING on both ports"):
            return
        watched = [(main_channel, "", "gRPC port"), (main_channel, MODEL, "gRPC port"),
                   (health_channel, "", "health port"), (health_channel, "no-such-model", "health port")]
        seen = [[] for _ in watched]
        first = [threading.Event() for _ in watched]

        def follow(i):
            channel, service, _ = watched[i]
            call = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=service))
            try:
                for message in call:
                    seen[i].append(message.status)
                    first[i].set()
            except grpc.RpcError as e:
                seen[i].append((e.code(), e.details()))
            first[i].set()

        threads = [threading.Thread(target=follow, args=(i,), daemon=True) for i in range(len(watched))]
        for t in threads:
            t.start()
        for i, (_, service, port) in enumerate(watched):
            first[i].wait(10)
            want = status.SERVICE_UNKNOWN if service == "no-such-model" else status.SERVING
            check(seen[i][:1] == [want], f"watch_drain: Watch('{service}') on the {port} first sends "
                                         f"{status.ServingStatus.Name(want)} ({seen[i]})")
        # A client with client-side health checking: its channel watches "".
        config = json.dumps({"loadBalancingConfig": [{"round_robin": {}}],
                             "healthCheckConfig": {"serviceName": ""}})
        checked = grpc.insecure_channel(f"127.0.0.1:{daemon.port}",
                                        options=[("grpc.service_config", config)])
        CHANNELS.append(checked)
        pb, pb_grpc = mods[0], mods[1]
        check(classify_code(pb, pb_grpc, checked)[0] == grpc.StatusCode.OK,
              "watch_drain: a channel with client-side health checking is answered")
        signalled = time.monotonic()
        daemon.proc.send_signal(signal.SIGTERM)
        for t in threads:  # at most until shortly before the grace ends
            t.join(max(0.0, signalled + 50 - time.monotonic()))
        for i, (_, service, port) in enumerate(watched):
            want = ([status.SERVICE_UNKNOWN] if service == "no-such-model"
                    else [status.SERVING, status.NOT_SERVING])
            check(seen[i] == want + [(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")],
                  f"watch_drain: Watch('{service}') on the {port} is sent NOT_SERVING, then ended by "
                  f"the drain (UNAVAILABLE, its message) ({seen[i]})")
        try:
            rc = daemon.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            rc = "still running 90 s after SIGTERM"
        check(rc == 0, f"watch_drain: SIGTERM exits 0 ({rc})")
        # The four raw Watches (the health-checking channel cancels its own
        # when the GOAWAY reaches it).
        log = pathlib.Path(tmp / "watch_drain.log").read_text()
        ended = re.search(r"health: (\d+) Watch stream\(s\) ended by the drain", log)
        check(ended and int(ended.group(1)) >= 4,
              f"watch_drain: the log counts the Watches the drain ended ({ended and ended.group(0)})")
    finally:
        while CHANNELS:
            CHANNELS.pop().close()
        if daemon.proc.poll() is None:
            daemon.proc.kill()


def check_health_watch_cap(args, mods, tmp):
    """Health Watch streams (each holds about 16 KB of the daemon's memory)
    are bounded: four open at once on one client connection, and four times
    listen.max_connections in all on each port. A client over its share is
    refused with RESOURCE_EXHAUSTED while other connections are still
    served, a Watch is served again once one of its connection's ends, and
    Check answers throughout. With --max-connections 2 the health port
    takes 8: two connections of four, then a third connection's first Watch
    is refused. (Without the HTTP/2 guard: with it, a third connection
    holding Watches cannot open, check_health_port_guarded.)"""
    health_pb2, health_pb2_grpc = mods[2], mods[3]
    health_port = free_port()
    daemon = start(args, tmp / "watch_cap.log", ["--max-connections", "2", "--metrics", "false",
                                                 "--health-port", str(health_port),
                                                 "--http2-guard", "false"])
    request = health_pb2.HealthCheckRequest(service="")
    serving = health_pb2.HealthCheckResponse.SERVING

    def connection(port):
        return health_pb2_grpc.HealthStub(open_channel(f"127.0.0.1:{port}", own_connection=True))

    def first(stub):
        """The first status of a new Watch, or the code that refused it."""
        call = stub.Watch(request)
        try:
            return call, next(call).status
        except grpc.RpcError as e:
            return call, (e.code(), e.details())

    try:
        a, b = connection(daemon.port), connection(daemon.port)
        if not check(common.wait_serving(health_pb2, a, [""]) and common.wait_serving(health_pb2, b, [""]),
                     "watch_cap: SERVING"):
            return
        opened = [first(a) for _ in range(4)]
        check([s for _, s in opened] == [serving] * 4, f"watch_cap: four Watches on a connection served "
                                                        f"({[s for _, s in opened]})")
        _, fifth = first(a)
        check(isinstance(fifth, tuple) and fifth[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
              and "on this connection" in fifth[1],
              f"watch_cap: a fifth on that connection is refused with RESOURCE_EXHAUSTED ({fifth})")
        others = [first(b) for _ in range(4)]
        check([s for _, s in others] == [serving] * 4,
              f"watch_cap: another connection is still served ({[s for _, s in others]})")
        check(a.Check(request, timeout=10).status == serving, "watch_cap: Check answers at the cap")
        opened[0][0].cancel()
        deadline = time.monotonic() + 10
        while True:  # the server learns of the cancellation a moment later
            again, status = first(a)
            if status == serving or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        check(status == serving, f"watch_cap: once a Watch ends another is served ({status})")
        # The health port: at most 4 x 2 in all.
        h = [connection(health_port) for _ in range(3)]
        if not check(all(common.wait_serving(health_pb2, stub, [""]) for stub in h),
                     "watch_cap: the health port SERVING"):
            return
        on_health = [first(h[i // 4]) for i in range(8)]
        check([s for _, s in on_health] == [serving] * 8,
              f"watch_cap: the health port serves 8 on two connections ({[s for _, s in on_health]})")
        _, ninth = first(h[2])
        check(isinstance(ninth, tuple) and ninth[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
              and "open (8)" in ninth[1],
              f"watch_cap: a ninth, on a third connection, is refused ({ninth})")
        log = pathlib.Path(tmp / "watch_cap.log").read_text()
        check("health: refused a Watch stream" in log, "watch_cap: the refusal is logged")
        for call, _ in opened[1:] + others + on_health + [(again, None)]:
            call.cancel()
    finally:
        stop(daemon, "watch_cap")


def check_health_port_guarded(args, mods, tmp):
    """The health port has the gRPC port's connection guard (gRPC 1.51
    listened on it itself before): a rapid-reset client is closed with
    GOAWAY(ENHANCE_YOUR_CALM), and at listen.max_connections (2 here) with
    a Watch open on each, a new connection is closed at once while the
    Watches go on; the metrics count them with port="health" (they were in
    no metric before 2026-12-02)."""
    health_pb2, health_pb2_grpc = mods[2], mods[3]
    health_port = free_port()
    daemon = start(args, tmp / "health_guard.log", ["--max-connections", "2",
                                                    "--health-port", str(health_port)])

    def closed(reason):
        return daemon.metric("encoderd_connections_closed_total",
                             {"port": "health", "reason": reason})
    request = health_pb2.HealthCheckRequest(service="")
    serving = health_pb2.HealthCheckResponse.SERVING
    try:
        if not check(common.wait_serving(health_pb2, health_pb2_grpc.HealthStub(
                open_channel(f"127.0.0.1:{health_port}", own_connection=True)), [""]),
                     "health_guard: the health port SERVING"):
            return
        log = (tmp / "health_guard.log").read_text()
        check(f"on 127.0.0.1:{health_port} (HTTP/2 guard, at most 2 connections)" in log,
              "health_guard: the health port is behind the guard (log)")
        while CHANNELS:
            CHANNELS.pop().close()

        conn = socket.create_connection(("127.0.0.1", health_port), timeout=10)
        conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(0x4, 0, 0))
        goaway = rapid_reset_goaway(conn, b"/grpc.health.v1.Health/Check", b"http")
        check(goaway == 11, f"health_guard: a rapid-reset client gets GOAWAY(ENHANCE_YOUR_CALM) "
                            f"(error code {goaway})")
        check(wait_until(lambda: closed("rapid_reset") == 1, 5),
              "health_guard: counted in encoderd_connections_closed_total{port=health,"
              "reason=rapid_reset}")
        check(daemon.metric("encoderd_connections_closed_total", {"port": "grpc"}) == 0,
              "health_guard: nothing counted for the gRPC port")
        # For 10 s after the abuse each new connection from the address is
        # held a second before it is read; the Watches below are served late.

        watches = []
        for _ in range(2):
            stub = health_pb2_grpc.HealthStub(open_channel(f"127.0.0.1:{health_port}", own_connection=True))
            call = stub.Watch(request)
            try:
                first = next(call).status
            except grpc.RpcError as e:
                first = e.code()
            watches.append((stub, call, first))
        check([w[2] for w in watches] == [serving] * 2,
              f"health_guard: a Watch on each of two connections ({[w[2] for w in watches]})")
        extra = socket.create_connection(("127.0.0.1", health_port), timeout=10)
        check(closed_by_server(extra, 5), "health_guard: a third connection is closed at the cap")
        extra.close()
        check(wait_until(lambda: closed("connection_cap") == 1, 5),
              "health_guard: counted as port=health, reason=connection_cap")
        check(daemon.metric("encoderd_open_connections", {"port": "health"}) == 2,
              "health_guard: encoderd_open_connections{port=health} 2")
        check(watches[0][0].Check(request, timeout=10).status == serving,
              "health_guard: the connections at the cap are still answered")
        for _, call, _ in watches:
            call.cancel()
    finally:
        stop(daemon, "health_guard")


def check_mutual_tls(args, mods, certs, tmp):
    pb, pb_grpc, health_pb2, health_pb2_grpc = mods
    daemon = start(args, tmp / "mtls.log",
        ["--tls-cert-file", str(tmp / "certs" / "server.pem"), "--tls-key-file", str(tmp / "certs" / "server.key"),
         "--tls-client-ca-file", str(tmp / "certs" / "ca.pem"), "--tls-require-client-cert", "true",
         "--metrics", "false"])
    try:
        good = tls_channel(daemon.port, certs, "client")
        if not check(common.wait_serving(health_pb2, health_pb2_grpc.HealthStub(good), [""]),
                     "mTLS server SERVING to a client with a CA-signed certificate"):
            return
        check(classify_code(pb, pb_grpc, good)[0] == grpc.StatusCode.OK,
              "mTLS server answers a client with a CA-signed certificate")
        for client, what in ((None, "without a certificate"), ("rogue", "with a self-signed certificate")):
            code = classify_code(pb, pb_grpc, tls_channel(daemon.port, certs, client))[0]
            check(code == grpc.StatusCode.UNAVAILABLE, f"mTLS server refuses a client {what} ({code})")
    finally:
        stop(daemon, "mTLS server")


def check_bearer(args, mods, tmp):
    pb, pb_grpc, health_pb2, health_pb2_grpc = mods
    (tmp / "token").write_text(TOKEN + "\n")  # a trailing newline, as `kubectl create secret` leaves
    daemon = start(args, tmp / "bearer.log",
        ["--bearer-token-file", str(tmp / "token"), "--reflection", "true", "--log-level", "debug"])
    try:
        plain = open_channel(f"127.0.0.1:{daemon.port}")
        if not check(common.wait_serving(health_pb2, health_pb2_grpc.HealthStub(plain), [""]),
                     "health needs no bearer token"):
            return
        unauthenticated = {"reason": "unauthenticated"}
        before = daemon.metric("encoderd_request_failures_total", unauthenticated)
        before_code = daemon.metric("encoderd_requests_total", {"code": "UNAUTHENTICATED"})
        cases = [(None, "missing bearer token"), ([("authorization", "Bearer wrong")], "invalid bearer token"),
                 ([("authorization", "Bearer " + TOKEN[:-1])], "invalid bearer token"),
                 ([("authorization", "Basic " + TOKEN)], "missing bearer token")]
        for metadata, message in cases:
            code, details = classify_code(pb, pb_grpc, plain, metadata)
            check(code == grpc.StatusCode.UNAUTHENTICATED and details == message,
                  f"Classify with {metadata}: UNAUTHENTICATED '{message}' ({code} '{details}')")
        try:
            pb_grpc.EncoderStub(plain).ModelInfo(pb.ModelInfoRequest(), timeout=10)
            check(False, "ModelInfo without a token is refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNAUTHENTICATED, f"ModelInfo without a token ({e.code()})")
        stream = pb_grpc.EncoderStub(plain).EmbedStream(iter([pb.EmbedRequest(texts=["hi"])]), timeout=10)
        try:
            list(stream)
            check(False, "EmbedStream without a token is refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNAUTHENTICATED, f"EmbedStream without a token ({e.code()})")
        code, details = classify_code(pb, pb_grpc, plain, [("authorization", "Bearer " + TOKEN)])
        check(code == grpc.StatusCode.OK, f"Classify with the right token: OK ({code} {details})")
        code, _ = classify_code(pb, pb_grpc, plain, [("authorization", "bearer " + TOKEN)])
        check(code == grpc.StatusCode.OK, f"the scheme is case-insensitive ({code})")
        status = health_status(health_pb2, health_pb2_grpc, plain)
        check(status == health_pb2.HealthCheckResponse.SERVING, f"health without a token: SERVING ({status})")
        code = reflection_code(plain)
        check(code == grpc.StatusCode.OK, f"listen.reflection=true: reflection answers, no token ({code})")
        after = daemon.metric("encoderd_request_failures_total", unauthenticated)
        check(after - before == 6, f"metrics count the 6 UNAUTHENTICATED calls ({after - before})")
        after_code = daemon.metric("encoderd_requests_total", {"code": "UNAUTHENTICATED"})
        check(after_code - before_code == 6,
              f"encoderd_requests_total counts them under code UNAUTHENTICATED ({after_code - before_code})")
        log = (tmp / "bearer.log").read_text()
        check(TOKEN not in log and TOKEN[:-1] not in log, "the token never appears in the log")
    finally:
        stop(daemon, "bearer server")


def check_ipv6_listen(args, mods, tmp):
    """listen.address "::" listens on IPv6 and IPv4 (the connection guard and
    the metrics endpoint, whose sockets were IPv4-only: `--address ::` did
    not start); "::1" on IPv6 loopback only. Skipped where this host has no
    IPv6 loopback."""
    pb, pb_grpc, health_pb2, health_pb2_grpc = mods
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        print("ipv6: no IPv6 loopback here; skipped", flush=True)
        return
    for address, reached, not_reached in (("::", ["[::1]", "127.0.0.1"], []),
                                          ("::1", ["[::1]"], ["127.0.0.1"])):
        try:
            daemon = common.start_daemon(args.binary, ["--model-name", MODEL, "--model-dir", args.model_dir,
                                                       "--shutdown-grace-s", "10"],
                                         tmp / "ipv6.log", address=address)
        except RuntimeError as e:
            check(False, f"ipv6: the daemon starts on --address {address} ({str(e)[-300:]})")
            continue
        try:
            for host in reached:
                channel = open_channel(f"{host}:{daemon.port}", own_connection=True)
                if host == reached[0]:
                    check(common.wait_serving(health_pb2, health_pb2_grpc.HealthStub(channel), [""]),
                          f"ipv6: SERVING on {address}")
                code = classify_code(pb, pb_grpc, channel)[0]
                check(code == grpc.StatusCode.OK, f"ipv6: --address {address}, Classify via {host} ({code})")
            for host in not_reached:
                with socket.socket() as s:
                    check(s.connect_ex((host, daemon.port)) != 0,
                          f"ipv6: --address {address} does not take {host}")
            check(daemon.metric("encoderd_requests_total", {"rpc": "Classify", "code": "OK"}) == len(reached),
                  f"ipv6: --address {address}, the metrics endpoint answers on it and counts the calls")
            probe = subprocess.run([args.binary, "health", "--address", "::1", "--port", str(daemon.port)],
                                   capture_output=True, text=True, timeout=30)
            check(probe.returncode == 0, f"ipv6: `encoderd health --address ::1` ({probe.returncode} "
                                         f"{probe.stdout.strip()} {probe.stderr.strip()[-200:]})")
        finally:
            stop(daemon, f"ipv6 server on {address}")


def check_startup_errors(args, tmp):
    """A missing certificate or token file stops start-up, naming the key and the file."""
    cases = [(["--tls-cert-file", str(tmp / "nope.pem"), "--tls-key-file", str(tmp / "certs" / "server.key")],
              "listen.tls.cert_file", "nope.pem"),
             (["--bearer-token-file", str(tmp / "no-token")], "listen.auth.bearer_token_file", "no-token"),
             (["--tls-cert-file", str(tmp / "certs" / "server.key"), "--tls-key-file", str(tmp / "certs" / "server.key")],
              "listen.tls.cert_file", "server.key"),
             (["--bearer-token-file", str(tmp / "empty-token")], "listen.auth.bearer_token_file",
              "empty-token")]
    # A certificate and a key that do not belong together: grpc refuses the port.
    cases.append((["--tls-cert-file", str(tmp / "certs" / "rogue.pem"),
                   "--tls-key-file", str(tmp / "certs" / "server.key")],
                  "listen.tls.cert_file", "matching pair"))
    (tmp / "empty-token").write_text("\n")
    for flags, key, name in cases:
        started = time.time()
        r = subprocess.run([args.binary, "serve", "--address", "127.0.0.1", "--port", "0",
                            "--model-dir", args.model_dir, "--metrics", "false", *flags],
                           capture_output=True, text=True, timeout=30)
        check(r.returncode != 0 and key in r.stderr and name in r.stderr,
              f"{flags}: exits non-zero naming {key} and {name} (rc {r.returncode}, "
              f"stderr {r.stderr.strip()!r}, {time.time() - started:.1f} s)")


def main():
    args = common.parse_daemon_test_args(__doc__.split("\n")[0])
    source = args.source

    started = time.time()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="encoderd_access_"))
    common.generate_stubs(source, tmp)
    from proto import encoderd_pb2 as pb
    from proto import encoderd_pb2_grpc as pb_grpc
    from health_v1 import health_pb2, health_pb2_grpc
    mods = (pb, pb_grpc, health_pb2, health_pb2_grpc)
    (tmp / "certs").mkdir()
    certs = make_certificates(tmp / "certs")

    check_startup_errors(args, tmp)
    check_ipv6_listen(args, mods, tmp)
    check_tls_and_health_port(args, mods, certs, tmp)
    check_drain_closes_idle_tls_connections(args, mods, certs, tmp)
    check_tls_port_guarded(args, mods, certs, tmp)
    check_drain_ends_health_watches(args, mods, tmp)
    check_health_watch_cap(args, mods, tmp)
    check_health_port_guarded(args, mods, tmp)
    check_mutual_tls(args, mods, certs, tmp)
    check_bearer(args, mods, tmp)
    print(f"access e2e: {time.time() - started:.1f} s, {len(common.FAILURES)} failure(s)", flush=True)
    return 1 if common.FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
