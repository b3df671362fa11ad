#!/usr/bin/env python3
"""Server CPU for one request holding a single huge word, through the daemon.

Starts `encoderd serve` on the default model (langid), sends one text of one
long word (no spaces) of each kind, as large as the 4 MiB message limit
allows, to Tokenize and Embed with and without truncation, and prints the
daemon's CPU seconds (/proc/PID/stat) spent on each call and the answer.
Benchmark, not a test: the figures go in docs/reliability.md.

    /usr/bin/python3 loadtest/scripts/hostile_word.py [--binary build/cli/encoderd]
"""
import argparse
import pathlib
import sys
import tempfile
import time

import grpc

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from e2e_common import generate_stubs, proc_cpu_seconds, start_daemon, wait_serving  # noqa: E402

WORDS = {
    "'a' run": "a",
    "mixed scripts": "abcxyz\u00e4\u00f6\u00fc\u65e5\u672c\u0436",
    "CJK run": "\u4eca\u5929\u5929\u6c14\u5f88\u597d",
    "emoji + ZWJ": "\U0001F468\u200d\U0001F469\u200d\U0001F467",
}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default=str(REPO / "build" / "cli" / "encoderd"))
    p.add_argument("--model-dir", default=str(REPO / "models" / "langid"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        generate_stubs(REPO, tmp)
        from proto import encoderd_pb2 as pb, encoderd_pb2_grpc as pb_grpc  # noqa: E402
        from health_v1 import health_pb2, health_pb2_grpc  # noqa: E402
        daemon = start_daemon(args.binary, ["--model-name", "langid", "--model-dir", args.model_dir],
                              tmp / "serve.log")
        try:
            channel = grpc.insecure_channel(f"127.0.0.1:{daemon.port}")
            if not wait_serving(health_pb2, health_pb2_grpc.HealthStub(channel), [""]):
                raise SystemExit("daemon not SERVING")
            stub = pb_grpc.EncoderStub(channel)
            stub.Embed(pb.EmbedRequest(texts=["warm up"]), timeout=30)
            budget = 4 * 1024 * 1024 - 1024  # the message, less its framing
            print("| word | bytes | RPC | truncate | answer | server CPU s |\n|---|---:|---|---|---|---:|")
            for name, unit in WORDS.items():
                word = unit * (budget // len(unit.encode()))
                size = len(word.encode())
                calls = [("Tokenize", lambda t: stub.Tokenize(pb.TokenizeRequest(texts=[word], truncate=t),
                                                              timeout=60)),
                         ("Embed", lambda t: stub.Embed(pb.EmbedRequest(texts=[word], truncate=t), timeout=60))]
                for rpc, call in calls:
                    for truncate in (True, False):
                        time.sleep(0.2)  # let the previous call's threads settle
                        cpu0 = proc_cpu_seconds(daemon.proc.pid)
                        try:
                            call(truncate)
                            answer = "OK"
                        except grpc.RpcError as e:
                            answer = e.code().name
                        time.sleep(0.1)
                        cpu = proc_cpu_seconds(daemon.proc.pid) - cpu0
                        print(f"| {name} | {size:,} | {rpc} | {truncate} | {answer} | {cpu:.3f} |", flush=True)
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
