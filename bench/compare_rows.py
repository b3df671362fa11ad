#!/usr/bin/env python3
"""Per-sequence agreement of two files of packed rows (float32, the valid
rows of each sequence in order, as encoderd bench --outputs and the peers
write them) for one workload:

  python3 bench/compare_rows.py --inputs DIR --workload W1 --hidden 768 REF.f32 OTHER.f32...

Prints, per file, the lowest per-sequence cosine similarity to REF, the max
abs difference and the largest |REF| (the activation scale).
"""
import argparse
import json
import pathlib

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--inputs", required=True)
    p.add_argument("--workload", required=True)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("files", nargs="+")
    a = p.parse_args()
    lengths = [len(s) for s in json.loads(
        (pathlib.Path(a.inputs) / "workloads.json").read_text())[a.workload]]
    ref = np.fromfile(a.files[0], dtype=np.float32).reshape(-1, a.hidden).astype(np.float64)
    for f in a.files[1:]:
        got = np.fromfile(f, dtype=np.float32).reshape(-1, a.hidden).astype(np.float64)
        if got.shape != ref.shape:
            print(json.dumps({"file": f, "error": f"shape {got.shape} vs {ref.shape}"}))
            continue
        lowest, offset = 1.0, 0
        for n in lengths:
            x, y = ref[offset:offset + n].ravel(), got[offset:offset + n].ravel()
            lowest = min(lowest, float(x @ y / np.sqrt((x @ x) * (y @ y) + 1e-30)))
            offset += n
        print(json.dumps({"workload": a.workload, "file": f, "min_cosine": lowest,
                          "max_abs_diff": float(np.abs(got - ref).max()),
                          "scale": float(np.abs(ref).max()),
                          "finite": bool(np.isfinite(got).all())}))


if __name__ == "__main__":
    main()
