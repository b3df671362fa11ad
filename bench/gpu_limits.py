#!/usr/bin/env python3
"""The GPU's measured ceilings, beside which the benchmark's figures are read:
device memory bandwidth (a device-to-device copy, bytes read + written),
pinned host<->device copies, and the dense GEMM rate per dtype (8192^3 and
the BERT-base Linear shapes at W5's token count), through PyTorch.

  python3 bench/gpu_limits.py [--tokens 72336]

Prints one JSON object.
"""
import argparse
import json
import statistics

import torch


def timed(fn, reps=20, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        b.record()
        fn()
        e.record()
        e.synchronize()
        times.append(b.elapsed_time(e))
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=72336)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    n = 1 << 30  # bytes
    src = torch.randn(n // 4, device="cuda")
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src))
    out["d2d_copy_GBps_read_plus_write"] = 2 * n / ms / 1e6
    host = torch.empty(n // 4, pin_memory=True)
    out["h2d_pinned_GBps"] = n / timed(lambda: src.copy_(host, non_blocking=True), reps=5) / 1e6
    out["d2h_pinned_GBps"] = n / timed(lambda: host.copy_(src, non_blocking=True), reps=5) / 1e6
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(8192, 8192, device="cuda", dtype=dtype)
        y = torch.randn(8192, 8192, device="cuda", dtype=dtype)
        ms = timed(lambda: x @ y)
        name = str(dtype).split(".")[1]
        out[f"gemm_8192_{name}_TFLOPs"] = 2 * 8192**3 / ms / 1e9
        shapes = {}
        for k, nn_ in ((768, 2304), (768, 768), (768, 3072), (3072, 768)):
            a_ = torch.randn(a.tokens, k, device="cuda", dtype=dtype)
            w = torch.randn(nn_, k, device="cuda", dtype=dtype)
            ms = timed(lambda: torch.nn.functional.linear(a_, w))
            shapes[f"{a.tokens}x{k}->{nn_}"] = 2 * a.tokens * k * nn_ / ms / 1e9
        out[f"gemm_bert_{name}_TFLOPs"] = shapes
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
