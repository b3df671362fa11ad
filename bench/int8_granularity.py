#!/usr/bin/env python3
"""int8 activation scales per row (token) or per tensor (batch), measured on
the benchmark's checkpoint and token ids (docs/int8.md, "Per row or per
tensor"). Both quantize every Linear's weights as encoderd does (int8,
symmetric, per output channel) and its input to uint8 (asymmetric, the range
widened to hold 0); they differ only in whose range sets a scale: each
token's own, or every valid token's of the batch (padding excluded, as in
encoderd's packed batches). Computed in float64, so that what changes a
sequence's output between batches is the quantization alone, not the
summation order of a differently shaped GEMM (in fp32 that alone moves
per-row results by up to ~0.08 here, once a rounding of a quantized input
flips).

  /usr/bin/python3 bench/int8_granularity.py [--inputs build/bench-inputs] [--workload W1]

Prints, for each, the lowest and mean per-sequence cosine of the last hidden
states against fp32 and the largest error, over the whole workload run as
one batch; and how much a sequence's output changes between running in that
batch and running alone (per-row scales: not at all).
"""
import argparse
import json
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bert_torch import ExplicitBert, load_checkpoint, packed_rows, padded  # noqa: E402


def quantized_weight(w):
    scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-30) / 127
    return (w / scale).round().clamp(-127, 127) * scale


def quantized_input(x, lo, hi):
    """x with uint8 values over [lo, hi] (widened to hold 0); lo and hi
    broadcast against x."""
    lo, hi = lo.clamp(max=0), hi.clamp(min=0)
    scale = ((hi - lo) / 255).clamp_min(torch.finfo(x.dtype).tiny)
    zero = (-lo / scale).round().clamp(0, 255)
    q = ((x / scale).round() + zero).clamp(0, 255)
    return (q - zero) * scale


class QuantizedBert(ExplicitBert):
    """ExplicitBert with int8 Linears; granularity "row" or "tensor"."""

    def __init__(self, config, state, granularity):
        super().__init__(config, state)
        self.granularity = granularity
        self.valid = None  # [batch, length] bool, set before each forward
        self.qweights = [{name: quantized_weight(t[name + "_w"])
                          for name in ("qkv", "out", "in", "ffo")} for t in self.layers]

    def linear(self, i, name, x):
        if self.granularity == "row":
            xq = quantized_input(x, x.amin(-1, keepdim=True), x.amax(-1, keepdim=True))
        else:
            rows = x[self.valid]
            xq = quantized_input(x, rows.min(), rows.max())
        return torch.nn.functional.linear(xq, self.qweights[i][name], self.layers[i][name + "_b"])

    def forward(self, ids, attention_mask):
        self.valid = attention_mask.bool()
        return super().forward(ids, attention_mask)


def run(model, sequences):
    ids, mask = padded(sequences)
    with torch.inference_mode():
        return packed_rows(model(ids, mask), sequences)


def per_sequence_cosine(a, b, sequences):
    out, at = [], 0
    for s in sequences:
        x, y = a[at:at + len(s)].flatten(), b[at:at + len(s)].flatten()
        out.append(float(torch.nn.functional.cosine_similarity(x, y, dim=0)))
        at += len(s)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inputs", type=pathlib.Path, default=pathlib.Path("build/bench-inputs"))
    p.add_argument("--workload", default="W1")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    config, state = load_checkpoint(a.inputs / "model")
    state = {k: v.double() if v.is_floating_point() else v for k, v in state.items()}
    sequences = json.loads((a.inputs / "workloads.json").read_text())[a.workload]
    reference = run(ExplicitBert(config, state).double(), sequences)
    print(f"{a.workload}: {len(sequences)} sequences, {sum(map(len, sequences))} tokens")
    for granularity in ("row", "tensor"):
        model = QuantizedBert(config, state, granularity).double()
        batch = run(model, sequences)
        cos = per_sequence_cosine(batch, reference, sequences)
        alone = torch.cat([run(model, [s]) for s in sequences])
        print(f"per {granularity:6}: min cosine {min(cos):.5f}, mean {sum(cos) / len(cos):.5f}, "
              f"max abs error {float((batch - reference).abs().max()):.3g}; "
              f"a sequence alone vs in the batch: max difference "
              f"{float((alone - batch).abs().max()):.3g}")


if __name__ == "__main__":
    main()
