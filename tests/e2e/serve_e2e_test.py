#!/usr/bin/python3
"""End-to-end test of `encoderd serve`: starts the real daemon on a free
loopback port against a fixture model and calls every RPC.

usage: serve_e2e_test.py --binary build/cli/encoderd --model-dir DIR
       --source-dir REPO [--reference DIR.reference]
Exits 0 when every check passed; prints each failed check.
"""
import argparse
import json
import os
import pathlib
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import grpc

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from e2e_common import (FAILURES, RawHttp2Client, check, generate_stubs,  # noqa: E402
                        raw_grpc_call, start_daemon, stop_process, wait_serving,
                        wait_until)

MODEL = "xlmr"
MAX_CLIENT_BATCH = 16


def start_server_daemon(binary, model_dir, log_path, extra=()):
    return start_daemon(binary, ["--model-name", MODEL, "--model-dir", model_dir,
                                 "--max-client-batch-size", str(MAX_CLIENT_BATCH),
                                 "--max-batch-tokens", "2048", "--max-queue-delay-us", "2000",
                                 "--shutdown-grace-s", "20", *extra], log_path)


def start_server(binary, model_dir, log_path, extra=()):
    d = start_server_daemon(binary, model_dir, log_path, extra)
    return d.proc, d.port


def close(a, b, tol):
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b))


def offline(binary, model_dir, texts, pooling=None):
    """Results of `encoderd encode --json` (the offline engine) for `texts`."""
    cmd = [binary, "encode", model_dir, "--json"]
    for t in texts:
        cmd += ["--text", t]
    if pooling:
        cmd += ["--pooling", pooling]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)["results"]


def read_reference(ref_dir):
    ref = pathlib.Path(ref_dir)
    inputs = json.loads((ref / "inputs.json").read_text())["sequences"]
    index = json.loads((ref / "outputs" / "index.json").read_text())
    outputs = {}
    for name, entry in index.items():
        raw = (ref / "outputs" / entry["file"]).read_bytes()
        outputs[name] = list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return inputs, outputs


TEXTS = ["hello world", "the quick brown fox jumps over the lazy dog",
         "Grüße aus Köln, schönes Wetter heute!", "x", "a much longer sentence " * 20,
         "¿Dónde está la biblioteca?", "日本語のテキスト", "one two three four five six"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--source-dir", required=True)
    p.add_argument("--reference")
    args = p.parse_args()

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="encoderd_e2e_"))
    generate_stubs(pathlib.Path(args.source_dir), tmp)
    from proto import encoderd_pb2 as pb
    from proto import encoderd_pb2_grpc as pb_grpc
    from health_v1 import health_pb2, health_pb2_grpc

    daemon = start_server_daemon(args.binary, args.model_dir, tmp / "server.log")
    proc, port = daemon.proc, daemon.port
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = pb_grpc.EncoderStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        if not check(wait_serving(health_pb2, health, ["", MODEL]), "health SERVING for '' and model"):
            return 1
        run_checks(args, pb, stub, channel, health_pb2, health, tmp / "server.log", port)
        check_health_command(args.binary, port)
        # SIGTERM with a call in flight: the call finishes, health flips, exit 0.
        inflight = {}

        def slow_call():
            try:
                r = stub.Embed(pb.EmbedRequest(texts=["a much longer sentence " * 20] * MAX_CLIENT_BATCH))
                inflight["ok"] = len(r.embeddings) == MAX_CLIENT_BATCH
            except grpc.RpcError as e:
                inflight["error"] = e.code()
        t = threading.Thread(target=slow_call)
        t.start()
        # Signal once the server holds the call (or has answered it): a call
        # still in the client's or the kernel's buffers when the drain starts
        # may be cancelled by gRPC before any handler sees it.
        held = time.monotonic() + 10
        while (t.is_alive() and time.monotonic() < held
               and daemon.metric("encoderd_in_flight_requests") < 1):
            time.sleep(0.001)
        held = t.is_alive() and daemon.metric("encoderd_in_flight_requests") >= 1
        print("SIGTERM " + ("with the call held by the server" if held else
                            "with the call not held (yet, or any more)"), flush=True)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
        t.join(timeout=30)
        check(rc == 0, f"exit status 0 after SIGTERM (got {rc})")
        # A call the server held when the drain began is completed; one it had
        # not seen yet may be refused as UNAVAILABLE.
        if held:
            check(inflight.get("ok"), f"the call held at SIGTERM completed ({inflight})")
        else:
            check(inflight.get("ok") or inflight.get("error") == grpc.StatusCode.UNAVAILABLE,
                  f"call racing SIGTERM completed or was refused as UNAVAILABLE ({inflight})")
        log = (tmp / "server.log").read_text()
        check("loaded model 'xlmr'" in log and "encoderd serve: listen=" in log,
              "start-up log has the effective config and the model load line")
    finally:
        if proc.poll() is None:
            proc.kill()
    check_second_signal(args, pb, pb_grpc, health_pb2, health_pb2_grpc, tmp)
    check_overload_caps(args, pb, pb_grpc, health_pb2, health_pb2_grpc, tmp)
    check_unread_answers(args, pb, pb_grpc, health_pb2, health_pb2_grpc, tmp)
    check_calls_after_answers(args, pb, pb_grpc, health_pb2, health_pb2_grpc, tmp)
    check_send_timeout(args, pb, pb_grpc, health_pb2, health_pb2_grpc, tmp)
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


