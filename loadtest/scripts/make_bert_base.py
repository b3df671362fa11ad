#!/usr/bin/python3
"""Writes a BERT-base-shaped model directory for serving benchmarks: the
layout, tokenizer and vocabulary of the hf_bert_legacy test fixture, with
random weights of BERT-base size (12 layers, hidden 768, 12 heads, FFN 3072,
512 positions). Numbers measured on it say how fast that shape serves, not
anything about its outputs.

usage: make_bert_base.py --fixture build/fixtures/models/hf_bert_legacy --out DIR
"""
import argparse
import json
import pathlib
import re
import shutil

import torch

HIDDEN, LAYERS, HEADS, FFN = 768, 12, 12, 3072


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fixture", required=True, help="hf_bert_legacy fixture directory")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    src, out = pathlib.Path(args.fixture), pathlib.Path(args.out)
    config = json.loads((src / "config.json").read_text())
    small_h, small_ffn = config["hidden_size"], config["intermediate_size"]
    if small_h == small_ffn:
        raise SystemExit(f"{src}/config.json: hidden_size == intermediate_size, cannot map shapes")

    sd = torch.load(src / "pytorch_model.bin", map_location="cpu")
    gen = torch.Generator().manual_seed(args.seed)
    resize = {small_h: HIDDEN, small_ffn: FFN}
    big = {}
    for key, value in sd.items():
        m = re.match(r"(.*\.layer\.)(\d+)(\..*)", key)
        names = [key]
        if m:
            if m.group(2) != "0":
                continue  # every layer is rebuilt from layer 0's names
            names = [f"{m.group(1)}{i}{m.group(3)}" for i in range(LAYERS)]
        for name in names:
            if not value.is_floating_point():
                big[name] = value.clone()
                continue
            shape = [resize.get(d, d) for d in value.shape]
            if name.endswith("LayerNorm.weight"):
                big[name] = torch.ones(shape)
            elif name.endswith("LayerNorm.bias") or name.endswith(".bias"):
                big[name] = torch.zeros(shape)
            else:
                big[name] = torch.randn(shape, generator=gen) * 0.02

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for f in src.iterdir():
        if f.name not in ("pytorch_model.bin", "config.json"):
            shutil.copy(f, out / f.name)
    config.update(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  intermediate_size=FFN)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    torch.save(big, out / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    params = sum(v.numel() for v in big.values() if v.is_floating_point())
    print(f"wrote {out}: {params / 1e6:.1f} M parameters")


if __name__ == "__main__":
    main()
