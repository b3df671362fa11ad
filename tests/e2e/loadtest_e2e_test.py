#!/usr/bin/python3
"""End-to-end test of encoderd-loadtest: starts the real `encoderd serve` on a
free loopback port, runs the load generator against it for a few seconds in
each mode, and checks the report's counts against the server: the tokens the
report sums from the responses must equal what the server's Tokenize RPC says
the same requests (replayed from --dump-workload) contain.

usage: loadtest_e2e_test.py --server BIN --loadtest BIN --model-dir DIR --source-dir REPO
Exits 0 when every check passed; prints each failed check.
"""
import argparse
import json
import math
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import grpc

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from e2e_common import (check, generate_stubs, report, run_loadtest,  # noqa: E402
                        self_signed_certificate, stop_process)


def start_server(binary, model_dir, log_path, extra=()):
    log = open(log_path, "w")
    proc = subprocess.Popen([binary, "serve", "--address", "127.0.0.1", "--port", "0",
                             "--metrics-port", "0", "--model-dir", model_dir,
                             "--max-queue-delay-us", "1000", *extra], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline:
        text = pathlib.Path(log_path).read_text()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
        if m and "serving" in text:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("server did not start:\n" + pathlib.Path(log_path).read_text())


def tokens_of_workload(binary, stub, pb, n, flags):
    """Tokens of requests 0..n-1 of the workload, as the server's Tokenize counts them."""
    dump = subprocess.run([binary, "--dump-workload", "--requests", str(n), *flags],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    check(len(dump) == n, f"--dump-workload printed {n} requests (got {len(dump)})")
    total = 0
    for line in dump:
        texts = json.loads(line)["texts"]
        total += stub.Tokenize(pb.TokenizeRequest(texts=texts, truncate=True)).token_count
    return total


def over_limit_requests(binary, stub, pb, n, flags):
    """How many of requests 0..n-1 of the workload the server refuses with
    truncation off (a text over the model's max_tokens)."""
    dump = subprocess.run([binary, "--dump-workload", "--requests", str(n), *flags],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    refused = 0
    for line in dump:
        try:
            stub.Tokenize(pb.TokenizeRequest(texts=json.loads(line)["texts"], truncate=False))
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, f"Tokenize refusal: {e.code()}")
            refused += 1
    return refused


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--loadtest", required=True)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--source-dir", required=True)
    args = p.parse_args()

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="encoderd_loadtest_e2e_"))
    generate_stubs(pathlib.Path(args.source_dir), tmp)
    from proto import encoderd_pb2 as pb
    from proto import encoderd_pb2_grpc as pb_grpc

    proc, port = start_server(args.server, args.model_dir, tmp / "server.log")
    target = f"127.0.0.1:{port}"
    try:
        stub = pb_grpc.EncoderStub(grpc.insecure_channel(target))

        # Closed loop bounded by a request count, no warm-up: exactly requests
        # 0..N-1 of the workload are sent, so their tokens can be recounted.
        workload = ["--texts", "2", "--words", "3-40", "--seed", "7"]
        n = 300
        r = run_loadtest(args.loadtest, target, tmp, "closed", "--mode", "closed",
                         "--concurrency", "4", "--requests", str(n), "--duration", "0",
                         "--warmup", "0", *workload)
        expected_tokens = tokens_of_workload(args.loadtest, stub, pb, n, workload)
        if r:
            check(r["requests_ok"] == n and r["requests_error"] == 0,
                  f"closed: {n} requests ok, 0 errors (got {r['requests_ok']}, {r['requests_error']})")
            check(r["texts"] == 2 * n, f"closed: {2 * n} texts (got {r['texts']})")
            check(r["tokens"] == expected_tokens,
                  f"closed: tokens {r['tokens']} == server Tokenize count {expected_tokens}")
            check(r["latency"]["count"] == n, "closed: one latency sample per OK request")
            lat = r["latency"]
            check(0 < lat["p50_us"] <= lat["p90_us"] <= lat["p99_us"] <= lat["p999_us"] <= lat["max_us"],
                  f"closed: latency quantiles ordered ({lat})")
            srv = r["server"]
            check(srv["inference"]["mean_us"] > 0 and srv["total"]["mean_us"] <= lat["mean_us"],
                  f"closed: server breakdown present and within client latency ({srv['total']})")

        # The same over EmbedStream.
        n = 120
        r = run_loadtest(args.loadtest, target, tmp, "stream", "--rpc", "embed_stream",
                         "--concurrency", "3", "--requests", str(n), "--duration", "0",
                         "--warmup", "0", *workload)
        if r:
            check(r["requests_ok"] == n and r["requests_error"] == 0,
                  f"stream: {n} requests ok (got {r['requests_ok']}, {r['requests_error']})")
            check(r["tokens"] == tokens_of_workload(args.loadtest, stub, pb, n, workload),
                  "stream: tokens match the server's Tokenize count")

        # A stream's failed message fails that call only: the server ends
        # the stream there, and the tool sends the calls after it again on a
        # new stream. (Until 2026-12-04 it failed every later call of the
        # slot at once, unsent: millions of errors the server never saw.)
        long_workload = ["--texts", "1", "--words", "50-300", "--seed", "11"]
        n = 60
        too_long = over_limit_requests(args.loadtest, stub, pb, n, long_workload)
        check(0 < too_long < n, f"stream errors: some requests over the limit ({too_long} of {n})")
        r = run_loadtest(args.loadtest, target, tmp, "stream_errors", "--rpc", "embed_stream",
                         "--no-truncate", "--concurrency", "2", "--requests", str(n),
                         "--duration", "0", "--warmup", "0", *long_workload)
        if r:
            want = {"INVALID_ARGUMENT": too_long} if too_long else {}
            check(r["requests_ok"] == n - too_long and r["errors_by_code"] == want,
                  f"stream errors: {n - too_long} ok and {want} (got {r['requests_ok']}, "
                  f"{r['errors_by_code']})")

        # Open loop for 3 s after a 1 s warm-up at 100 req/s (Poisson): the
        # counted requests are the arrivals of the measured window, +-5 sigma
        # (the arrival times are seeded: the count does not depend on the
        # machine's speed, the achieved rate would).
        rate, duration = 100.0, 3.0
        r = run_loadtest(args.loadtest, target, tmp, "open", "--mode", "open", "--rate",
                         str(rate), "--duration", str(duration), "--warmup", "1",
                         "--rpc", "classify", "--words", "8")
        if r:
            expect = rate * duration
            check(abs(r["requests_ok"] - expect) <= 5 * math.sqrt(expect) and r["requests_error"] == 0,
                  f"open: about {expect:.0f} requests ok, 0 errors (got {r['requests_ok']}, {r['requests_error']})")
            check(r["tokens"] >= 10 * r["requests_ok"],
                  f"open: 8 words + specials give >= 10 tokens per request ({r['tokens']})")

        # A wrong request is reported by status code, not hidden.
        # Exit status 1: no request succeeded; the report is still written.
        r = run_loadtest(args.loadtest, target, tmp, "bad_model", "--model", "no-such-model",
                         "--requests", "5", "--duration", "0", "--warmup", "0", expect_rc=1)
        if r:
            check(r["requests_ok"] == 0 and r["errors_by_code"] == {"NOT_FOUND": 5},
                  f"bad_model: 5 NOT_FOUND errors (got {r['errors_by_code']})")
    finally:
        stop_process(proc, 30)

    # Over TLS (--tls-ca): a self-signed certificate for localhost, which
    # the server's connection guard terminates.
    self_signed_certificate(tmp)
    tls_proc, tls_port = start_server(args.server, args.model_dir, tmp / "tls_server.log",
                                      ["--tls-cert-file", str(tmp / "server.pem"),
                                       "--tls-key-file", str(tmp / "server.key")])
    try:
        tls_target = f"127.0.0.1:{tls_port}"
        n = 50
        r = run_loadtest(args.loadtest, tls_target, tmp, "tls", "--tls-ca", str(tmp / "server.pem"),
                         "--tls-name", "localhost", "--concurrency", "4", "--requests", str(n),
                         "--duration", "0", "--warmup", "0", "--words", "8")
        if r:
            check(r["requests_ok"] == n and r["requests_error"] == 0,
                  f"tls: {n} requests ok over TLS (got {r['requests_ok']}, {r['requests_error']})")
        res = subprocess.run([args.loadtest, "--target", tls_target, "--requests", "1", "--duration", "0"],
                             capture_output=True, text=True, timeout=60)
        check(res.returncode != 0 and "cannot connect" in res.stderr,
              f"tls: a plaintext load generator cannot connect ({res.returncode}, {res.stderr.strip()[-200:]})")
    finally:
        stop_process(tls_proc, 30)

    # Nothing listens any more: the tool says so and fails.
    res = subprocess.run([args.loadtest, "--target", target, "--requests", "1", "--duration", "0"],
                         capture_output=True, text=True, timeout=60)
    check(res.returncode != 0 and "cannot connect" in res.stderr,
          f"no server: non-zero exit and 'cannot connect' ({res.returncode}, {res.stderr.strip()})")

    return report("loadtest e2e", tmp / "server.log")


if __name__ == "__main__":
    sys.exit(main())