def check_health_command(binary, port):
    """`encoderd health` (the image's HEALTHCHECK): exit 0 and SERVING for the
    server and its model, 1 for an unknown service and for a closed port, 2
    for a bad flag."""
    def run(*flags):
        r = subprocess.run([binary, "health", *flags], capture_output=True, text=True, timeout=30)
        return r.returncode, r.stdout.strip()
    check(run("--port", str(port)) == (0, "SERVING"), "encoderd health: the server is SERVING")
    check(run("--port", str(port), "--service", MODEL) == (0, "SERVING"),
          "encoderd health: the model is SERVING")
    check(run("--port", str(port), "--service", "no-such-model")[0] == 1,
          "encoderd health: an unknown service exits 1")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    check(run("--port", str(closed), "--timeout", "2")[0] == 1, "encoderd health: a closed port exits 1")
    # With no --port, the port `serve` would read: from ENCODERD_CONFIG's
    # file too (only ENCODERD_PORT / ENCODERD_HEALTH_PORT were read, so a
    # config file's listen.port failed the images' HEALTHCHECK).
    config = pathlib.Path(tempfile.mkdtemp(prefix="encoderd_health_")) / "port.yaml"
    config.write_text(f"listen:\n  address: 127.0.0.1\n  port: {port}\n")
    r = subprocess.run([binary, "health"], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "ENCODERD_CONFIG": str(config)})
    check((r.returncode, r.stdout.strip()) == (0, "SERVING"),
          f"encoderd health: the port of ENCODERD_CONFIG's file ({r.returncode}, {r.stderr.strip()})")
    r = subprocess.run([binary, "health"], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "ENCODERD_PORT": str(port)})
    check((r.returncode, r.stdout.strip()) == (0, "SERVING"),
          f"encoderd health: the port of ENCODERD_PORT ({r.returncode}, {r.stderr.strip()})")
    check(run("--no-such-flag")[0] == 2, "encoderd health: a bad flag exits 2")
    check(run("--port", "70000")[0] == 2 and run("--timeout", "inf")[0] == 2,
          "encoderd health: a port over 65535 or an endless timeout exits 2")


def check_second_signal(args, pb, pb_grpc, health_pb2, health_pb2_grpc, tmp):
    """A call whose request is still arriving keeps the first SIGTERM's drain
    waiting (an open EmbedStream no longer does: the drain ends it); a second
    one exits at once."""
    proc, port = start_server(args.binary, args.model_dir, tmp / "server2.log")
    holder = None
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        health = health_pb2_grpc.HealthStub(channel)
        if not check(wait_serving(health_pb2, health, [""]), "second server SERVING"):
            return
        # An Embed call's HEADERS, its request never sent; the PING's answer
        # says gRPC has the call.
        holder = RawHttp2Client(port)
        holder.open([1])
        check(holder.ping(), "a call whose request is still arriving is open")
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        check(proc.poll() is None, "draining: still alive while a call is open")
        try:
            pb_grpc.EncoderStub(channel).Embed(pb.EmbedRequest(texts=["late"]), timeout=5)
            check(False, "a new call while draining is refused")
        except grpc.RpcError as e:
            # The handler answers UNAVAILABLE while draining; a call gRPC core
            # received after Shutdown() began is cancelled by gRPC itself.
            check(e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED),
                  f"new call while draining: UNAVAILABLE or CANCELLED ({e.code()})")
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=10)
        check(rc == 1, f"second signal forces exit status 1 (got {rc})")
    finally:
        if holder:
            holder.close()
        if proc.poll() is None:
            proc.kill()


