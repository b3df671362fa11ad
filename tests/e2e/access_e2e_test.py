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
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import grpc

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import e2e_common as common  # noqa: E402
from e2e_common import check  # noqa: E402

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


# Channels the test opened; closed before each daemon is stopped (with TLS the
# server's drain waits for clients to close their connections, up to the grace
# period; on the plaintext port the connection guard closes idle ones).
CHANNELS = []


def open_channel(target, creds=None):
    c = grpc.secure_channel(target, creds) if creds else grpc.insecure_channel(target)
    CHANNELS.append(c)
    return c


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        check_health_port_drains(mods, daemon, secure, plain_health)
    finally:
        stop(daemon, "TLS server with a health port", signalled=getattr(daemon, "signalled", False))
    try:
        health_status(health_pb2, health_pb2_grpc, open_channel(f"127.0.0.1:{health_port}"))
        check(False, "the health port is closed after shutdown")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.UNAVAILABLE, f"health port closed after shutdown ({e.code()})")


def check_health_port_drains(mods, daemon, secure, plain_health):
    """An open EmbedStream holds the gRPC port's drain after SIGTERM; meanwhile
    the health port answers NOT_SERVING, as the gRPC port does."""
    pb, pb_grpc, health_pb2, health_pb2_grpc = mods
    release = threading.Event()

    def requests():
        yield pb.EmbedRequest(texts=["hold the drain"])
        release.wait(30)

    stream = pb_grpc.EncoderStub(secure).EmbedStream(requests(), timeout=30)
    check(len(next(stream).embeddings) == 1, "an EmbedStream is open over TLS")
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
    release.set()
    try:
        list(stream)
    except grpc.RpcError as e:
        check(False, f"the open stream finishes during the drain ({e.code()})")


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
    check_tls_and_health_port(args, mods, certs, tmp)
    check_mutual_tls(args, mods, certs, tmp)
    check_bearer(args, mods, tmp)
    print(f"access e2e: {time.time() - started:.1f} s, {len(common.FAILURES)} failure(s)", flush=True)
    return 1 if common.FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
