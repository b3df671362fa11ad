#!/usr/bin/env python3
"""Writes a DeBERTa-v3-base-shaped model for `encoderd bench --model`: a
Hugging Face DebertaV2ForSequenceClassification folder (config.json as the
DeBERTa-v3 checkpoints write it: 768 hidden, 12 layers and heads, 3072 ffn,
256 log buckets reaching 512, both disentangled terms, the relative
embeddings' LayerNorm, 128,100 tokens, 3 labels) with seeded random weights
at a trained model's scale, as model.safetensors, and the fixtures'
DeBERTa-layout spm.model; and the workloads of bench/make_inputs.py.

  /usr/bin/python3 bench/make_deberta.py OUT_DIR [SPM_MODEL]

OUT_DIR/model/ (config.json, model.safetensors, spm.model), OUT_DIR/workloads.json.
SPM_MODEL defaults to build/fixtures/tokenizers/spm/deberta.model (written by
`ctest -R generate_fixtures`). Then, as docs/architecture.md's figures:

  build/cli/encoderd bench --model OUT_DIR/model --inputs OUT_DIR/workloads.json \\
      --workloads W1,W2 --engines encoderd --dtypes float32,bfloat16 --threads 2 --min-seconds 3
"""
import json
import math
import pathlib
import shutil
import sys

import torch

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests/fixtures"))
import fx_models  # noqa: E402
import make_inputs  # noqa: E402

HIDDEN, LAYERS, HEADS, FFN, VOCAB, BUCKETS, LABELS = 768, 12, 12, 3072, 128100, 256, 3


def state_dict(seed=7):
    """DebertaV2ForSequenceClassification's tensors, seeded: Linear weights
    at 1.2 / sqrt(fan-in), LayerNorm gains around 1, embeddings at 0.5."""
    gen = torch.Generator().manual_seed(seed)
    sd = {}

    def linear(name, out_f, in_f):
        sd[name + ".weight"] = torch.randn(out_f, in_f, generator=gen) * (1.2 / math.sqrt(in_f))
        sd[name + ".bias"] = torch.randn(out_f, generator=gen) * 0.05

    def norm(name):
        sd[name + ".weight"] = 1 + torch.randn(HIDDEN, generator=gen) * 0.1
        sd[name + ".bias"] = torch.randn(HIDDEN, generator=gen) * 0.1

    sd["deberta.embeddings.word_embeddings.weight"] = torch.randn(VOCAB, HIDDEN,
                                                                 generator=gen) * 0.5
    norm("deberta.embeddings.LayerNorm")
    for i in range(LAYERS):
        p = f"deberta.encoder.layer.{i}."
        for part in ("query_proj", "key_proj", "value_proj"):
            linear(p + "attention.self." + part, HIDDEN, HIDDEN)
        linear(p + "attention.output.dense", HIDDEN, HIDDEN)
        norm(p + "attention.output.LayerNorm")
        linear(p + "intermediate.dense", FFN, HIDDEN)
        linear(p + "output.dense", HIDDEN, FFN)
        norm(p + "output.LayerNorm")
    sd["deberta.encoder.rel_embeddings.weight"] = torch.randn(2 * BUCKETS, HIDDEN,
                                                             generator=gen) * 0.5
    norm("deberta.encoder.LayerNorm")
    linear("pooler.dense", HIDDEN, HIDDEN)
    linear("classifier", LABELS, HIDDEN)
    return sd


def main():
    out = pathlib.Path(sys.argv[1])
    spm = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else (
        REPO / "build/fixtures/tokenizers/spm/deberta.model")
    model = out / "model"
    model.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "deberta-v2", "vocab_size": VOCAB, "hidden_size": HIDDEN,
              "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "intermediate_size": FFN, "hidden_act": "gelu", "max_position_embeddings": 512,
              "type_vocab_size": 0, "layer_norm_eps": 1e-7, "pad_token_id": 0,
              "relative_attention": True, "position_biased_input": False,
              "pos_att_type": ["p2c", "c2p"], "share_att_key": True, "position_buckets": BUCKETS,
              "max_relative_positions": -1, "norm_rel_ebd": "layer_norm",
              "pooler_hidden_size": HIDDEN, "pooler_hidden_act": "gelu", "pooler_dropout": 0,
              "id2label": {str(i): f"label_{i}" for i in range(LABELS)},
              "architectures": ["DebertaV2ForSequenceClassification"]}
    (model / "config.json").write_text(json.dumps(config, indent=1))
    fx_models._write_safetensors(state_dict(), model / "model.safetensors")
    shutil.copy(spm, model / "spm.model")
    # The same token ids as the BERT-base workloads (ids below 30,522).
    (out / "workloads.json").write_text(json.dumps(make_inputs.workloads(30522)))


if __name__ == "__main__":
    main()