def start_serving(args, pb_grpc, health_pb2, health_pb2_grpc, log_path, flags, what):
    """A daemon with `flags`: (e2e_common.Daemon, stub, health stub), the stub
    None when it never reported SERVING."""
    daemon = start_server_daemon(args.binary, args.model_dir, log_path, flags)
    channel = grpc.insecure_channel(f"127.0.0.1:{daemon.port}")
    stub, health = pb_grpc.EncoderStub(channel), health_pb2_grpc.HealthStub(channel)
    serving = check(wait_serving(health_pb2, health, [""]), f"{what} SERVING")
    return daemon, (stub if serving else None), health


def check_unread_answers(args, pb, pb_grpc, health_pb2, health_pb2_grpc, tmp):
    """A client that never takes its answers: its flow-control window is 0
    (SETTINGS_INITIAL_WINDOW_SIZE), so gRPC can send none of its replies, and
    its calls have no deadline. An answered call gives its slot back for a
    place among the answers being sent (twice as many as slots), while its
    connection's share of them lasts (three quarters), and keeps it after
    that, until gRPC is done with it: with max_concurrent_requests=4 the
    connection holds 6 places and 3 slots, and its next calls are refused
    at once (until 2026-12-02 the slot went back when the answer was handed
    to gRPC, and every call was accepted, its reply held in gRPC's queues
    for good; until 2026-12-07 there were as many places as slots, and the
    connection held 3 places). Another client is still served. Each call is
    made once the daemon has answered the one before
    (encoderd_requests_total), so that none is still running and holding a
    slot when the next arrives (until 2026-12-02 the check slept 0.2 s
    instead, and a machine slower than that would have refused one call
    more)."""
    daemon, stub, _ = start_serving(args, pb_grpc, health_pb2, health_pb2_grpc,
                                    tmp / "server4.log", ["--max-concurrent-requests", "4"],
                                    "server for unread answers")
    proc, port = daemon.proc, daemon.port
    try:
        if stub is None:
            return
        hoarder = RawHttp2Client(port, settings={0x4: 0})
        calls = list(range(1, 25, 2))  # 12 calls, one after another
        for made, stream in enumerate(calls, 1):
            hoarder.open([stream])
            hoarder.finish(stream, "hello world")
            hoarder.ping()
            # The call runs, or is refused; its answer cannot be sent.
            if not check(wait_until(lambda: daemon.metric("encoderd_requests_total",
                                                          {"rpc": "Embed"}) >= made, 60),
                         f"the daemon answered call {made} of the client taking no answers"):
                break
        hoarder.wait(lambda statuses: len(statuses) >= 3, timeout=10)
        refused = sum(1 for code, _ in hoarder.statuses.values() if code == 8)
        check(refused == 3 and len(hoarder.statuses) == 3,
              f"a client taking no answers holds 6 places and 3 slots; its 3 later calls are "
              f"RESOURCE_EXHAUSTED ({hoarder.statuses})")
        r = stub.Embed(pb.EmbedRequest(texts=["another client"]), timeout=10)
        check(len(r.embeddings) == 1, "another client is served beside it")
        hoarder.close()
    finally:
        stop_process(proc, 20)


