#!/usr/bin/env python3
"""What a daemon's memory and time do as it meets batch sizes it has not seen.

  /usr/bin/python3 bench/batch_sizes_memory.py [--encoderd build/cli/encoderd]
      [--model-dir build/bench-inputs/model] [--dtype float32] [--words 30-259]

Starts `encoderd serve` on the model directory (bench/make_inputs.py writes
a BERT-base one), sends one Embed of each length in --words (random words
of the model's vocab.txt, a fixed seed), one call at a time so that each is
a batch of its own, then the same calls again, and prints the daemon's RSS
before and after and the time of each pass. The first pass makes the oneDNN
primitives of each new row count (kernels/cpu/linear_cpu.cc, ChunkRows);
the second runs on them. docs/architecture.md has the figures.
"""
import argparse
import pathlib
import random
import socket
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import grpc  # noqa: E402

import client  # noqa: E402  (scripts/client.py: the stubs from proto/encoderd.proto)


def rss_mib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoderd", default=str(REPO / "build/cli/encoderd"))
    parser.add_argument("--model-dir", default=str(REPO / "build/bench-inputs/model"))
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--words", default="30-259", help="lengths of the calls, FIRST-LAST")
    args = parser.parse_args()
    first, last = (int(v) for v in args.words.split("-"))
    vocab = pathlib.Path(args.model_dir) / "vocab.txt"
    words = [w for w in vocab.read_text().split() if w.isalpha()]
    if not words:
        print(f"{vocab}: no words to send", file=sys.stderr)
        return 1
    port = free_port()
    daemon = subprocess.Popen(
        [args.encoderd, "serve", "--model-dir", args.model_dir, "--dtype", args.dtype,
         "--port", str(port), "--metrics", "false", "--log-level", "warn"],
        stdout=subprocess.DEVNULL)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            pb, pb_grpc = client.load_stubs(pathlib.Path(tmp))
            stub = pb_grpc.EncoderStub(grpc.insecure_channel(f"localhost:{port}"))
            for _ in range(300):
                if daemon.poll() is not None:
                    print(f"encoderd serve exited with {daemon.returncode}", file=sys.stderr)
                    return 1
                try:
                    stub.ModelInfo(pb.ModelInfoRequest(), timeout=2)
                    break
                except grpc.RpcError:
                    time.sleep(1)
            before = rss_mib(daemon.pid)
            passes = []
            for _ in range(2):
                rng = random.Random(1)
                start = time.monotonic()
                for n in range(first, last + 1):
                    text = " ".join(rng.choice(words) for _ in range(n))
                    stub.Embed(pb.EmbedRequest(texts=[text]), timeout=60)
                passes.append(time.monotonic() - start)
            print(f"{args.dtype}: RSS {before} -> {rss_mib(daemon.pid)} MiB over "
                  f"{last - first + 1} call lengths ({first}-{last} words); "
                  f"first pass {passes[0]:.2f} s, second {passes[1]:.2f} s")
    finally:
        daemon.terminate()
        daemon.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
