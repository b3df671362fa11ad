#!/usr/bin/env python3
"""What a cancelled batch costs the calls behind it, and a shutdown. Starts
`encoderd serve` on MODEL_DIR (2 threads, shutdown grace 1 s), then:
  1. times one full batch alone (32 texts of 254 words, truncated to the
     model's limit);
  2. twice: sends that batch, cancels it 0.5 s later, and times a one-text
     call sent right after the cancel;
  3. sends the batch again, SIGTERMs the daemon 0.5 s later and times its exit.

  /usr/bin/python3 bench/cancel_running.py BUILD/cli/encoderd MODEL_DIR

MODEL_DIR: e.g. tests/fixtures/make_bert_base.py's BERT-base-shaped folder.
"""
import pathlib
import random
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import e2e_common as ec  # noqa: E402
import grpc  # noqa: E402


def main():
    binary, model = sys.argv[1], sys.argv[2]
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="encoderd_cancel_"))
    (tmp / "stubs").mkdir()
    ec.generate_stubs(str(ROOT), tmp / "stubs")
    from proto import encoderd_pb2 as pb, encoderd_pb2_grpc as pb_grpc
    words = [w.strip() for w in open(f"{model}/vocab.txt") if w.strip().isalpha()][:800]
    rng = random.Random(1)
    big = pb.EmbedRequest(texts=[" ".join(rng.choice(words) for _ in range(254))
                                 for _ in range(32)], truncate=True)
    small = pb.EmbedRequest(texts=["hello world"])
    daemon = ec.start_daemon(binary, ["--model-dir", model, "--model-name", "m", "--num-threads",
                                      "2", "--shutdown-grace-s", "1"], tmp / "log")
    stub = pb_grpc.EncoderStub(grpc.insecure_channel(f"127.0.0.1:{daemon.port}"))
    while True:  # until the model serves
        try:
            stub.Embed(small, timeout=60)
            break
        except grpc.RpcError:
            time.sleep(0.5)
    t = time.perf_counter()
    tokens = stub.Embed(big, timeout=120).token_count
    print(f"one full batch alone: {time.perf_counter() - t:.2f} s, {tokens} tokens")
    for i in range(2):
        victim = stub.Embed.future(big, timeout=120)
        time.sleep(0.5)
        victim.cancel()
        t = time.perf_counter()
        stub.Embed(small, timeout=120)
        print(f"round {i}: a one-text call sent after the cancel answered in "
              f"{time.perf_counter() - t:.2f} s")
    print(f"encoderd_batch_abandoned_total {daemon.metric('encoderd_batch_abandoned_total')}")
    stub.Embed.future(big, timeout=120)
    time.sleep(0.5)
    t = time.perf_counter()
    daemon.proc.terminate()
    daemon.proc.wait(timeout=120)
    print(f"SIGTERM with a full batch running (grace 1 s): exit after "
          f"{time.perf_counter() - t:.2f} s, status {daemon.proc.returncode}")


if __name__ == "__main__":
    main()