def check_send_timeout(args, pb, pb_grpc, health_pb2, health_pb2_grpc, tmp):
    """A client that grants gRPC the largest HTTP/2 windows, sends Embed
    calls of 16 texts (up to 2 MiB of answers, at most 400 calls; each
    call's HEADERS and request together, so that none counts as a request
    still arriving, of which the guard lets a connection hold 256) and
    reads nothing: its
    answers pile up in the kernel's queue toward it, and with
    --send-timeout-s 1 its connection is reset
    (encoderd_connections_closed_total{reason="send_timeout"}), while a
    client that reads is served before and after. With the timeout off (as
    before 2026-12-02) no connection is reset within the minute waited."""
    daemon, stub, _ = start_serving(args, pb_grpc, health_pb2, health_pb2_grpc,
                                    tmp / "server6.log", ["--send-timeout-s", "1"],
                                    "server with a 1 s send timeout")
    proc = daemon.proc
    try:
        if stub is None:
            return
        texts = [f"text number {i}" for i in range(16)]
        first = stub.Embed(pb.EmbedRequest(texts=texts), timeout=30)
        check(len(first.embeddings) == 16, "a client that reads is served")
        answer_bytes = len(first.SerializeToString())
        import hyperframe.frame as hf
        hoarder = RawHttp2Client(daemon.port, settings={0x4: 2**31 - 1})
        hoarder.sock.sendall(hf.WindowUpdateFrame(0, window_increment=2**31 - 1 - 65535)
                             .serialize())
        body = pb.EmbedRequest(texts=texts).SerializeToString()
        streams = [1 + 2 * i for i in range(min(400, (2 << 20) // answer_bytes + 1))]
        for s in streams:
            hoarder.open([s])
            hoarder.sock.sendall(hf.DataFrame(s, data=b"\x00" + len(body).to_bytes(4, "big") + body,
                                              flags=["END_STREAM"]).serialize())
        closed = wait_until(lambda: daemon.metric("encoderd_connections_closed_total",
                                                  {"reason": "send_timeout"}) == 1, 60, 0.2)
        check(closed, "the connection of a client reading nothing is reset at the send timeout")
        if closed:
            hoarder.sock.settimeout(5)
            try:
                while hoarder.sock.recv(1 << 20):
                    pass
                reset = False
            except ConnectionResetError:
                reset = True
            except OSError:
                reset = False
            check(reset, "the client sees a reset (ECONNRESET)")
        check(len(stub.Embed(pb.EmbedRequest(texts=texts), timeout=30).embeddings) == 16,
              "a client that reads is served after the reset")
        hoarder.close()
    finally:
        stop_process(proc, 20)


def check_calls_after_answers(args, pb, pb_grpc, health_pb2, health_pb2_grpc, tmp,
                              clients=8, calls=250):
    """max_concurrent_requests = 8 and 8 clients, each on its own connection,
    calling again as soon as it has its answer: never more than 8 calls at
    once, so none is refused. Until 2026-12-02 an answered call's slot went
    back when gRPC was done with it, a moment after the client had the
    answer, and the next call could find it taken (6 of these 2,000 calls
    were refused); until 2026-12-07 there were as many places among the
    answers being sent as slots, and a previous answer still holding its
    place could leave the next one without (8 of 2,000 refused, once in
    CI; ConcurrencyLimiterTest.ClientsCallingRightAfterTheirAnswersAreNeverRefused)."""
    daemon, stub, _ = start_serving(args, pb_grpc, health_pb2, health_pb2_grpc,
                                    tmp / "server5.log",
                                    ["--max-concurrent-requests", str(clients)],
                                    "server for calls right after answers")
    proc, port = daemon.proc, daemon.port
    try:
        if stub is None:
            return
        codes, lock = {}, threading.Lock()

        def client(i):
            channel = grpc.insecure_channel(f"127.0.0.1:{port}",
                                            options=[("grpc.use_local_subchannel_pool", 1)])
            own = pb_grpc.EncoderStub(channel)
            for j in range(calls):
                try:
                    own.Embed(pb.EmbedRequest(texts=[f"client {i} call {j}"]), timeout=30)
                    code = "OK"
                except grpc.RpcError as e:
                    code = e.code().name
                with lock:
                    codes[code] = codes.get(code, 0) + 1
            channel.close()

        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(f"{clients} clients calling right after their answers under "
              f"max_concurrent_requests={clients}: {codes}", flush=True)
        check(codes == {"OK": clients * calls},
              f"no call refused when the calls never outnumber the slots ({codes})")
    finally:
        stop_process(proc, 20)


def check_overload_caps(args, pb, pb_grpc, health_pb2, health_pb2_grpc, tmp):
    """max_concurrent_requests=2: two open streams hold both slots, so the next
    calls are refused at once with RESOURCE_EXHAUSTED, and admitted again once a
    stream closes; a message over max_receive_message_bytes is refused, and an
    Encode whose reply would exceed max_send_message_bytes (1 MiB, less 64 KiB
    and 16 bytes a sequence of framing: 3,839 tokens of 64 values in 16
    sequences) is refused before it runs."""
    releases = [threading.Event(), threading.Event()]
    daemon, stub, health = start_serving(
        args, pb_grpc, health_pb2, health_pb2_grpc, tmp / "server3.log",
        ["--max-concurrent-requests", "2", "--max-receive-message-bytes", "65536",
         "--max-send-message-bytes", "1048576"], "capped server")
    proc, port = daemon.proc, daemon.port
    try:
        if stub is None:
            return
        streams = []
        for release in releases:
            def requests(release=release):
                yield pb.EmbedRequest(texts=["hello"])
                release.wait(60)
            stream = stub.EmbedStream(requests())
            check(len(next(stream).embeddings) == 1, "stream holds a slot")
            streams.append(stream)
        # Both slots stay taken until the streams end: a call that waited for a
        # slot would end DEADLINE_EXCEEDED, so RESOURCE_EXHAUSTED means refused
        # on arrival.
        refused = 0
        for _ in range(3):
            try:
                stub.Embed(pb.EmbedRequest(texts=["one too many"]), timeout=10)
            except grpc.RpcError as e:
                refused += e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        check(refused == 3, f"all 3 calls over the cap refused with RESOURCE_EXHAUSTED ({refused})")
        releases[0].set()
        list(streams[0])  # the stream ends: its slot is free again
        r = stub.Embed(pb.EmbedRequest(texts=["admitted again"]), timeout=10)
        check(len(r.embeddings) == 1, "a call is admitted once a slot is free")
        try:
            stub.Embed(pb.EmbedRequest(texts=["x" * 70000]), timeout=10)
            check(False, "a message over max_receive_message_bytes is refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED,
                  f"oversized message: RESOURCE_EXHAUSTED ({e.code()})")
        def sixteen(tokens):
            return [pb.TokenIds(ids=[0] + [5] * (tokens - 2) + [2]) for _ in range(16)]
        fits = stub.Encode(pb.EncodeRequest(token_ids=sixteen(239)), timeout=30)
        check(sum(s.num_tokens for s in fits.sequences) == 3824, "an Encode reply of 16 x 239 tokens fits")
        try:
            stub.Encode(pb.EncodeRequest(token_ids=sixteen(240)), timeout=30)
            check(False, "an Encode reply over max_send_message_bytes is refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and
                  "the reply would hold the hidden states of 3840 tokens in 16 sequences" in e.details() and
                  "listen.max_send_message_bytes" in e.details(),
                  f"an Encode reply over max_send_message_bytes: INVALID_ARGUMENT ({e.code()}: {e.details()})")
        check(health.Check(health_pb2.HealthCheckRequest(service="")).status ==
              health_pb2.HealthCheckResponse.SERVING, "still SERVING after the refusals")
        releases[1].set()
        list(streams[1])
    finally:
        for release in releases:
            release.set()
        stop_process(proc, 20)


def run_checks(args, pb, stub, stub_channel, health_pb2, health, log_path=None, port=None):
    info = stub.ModelInfo(pb.ModelInfoRequest())
    check(len(info.models) == 1 and info.models[0].name == MODEL, "ModelInfo lists the model")
    m = info.models[0]
    check(m.family == "torchtext-roberta" and m.hidden_size == 64 and
          list(m.labels) == ["negative", "neutral", "positive"] and m.device == "cpu" and
          m.dtype == "float32" and m.max_tokens > 0 and m.embedding_size == 64 and
          not m.default_normalize, f"ModelInfo fields {m}")

    # Tokenize: special tokens around the pieces, pieces aligned with ids.
    tok = stub.Tokenize(pb.TokenizeRequest(texts=TEXTS[:3]))
    check(len(tok.tokenizations) == 3, "Tokenize returns one result per text")
    for t in tok.tokenizations:
        check(t.ids[0] == 0 and t.ids[-1] == 2 and len(t.pieces) == len(t.ids),
              f"Tokenize ids/pieces {list(t.ids)}")
    check(tok.token_count == sum(len(t.ids) for t in tok.tokenizations), "Tokenize token_count")

    # Classify and Embed equal the offline engine.
    cls = stub.Classify(pb.ClassifyRequest(texts=TEXTS, truncate=True))
    ref = offline(args.binary, args.model_dir, TEXTS)
    check(len(cls.results) == len(ref) == len(TEXTS),
          f"Classify and the offline engine give one result a text ({len(cls.results)}, {len(ref)})")
    for r, want in zip(cls.results, ref):
        check(r.label == want["label"] and close(r.scores, want["scores"], 1e-5),
              f"Classify equals offline engine for {want['text'][:20]!r}")
    check(abs(sum(cls.results[0].scores) - 1) < 1e-5, "Classify scores are probabilities")
    # `encode`'s text output names each score's label, in --json's "labels"
    # order (it printed 0=, 1=, ... until 2026-12-02, and --json had no labels).
    run = lambda *extra: subprocess.run([args.binary, "encode", args.model_dir, "--text", TEXTS[0],
                                         *extra], capture_output=True, text=True, check=True).stdout
    labels = json.loads(run("--json")).get("labels")
    line = next((l for l in run().splitlines() if l.strip().startswith("scores:")), "")
    check(labels and [kv.split("=")[0] for kv in line.split()[1:]] == labels,
          f"encode names each score's label: {line[:60]!r} for labels {str(labels)[:60]}")
    check(cls.timing.total_us > 0 and cls.timing.inference_us > 0 and
          cls.timing.total_us >= cls.timing.inference_us, f"Classify timing {cls.timing}")
    check(cls.token_count == sum(r["tokens"] for r in ref), "Classify token_count")
    for pooling, pb_pooling in (("cls", pb.POOLING_CLS), ("mean", pb.POOLING_MEAN),
                                ("max", pb.POOLING_MAX),
                                ("mean_sqrt_len", pb.POOLING_MEAN_SQRT_LEN),
                                ("weighted_mean", pb.POOLING_WEIGHTED_MEAN),
                                ("last_token", pb.POOLING_LAST_TOKEN)):
        emb = stub.Embed(pb.EmbedRequest(texts=TEXTS, pooling=pb_pooling, truncate=True))
        ref = offline(args.binary, args.model_dir, TEXTS, pooling)
        check(len(emb.embeddings) == len(ref) == len(TEXTS),
              f"Embed {pooling} and the offline engine give one row a text")
        for e, want in zip(emb.embeddings, ref):
            check(close(e.values, want["embedding"], 1e-5),
                  f"Embed {pooling} equals offline engine for {want['text'][:20]!r}")
    normed = stub.Embed(pb.EmbedRequest(texts=TEXTS[:2], normalize=True))
    check(len(normed.embeddings) == 2, "normalize: one row a text")
    for e in normed.embeddings:
        check(abs(sum(v * v for v in e.values) - 1) < 1e-4, "normalize gives unit rows")

    # dimensions (Matryoshka truncation): the first values of the whole
    # embedding, made unit length again where it is normalized, as
    # sentence-transformers' encode(truncate_dim=16, normalize_embeddings=...).
    whole = stub.Embed(pb.EmbedRequest(texts=TEXTS[:3], pooling=pb.POOLING_MEAN)).embeddings
    cut = stub.Embed(pb.EmbedRequest(texts=TEXTS[:3], pooling=pb.POOLING_MEAN,
                                     dimensions=16)).embeddings
    check(len(cut) == 3 and all(list(c.values) == list(w.values)[:16] for c, w in zip(cut, whole)),
          "dimensions=16 gives the first 16 values")
    cut = stub.Embed(pb.EmbedRequest(texts=TEXTS[:3], pooling=pb.POOLING_MEAN, dimensions=16,
                                     normalize=True)).embeddings
    for c, w in zip(cut, whole):
        norm = sum(v * v for v in w.values[:16]) ** 0.5
        check(len(c.values) == 16 and close(c.values, [v / norm for v in w.values[:16]], 1e-6),
              "dimensions=16 with normalize: the first 16 values made unit length")
    same = stub.Embed(pb.EmbedRequest(texts=TEXTS[:3], pooling=pb.POOLING_MEAN, dimensions=64))
    check([list(e.values) for e in same.embeddings] == [list(w.values) for w in whole],
          "dimensions=embedding_size gives the whole embedding")
    streamed = list(stub.EmbedStream(iter([pb.EmbedRequest(texts=TEXTS[:1], dimensions=8)])))
    check(len(streamed) == 1 and len(streamed[0].embeddings[0].values) == 8,
          "EmbedStream takes dimensions")
    for bad in (65, -1):
        try:
            stub.Embed(pb.EmbedRequest(texts=TEXTS[:1], dimensions=bad))
            check(False, f"dimensions={bad} is refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and
                  "or 1 to 64 (the max_dimensions of model" in e.details(),
                  f"dimensions={bad}: INVALID_ARGUMENT naming the size ({e.details()[:100]})")

    # Encode on pre-tokenised ids equals the PyTorch reference hidden states.
    if args.reference:
        inputs, outputs = read_reference(args.reference)
        seqs = [s for s in inputs if len(s) <= m.max_tokens]
        enc = stub.Encode(pb.EncodeRequest(token_ids=[pb.TokenIds(ids=s) for s in seqs]))
        check(seqs and len(enc.sequences) == len(seqs),
              f"Encode: one state list a sequence ({len(enc.sequences)} for {len(seqs)})")
        for i, (s, states) in enumerate(zip(seqs, enc.sequences)):
            want = outputs[f"hidden.{inputs.index(s)}"]
            check(states.num_tokens == len(s) and states.hidden_size == 64 and
                  close(states.values, want, 1e-4), f"Encode hidden states of sequence {i}")
    enc = stub.Encode(pb.EncodeRequest(texts=TEXTS[:2]))
    check([s.num_tokens for s in enc.sequences] == [len(t.ids) for t in tok.tokenizations[:2]],
          "Encode on texts: one state per token")

    # EmbedStream: one response per request, in order.
    reqs = [pb.EmbedRequest(texts=[t]) for t in TEXTS[:4]]
    single = [stub.Embed(r).embeddings[0].values for r in reqs]
    streamed = list(stub.EmbedStream(iter(reqs)))
    check(len(streamed) == 4 and all(close(s.embeddings[0].values, v, 1e-5)
                                     for s, v in zip(streamed, single)), "EmbedStream in order")

    # 64 concurrent clients with ragged inputs each get exactly their own results.
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    per_client = [[" ".join(words[(c + k) % 12:] + words[:(c * 3 + k) % 7]) + f" {c}"
                   for k in range(1 + c % 5)] for c in range(64)]
    expected = {}
    flat = sorted({t for texts in per_client for t in texts})
    for i in range(0, len(flat), MAX_CLIENT_BATCH):
        chunk = flat[i:i + MAX_CLIENT_BATCH]
        for t, e in zip(chunk, stub.Embed(pb.EmbedRequest(texts=chunk)).embeddings):
            expected[t] = list(e.values)
    wrong = []

    def client(c):
        try:
            r = stub.Embed(pb.EmbedRequest(texts=per_client[c]))
            if len(r.embeddings) != len(per_client[c]) or not all(
                    close(e.values, expected[t], 1e-5) for e, t in zip(r.embeddings, per_client[c])):
                wrong.append(c)
        except grpc.RpcError as e:
            wrong.append((c, e.code()))
    threads = [threading.Thread(target=client, args=(c,)) for c in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not wrong, f"64 concurrent clients got their own results (wrong: {wrong})")

    # Bad inputs: the right code and a message naming the problem, and the
    # server stays healthy.
    def answer_of(call):
        try:
            call()
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            return e.code(), e.details() or ""

    # The generated stubs refuse to serialise invalid UTF-8: send raw bytes
    # (a serialized request with a placeholder patched to invalid UTF-8, or a
    # truncated / garbage body). The handler parses the bytes itself and
    # answers INVALID_ARGUMENT (server/grpc/request_serialization.h).
    def raw(method, response):
        return stub_channel.unary_unary(f"/encoderd.v1.Encoder/{method}",
                                        request_serializer=lambda b: b,
                                        response_deserializer=response.FromString)
    raw_embed = raw("Embed", pb.EmbedResponse)
    bad_utf8_classify = pb.ClassifyRequest(texts=["ok", "PLACEHOLDER"]).SerializeToString().replace(
        b"PLACEHOLDER", b"PLACEHOLD\xff\xfe")
    truncated_body = pb.EmbedRequest(texts=["hello world"]).SerializeToString()[:-3]
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    too_long = f"more than the limit of {m.max_tokens} tokens"
    cases = {
        "empty list": (lambda: stub.Embed(pb.EmbedRequest(texts=[])), invalid, "the request has no texts"),
        "empty string": (lambda: stub.Classify(pb.ClassifyRequest(texts=["ok", ""])), invalid, "texts[1] is empty"),
        "NUL byte": (lambda: stub.Tokenize(pb.TokenizeRequest(texts=["a\x00b"])), invalid, "texts[0] contains a NUL byte"),
        "invalid UTF-8 (Embed)": (lambda: raw_embed(b"\x0a\x03\xff\xfe\x41"), invalid,
                                  "not a valid encoderd.v1.EmbedRequest"),
        "invalid UTF-8 (Classify)": (lambda: raw("Classify", pb.ClassifyResponse)(bad_utf8_classify), invalid,
                                     "not a valid encoderd.v1.ClassifyRequest"),
        "invalid UTF-8 (EmbedStream)": (lambda: list(stub_channel.stream_stream(
            "/encoderd.v1.Encoder/EmbedStream", request_serializer=lambda b: b,
            response_deserializer=pb.EmbedResponse.FromString)(
                iter([pb.EmbedRequest(texts=["fine"]).SerializeToString(), b"\x0a\x02\xc3\x28"]))),
            invalid, "not a valid encoderd.v1.EmbedRequest"),
        "truncated body": (lambda: raw_embed(truncated_body), invalid, "not a valid encoderd.v1.EmbedRequest"),
        "garbage body": (lambda: raw("Encode", pb.EncodeResponse)(b"\xff\xff\xff\xff\xff"), invalid,
                         "not a valid encoderd.v1.EncodeRequest"),
        "over-long text": (lambda: stub.Embed(pb.EmbedRequest(texts=["word " * 2000])), invalid, too_long),
        "too many texts": (lambda: stub.Embed(pb.EmbedRequest(texts=["a"] * (MAX_CLIENT_BATCH + 1))), invalid,
                           f"the limit is {MAX_CLIENT_BATCH}"),
        "unknown model": (lambda: stub.Embed(pb.EmbedRequest(texts=["a"], model="nope")), grpc.StatusCode.NOT_FOUND,
                          "unknown model 'nope'"),
        "token id out of vocab": (lambda: stub.Encode(pb.EncodeRequest(token_ids=[pb.TokenIds(ids=[0, 10**6, 2])])),
                                  invalid, "token id 1000000 (position 1) is outside the vocabulary"),
        "negative token id": (lambda: stub.Encode(pb.EncodeRequest(token_ids=[pb.TokenIds(ids=[0, -5, 2])])),
                              invalid, "token id -5"),
        "too many token ids": (lambda: stub.Encode(pb.EncodeRequest(token_ids=[pb.TokenIds(ids=[0] * (m.max_tokens + 1))])),
                               invalid, f"tokens; the limit is {m.max_tokens}"),
        "empty token ids": (lambda: stub.Encode(pb.EncodeRequest(token_ids=[pb.TokenIds(ids=[])])), invalid,
                            "token_ids[0] is empty"),
        # torchtext masks pad keys: a sequence of pads alone attends to nothing.
        "pad token ids alone": (lambda: stub.Encode(pb.EncodeRequest(token_ids=[pb.TokenIds(ids=[0, 2]),
                                                                                pb.TokenIds(ids=[1, 1])])),
                                invalid, "token_ids[1] holds the pad token (id 1) alone"),
        "texts and token ids": (lambda: stub.Encode(pb.EncodeRequest(texts=["a"], token_ids=[pb.TokenIds(ids=[0, 2])])),
                                invalid, "not both"),
        "neither texts nor token ids": (lambda: stub.Encode(pb.EncodeRequest()), invalid, "neither texts nor token_ids"),
        "pooling 99": (lambda: stub.Embed(pb.EmbedRequest(texts=["a"], pooling=99)), invalid, "pooling 99 is not one of"),
        "negative pooling": (lambda: stub.Embed(pb.EmbedRequest(texts=["a"], pooling=-1)), invalid, "pooling -1"),
        "1 MB word, no truncation": (lambda: stub.Tokenize(pb.TokenizeRequest(texts=["x" * 1_000_000])), invalid,
                                     too_long),
        # (A deadline past before the call arrives: reliability_e2e's raw
        # call with grpc-timeout 0n; a gRPC client fails a 0.1 ms deadline
        # on its own side, whatever the server does.)
    }
    for name, (call, want, part) in cases.items():
        code, details = answer_of(call)
        wanted = want if isinstance(want, tuple) else (want,)
        check(code in wanted and part in details, f"{name}: {want} with '{part}' (got {code}: {details!r})")
    # A call that ends without a request message (HEADERS with END_STREAM,
    # no DATA; a rapid-reset client's streams look the same to the handler):
    # the client's fault, INVALID_ARGUMENT, not INTERNAL (and so not an
    # error line in the log per call).
    if port:
        for method in ("Embed", "Tokenize", "ModelInfo"):
            code, message = raw_grpc_call(port, f"/encoderd.v1.Encoder/{method}", None)
            check(code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and
                  "carries no request message" in message,
                  f"{method} without a message: INVALID_ARGUMENT (got {code}: {message!r})")
    word = stub.Tokenize(pb.TokenizeRequest(texts=["x" * 1_000_000], truncate=True)).tokenizations[0]
    check(len(word.ids) == m.max_tokens and word.untruncated_length > m.max_tokens,
          f"1 MB word with truncation: {m.max_tokens} ids, untruncated length over the limit "
          f"(got {len(word.ids)}, {word.untruncated_length})")
    if log_path:
        log = pathlib.Path(log_path).read_text()
        check("contains invalid UTF-8" not in log,
              "protobuf's per-request invalid UTF-8 complaint stays out of the log (debug level)")
    check(health.Check(health_pb2.HealthCheckRequest(service="")).status ==
          health_pb2.HealthCheckResponse.SERVING, "still SERVING after bad inputs")
    check(len(stub.Embed(pb.EmbedRequest(texts=["still fine"])).embeddings) == 1,
          "still answering after bad inputs")


if __name__ == "__main__":
    sys.exit(main())
