#!/usr/bin/env python3
"""A new daemon's first burst: for each binary, per run, starts `encoderd
serve` on the default model (CPU 1, one engine thread), sends one call of one
word once it serves, then 48 concurrent calls of 16 texts (about 45 tokens
each) with a 5 s deadline, and prints their codes and how long they took.
All 48 finish in about 2 s on a 2-vCPU EPYC; a daemon that predicts the
burst at its one small batch's rate refuses most of them.

Benchmark, not a test (docs/reliability.md, "Overload control"):

    /usr/bin/python3 loadtest/scripts/first_burst.py [--runs 3] BINARY [BINARY...]
"""
import argparse
import collections
import pathlib
import sys
import tempfile
import time

import grpc

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from e2e_common import generate_stubs, start_daemon  # noqa: E402

TEXT = "the quick brown fox jumps over the lazy dog and keeps running far away " * 3


def first_call(stub, pb):
    """Retries while the model loads."""
    while True:
        try:
            return stub.Embed(pb.EmbedRequest(texts=["hi"]), timeout=30)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            time.sleep(0.05)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("binaries", nargs="+")
    args = p.parse_args()
    tmp = tempfile.mkdtemp()
    generate_stubs(REPO, tmp)
    from proto import encoderd_pb2 as pb, encoderd_pb2_grpc as pb_grpc
    for binary in args.binaries:
        for run in range(args.runs):
            daemon = start_daemon(binary, ["--num-threads", "1", "--model-dir",
                                           str(REPO / "models" / "langid")],
                                  f"{tmp}/daemon{run}.log", prefix=("taskset", "-c", "1"))
            channel = grpc.insecure_channel(f"127.0.0.1:{daemon.port}")
            stub = pb_grpc.EncoderStub(channel)
            first_call(stub, pb)
            time.sleep(0.3)
            start = time.time()
            calls = [stub.Embed.future(pb.EmbedRequest(texts=[TEXT] * 16), timeout=5)
                     for _ in range(48)]
            codes = collections.Counter()
            for call in calls:
                try:
                    call.result()
                    codes["OK"] += 1
                except grpc.RpcError as e:
                    codes[e.code().name] += 1
            print(f"{binary} run {run}: {dict(codes)} in {time.time() - start:.2f} s", flush=True)
            channel.close()
            daemon.proc.terminate()
            daemon.proc.wait()


if __name__ == "__main__":
    main()
