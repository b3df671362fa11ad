#!/usr/bin/env python3
"""PyTorch on the GPU as its users run it, one path per process, on the
benchmark's checkpoint and token ids (bench/make_inputs.py):

  python3 bench/peer_pytorch_gpu.py --inputs DIR --mode nested --dtype float16 \
      --workloads W1,W2,W5 --outputs OUT_DIR

Modes: nested (nn.TransformerEncoder in eval under inference_mode with
enable_nested_tensor: the padded batch becomes a nested tensor, the
BetterTransformer fastpath), hf-sdpa (Hugging Face BertModel with
attn_implementation="sdpa" on the padded batch and its attention mask).
dtype float32 runs with TF32 off: the reference the 16-bit rows are compared
with. Each forward is timed with CUDA events (device time, output left on the
GPU) and, separately, with the copy of the valid rows to the host as float32
(what encoderd's timed forward includes). Prints one JSON line per workload
(medians in ms) and writes the valid rows, float32, to OUT_DIR/<workload>.f32.
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


def hf_bert(config, state, dtype):
    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
                     num_hidden_layers=config["num_hidden_layers"],
                     num_attention_heads=config["num_attention_heads"],
                     intermediate_size=config["intermediate_size"], hidden_act="gelu",
                     max_position_embeddings=config["max_position_embeddings"],
                     type_vocab_size=config.get("type_vocab_size", 2),
                     layer_norm_eps=config["layer_norm_eps"], hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    try:  # transformers 4.x takes it here; 5.x reads it from the config
        model = BertModel(cfg, add_pooling_layer=False, attn_implementation="sdpa")
    except TypeError:
        cfg._attn_implementation = "sdpa"
        model = BertModel(cfg, add_pooling_layer=False)
    if model.config._attn_implementation != "sdpa":
        raise SystemExit(f"hf-sdpa: BertModel runs {model.config._attn_implementation!r}")
    own = {k[len("bert."):]: v for k, v in state.items() if k.startswith("bert.")}
    missing, unexpected = model.load_state_dict(own, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing:
        raise SystemExit(f"hf-sdpa: weights missing from the checkpoint: {missing}")
    return model.to(dtype)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--inputs", required=True)
    p.add_argument("--mode", choices=["nested", "hf-sdpa"], required=True)
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float16")
    p.add_argument("--workloads", default="W1,W2,W5")
    p.add_argument("--min-seconds", type=float, default=2.0)
    p.add_argument("--min-runs", type=int, default=10)
    p.add_argument("--outputs")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    inputs = pathlib.Path(a.inputs)
    config, state = bert_torch.load_checkpoint(inputs / "model")
    workloads = json.loads((inputs / "workloads.json").read_text())
    dtype = getattr(torch, a.dtype)
    if a.mode == "nested":
        net = bert_torch.TransformerEncoderBert(config, state, nested=True).to(dtype)
    else:
        net = hf_bert(config, state, dtype)
    del state
    net = net.to(dev).eval()
    for name in a.workloads.split(","):
        sequences = workloads[name]
        ids, mask = bert_torch.padded(sequences)
        ids, mask = ids.to(dev), mask.to(dev)

        def forward():
            out = net(ids, mask)
            if a.mode == "hf-sdpa":
                out = out.last_hidden_state
            return out

        with torch.inference_mode():
            for _ in range(3):
                out = forward()  # warm-up
            torch.cuda.synchronize()
            device_ms, copy_ms = [], []
            start = time.perf_counter()
            while len(device_ms) < a.min_runs or time.perf_counter() - start < a.min_seconds:
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                out = forward()
                end.record()
                end.synchronize()
                device_ms.append(begin.elapsed_time(end))
            start = time.perf_counter()
            while len(copy_ms) < a.min_runs or time.perf_counter() - start < a.min_seconds:
                t0 = time.perf_counter()
                out = forward()
                if out.is_nested:
                    out = out.to_padded_tensor(0.0)
                rows = bert_torch.packed_rows(out, sequences).cpu()
                copy_ms.append((time.perf_counter() - t0) * 1000)
            if a.outputs:
                path = pathlib.Path(a.outputs)
                path.mkdir(parents=True, exist_ok=True)
                rows.numpy().tofile(path / f"{name}.f32")
        print(json.dumps({"workload": name, "mode": a.mode, "dtype": a.dtype,
                          "tokens": sum(len(s) for s in sequences),
                          "ms": statistics.median(device_ms),
                          "ms_with_copy": statistics.median(copy_ms),
                          "runs_ms": device_ms}), flush=True)
    info = {"torch": torch.__version__, "cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name()}
    if a.mode == "hf-sdpa":
        import transformers
        info["transformers"] = transformers.__version__
        info["attn_implementation"] = net.config._attn_implementation
    print(json.dumps(info), flush=True)


if __name__ == "__main__":
    main()
