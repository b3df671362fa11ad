#!/usr/bin/env python3
"""The default model (models/langid) through the running daemon against PyTorch.

Re-creates the held-out test splits from Debian's packages (catalogs and man
pages, whose packages scripts/setup.sh installs; the Wesnoth dialogue split
needs 200 MB of game data and is left to training/langid/evaluate.py):
training/langid/evaluate.py --recreate, which also writes PyTorch's
predictions, starts `encoderd serve` on models/langid, classifies every test
text through the Classify RPC, and checks that the daemon's labels agree with
PyTorch's on at least 99.9% of the texts and that its accuracy is >= 95%.
Then the same with `--dtype int8` (dynamic quantization of the encoder's
Linear layers): agreement with PyTorch fp32 >= 99% and accuracy at most 0.5
points below the fp32 daemon's.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

import grpc

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import serve_e2e_test as common  # noqa: E402

BATCH = common.MAX_CLIENT_BATCH  # texts per Classify call


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--source-dir", required=True)
    p.add_argument("--data", required=True, help="scratch directory for the test splits")
    args = p.parse_args()
    source = pathlib.Path(args.source_dir)
    model_dir = source / "models" / "langid"

    started = time.time()
    subprocess.run(["/usr/bin/python3", str(source / "training/langid/evaluate.py"),
                    "--model-dir", str(model_dir), "--data", args.data, "--recreate",
                    "--no-install", "--sources", "catalog,prose", "--min-accuracy", "0.95"],
                   check=True)
    print(f"PyTorch evaluation: {time.time() - started:.1f} s", flush=True)

    rows, expected = [], []
    for name in ("test", "prose_test"):
        rows += read_jsonl(pathlib.Path(args.data) / f"{name}.jsonl")
        expected += [r["label"] for r in read_jsonl(pathlib.Path(args.data) / f"{name}_predictions.jsonl")]
    common.check(len(rows) == len(expected) and len(rows) > 10000,
                 f"{len(rows)} test texts with PyTorch predictions")

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="encoderd_langid_"))
    common.generate_stubs(source, tmp)
    from proto import encoderd_pb2 as pb
    from proto import encoderd_pb2_grpc as pb_grpc
    from health_v1 import health_pb2, health_pb2_grpc

    def classify_all(dtype):
        """(agreement with PyTorch fp32, accuracy) of a daemon running `dtype`."""
        proc, port = common.start_server(args.binary, str(model_dir), tmp / f"server_{dtype}.log",
                                         ["--dtype", dtype])
        try:
            channel = grpc.insecure_channel(f"127.0.0.1:{port}")
            stub = pb_grpc.EncoderStub(channel)
            if not common.check(common.wait_serving(health_pb2, health_pb2_grpc.HealthStub(channel),
                                                    [""]), f"{dtype} daemon SERVING"):
                return 0.0, 0.0
            started = time.time()
            got = []
            for i in range(0, len(rows), BATCH):
                texts = [r["text"] for r in rows[i:i + BATCH]]
                reply = stub.Classify(pb.ClassifyRequest(texts=texts, truncate=True), timeout=60)
                got += [r.label for r in reply.results]
            elapsed = time.time() - started
        finally:
            common.stop_process(proc, 30)
        agree = sum(a == b for a, b in zip(got, expected)) / len(rows)
        accuracy = sum(a == r["label"] for a, r in zip(got, rows)) / len(rows)
        print(f"{dtype} daemon: {len(rows)} texts in {elapsed:.1f} s; agreement with PyTorch fp32 "
              f"{agree:.5f}; accuracy {accuracy:.4f}", flush=True)
        return agree, accuracy

    agree, accuracy = classify_all("float32")
    common.check(agree >= 0.999, f"daemon agrees with PyTorch on >= 99.9% ({agree:.5f})")
    common.check(accuracy >= 0.95, f"daemon accuracy >= 95% ({accuracy:.4f})")
    agree8, accuracy8 = classify_all("int8")
    common.check(agree8 >= 0.99, f"int8 daemon agrees with PyTorch fp32 on >= 99% ({agree8:.5f})")
    common.check(accuracy8 >= accuracy - 0.005,
                 f"int8 accuracy {accuracy8:.4f} within 0.5 points of fp32's {accuracy:.4f}")
    print(f"{len(common.FAILURES)} failure(s)")
    return 1 if common.FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
