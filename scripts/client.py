#!/usr/bin/env python3
"""A minimal encoderd client, for trying the daemon from a shell.

  /usr/bin/python3 scripts/client.py classify "Bonjour tout le monde" "Buenos días"
  /usr/bin/python3 scripts/client.py embed --pooling mean "some text"
  /usr/bin/python3 scripts/client.py embed --normalize --dimensions 64 "some text"
  /usr/bin/python3 scripts/client.py info
  /usr/bin/python3 scripts/client.py rerank --model cross "how do foxes hunt" "text 1" "text 2"
  /usr/bin/python3 scripts/client.py classify --pair "second text" "first text"

Python stubs are generated from proto/encoderd.proto on the fly with protoc
and grpc_python_plugin (Debian: protobuf-compiler, protobuf-compiler-grpc,
python3-grpcio, python3-protobuf).
"""
import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile

import grpc

REPO = pathlib.Path(__file__).resolve().parent.parent


def load_stubs(out_dir: pathlib.Path):
    plugin = shutil.which("grpc_python_plugin")
    if plugin is None:
        sys.exit("client.py: grpc_python_plugin not found (apt-get install protobuf-compiler-grpc)")
    subprocess.run(["protoc", f"-I{REPO}", f"--python_out={out_dir}", f"--grpc_out={out_dir}",
                    f"--plugin=protoc-gen-grpc={plugin}", "proto/encoderd.proto"], check=True)
    sys.path.insert(0, str(out_dir))
    from proto import encoderd_pb2, encoderd_pb2_grpc  # noqa: E402
    return encoderd_pb2, encoderd_pb2_grpc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--address", default="127.0.0.1:50051")
    parser.add_argument("--model", default="")
    poolings = ["default", "cls", "mean", "max", "mean_sqrt_len", "weighted_mean", "last_token"]
    parser.add_argument("--pooling", choices=poolings, default="default")
    parser.add_argument("--pair", action="append", default=[],
                        help="classify/embed: the second text of each pair (once per text)")
    parser.add_argument("--normalize", action="store_true", help="embed: unit-length embeddings")
    parser.add_argument("--dimensions", type=int, default=0,
                        help="embed: only the first N values of each embedding (0: all)")
    parser.add_argument("--prompt-name", default="",
                        help="one of the model's prompts (info lists them); default: its default")
    parser.add_argument("command", choices=["classify", "embed", "info", "rerank"],
                        help="rerank: the first text is the query, the others are scored")
    parser.add_argument("texts", nargs="*")
    args = parser.parse_intermixed_args()
    with tempfile.TemporaryDirectory() as tmp:
        pb, pb_grpc = load_stubs(pathlib.Path(tmp))
        stub = pb_grpc.EncoderStub(grpc.insecure_channel(args.address))
        if args.command == "info":
            print(stub.ModelInfo(pb.ModelInfoRequest(), timeout=10))
            return 0
        if args.command == "rerank":
            if len(args.texts) < 2:
                sys.exit("client.py rerank: give a query and at least one text")
            reply = stub.Rerank(pb.RerankRequest(query=args.texts[0], texts=args.texts[1:],
                                                 model=args.model, truncate=True,
                                                 prompt_name=args.prompt_name), timeout=10)
            for r in reply.results:
                print(f"{r.score:.4f}  {args.texts[1 + r.index]!r}")
        elif args.command == "classify":
            reply = stub.Classify(pb.ClassifyRequest(texts=args.texts, text_pairs=args.pair,
                                                     model=args.model, truncate=True,
                                                     prompt_name=args.prompt_name), timeout=10)
            labels = stub.ModelInfo(pb.ModelInfoRequest(model=reply.model), timeout=10).models[0].labels
            for text, result in zip(args.texts, reply.results):
                top = sorted(zip(result.scores, labels), reverse=True)[:3]
                print(f"{result.label}  {text!r}  (" + ", ".join(f"{l} {p:.3f}" for p, l in top) + ")")
        else:
            pooling = poolings.index(args.pooling)  # encoderd.v1.Pooling's values
            reply = stub.Embed(pb.EmbedRequest(texts=args.texts, text_pairs=args.pair, model=args.model,
                                               truncate=True, pooling=pooling,
                                               normalize=args.normalize, dimensions=args.dimensions,
                                               prompt_name=args.prompt_name), timeout=10)
            for text, e in zip(args.texts, reply.embeddings):
                print(f"{text!r}: [{', '.join(f'{v:.4f}' for v in e.values[:6])}, ...] ({len(e.values)} values)")
        t = reply.timing
        print(f"tokens {reply.token_count}; server time: tokenize {t.tokenize_us} us, queue {t.queue_us} us, "
              f"inference {t.inference_us} us, total {t.total_us} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
