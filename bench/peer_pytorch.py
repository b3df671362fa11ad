#!/usr/bin/env python3
"""PyTorch as its users run it: a Python process (Debian python3-torch),
the benchmark's checkpoint in nn.TransformerEncoder, one path per process.

  /usr/bin/python3 bench/peer_pytorch.py --inputs DIR --mode nested --dtype bfloat16 \
      --threads 2 --workloads W1,W2 --min-seconds 3 --outputs OUT_DIR

Modes: slow (train mode with dropout 0 under no_grad: the layer as separate
ops, as in the BetterTransformer tutorial), fastpath (eval, inference_mode,
padded batch with a key padding mask), nested (eval, inference_mode,
enable_nested_tensor: the padded batch becomes a nested tensor),
dynamic-int8 (torch.ao.quantization.quantize_dynamic on the model's nn.Linear
layers, as PyTorch's BERT quantization tutorial does: int8 weights,
activations quantized per batch; the x86 engine Debian's PyTorch has is
oneDNN's, it has no FBGEMM; padded batch). Prints one
JSON line per workload (median and every timed forward, in ms) and writes the
valid rows of each output, float32, to OUT_DIR/<workload>.f32.
"""
import argparse
import json
import pathlib
import statistics
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bert_torch  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--inputs", required=True)
    p.add_argument("--mode", choices=["slow", "fastpath", "nested", "dynamic-int8"],
                   required=True)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--workloads", default="W1,W2")
    p.add_argument("--min-seconds", type=float, default=3.0)
    p.add_argument("--min-runs", type=int, default=3)
    p.add_argument("--outputs")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    inputs = pathlib.Path(a.inputs)
    config, state = bert_torch.load_checkpoint(inputs / "model")
    workloads = json.loads((inputs / "workloads.json").read_text())
    if a.mode == "dynamic-int8":
        torch.backends.quantized.engine = "onednn"
        net = torch.ao.quantization.quantize_dynamic(
            bert_torch.ExplicitBert(config, state, linear_modules=True).eval(),
            {torch.nn.Linear}, dtype=torch.qint8)
    else:
        net = bert_torch.TransformerEncoderBert(config, state, nested=a.mode == "nested")
        net = net.to(getattr(torch, a.dtype))
    del state
    if a.mode == "slow":
        net.train()
        context = torch.no_grad
    else:
        net.eval()
        context = torch.inference_mode
    for name in a.workloads.split(","):
        sequences = workloads[name]
        ids, mask = bert_torch.padded(sequences)
        with context():
            out = net(ids, mask)  # warm-up
            times = []
            start = time.perf_counter()
            while len(times) < a.min_runs or time.perf_counter() - start < a.min_seconds:
                t0 = time.perf_counter()
                out = net(ids, mask)
                times.append((time.perf_counter() - t0) * 1000)
            if a.outputs:
                path = pathlib.Path(a.outputs)
                path.mkdir(parents=True, exist_ok=True)
                if out.is_nested:
                    out = out.to_padded_tensor(0.0)
                bert_torch.packed_rows(out, sequences).numpy().tofile(path / f"{name}.f32")
        print(json.dumps({"workload": name, "tokens": sum(len(s) for s in sequences),
                          "ms": statistics.median(times), "runs_ms": times}), flush=True)
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "parallel": torch.__config__.parallel_info().splitlines()[0:4]}), flush=True)


if __name__ == "__main__":
    main()
