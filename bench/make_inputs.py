#!/usr/bin/env python3
"""Writes what every system in the benchmark reads: one BERT-base-shaped
checkpoint (Hugging Face layout, seeded random weights, legacy torch.save),
the token ids of each workload, and the same weights exported to ONNX.

  /usr/bin/python3 bench/make_inputs.py OUT_DIR

OUT_DIR/model/ (config.json, pytorch_model.bin, vocab.txt), OUT_DIR/workloads.json
({"W1": [[ids...], ...], ...}), OUT_DIR/model.onnx (inputs input_ids and
attention_mask [batch, length] int64, output last_hidden_state).
"""
import json
import pathlib
import random
import subprocess
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bert_torch  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent


def workloads(vocab):
    """W1 = 32 sequences of 16..256 tokens, W2 = 4 and 6 tokens, W3 = 64 x 128,
    W4 = 4 x 512, W5 = 256 sequences of 16..512 tokens (the GPU batch); ids
    uniform in [5, vocab), fixed seeds."""
    rng = random.Random(1234)
    lengths = {
        "W1": [rng.randint(16, 256) for _ in range(32)],
        "W2": [4, 6],
        "W3": [128] * 64,
        "W4": [512] * 4,
    }
    out = {name: [[rng.randrange(5, vocab) for _ in range(n)] for n in ls]
           for name, ls in lengths.items()}
    # W5 (the GPU workload) draws from its own generator: W1..W4 stay as they were.
    rng5 = random.Random(5678)
    out["W5"] = [[rng5.randrange(5, vocab) for _ in range(rng5.randint(16, 512))]
                 for _ in range(256)]
    return out


def main():
    out = pathlib.Path(sys.argv[1])
    model = out / "model"
    if not (model / "pytorch_model.bin").exists():
        subprocess.run([sys.executable, str(REPO / "tests/fixtures/make_bert_base.py"), str(model)],
                       check=True)
    config, state = bert_torch.load_checkpoint(model)
    (out / "workloads.json").write_text(json.dumps(workloads(config["vocab_size"])))
    onnx_path = out / "model.onnx"
    # Exported again when the checkpoint is newer: ONNX Runtime must run the
    # weights every other system loads.
    checkpoint = model / "pytorch_model.bin"
    if not onnx_path.exists() or onnx_path.stat().st_mtime < checkpoint.stat().st_mtime:
        net = bert_torch.ExplicitBert(config, state).eval()
        ids, mask = bert_torch.padded([[7, 8, 9], [10, 11]])
        torch.onnx.export(net, (ids, mask), str(onnx_path), opset_version=14,
                          input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "length"},
                                        "attention_mask": {0: "batch", 1: "length"},
                                        "last_hidden_state": {0: "batch", 1: "length"}})
    print(f"wrote {model}, {out / 'workloads.json'}, {onnx_path}")


if __name__ == "__main__":
    main()
