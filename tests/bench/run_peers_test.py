#!/usr/bin/env python3
"""bench/run_peers.py without a build or a model: its accuracy cross-check,
on outputs written here (a non-finite value, a token whose state is all
zeros, and one bad token of a long sequence each show: the per-sequence
cosine, max() and min() once let NaN read as 0 error and cosine 1, and one
bad token of 256 move the cosine by ~2e-4); which systems run with PyTorch's
tuned environment; how the machine limits' readings combine; the CPU it
names."""
import math
import pathlib
import sys
import tempfile
import types

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import run_peers  # noqa: E402

FAILURES = []


def check(condition, what):
    print(("ok: " if condition else "FAIL: ") + what, flush=True)
    if not condition:
        FAILURES.append(what)


def main():
    rng = np.random.default_rng(7)
    hidden, workloads = 8, {"W1": [[1] * 256, [2] * 3]}
    tokens = sum(len(s) for s in workloads["W1"])
    ref = rng.standard_normal((tokens, hidden)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        a = types.SimpleNamespace(out=pathlib.Path(tmp))

        def accuracy_of(got):
            for key, values in (("ref", ref), ("sys", got)):
                path = a.out / "outputs" / f"{key}.1"
                path.mkdir(parents=True, exist_ok=True)
                values.astype(np.float32).tofile(path / "W1.f32")
            return run_peers.accuracy(a, "sys", "ref", workloads)

        worst, lowest = accuracy_of(ref.copy())
        check(worst == 0 and abs(lowest - 1) < 1e-12, f"the reference itself: {worst}, {lowest}")
        nan = ref.copy()
        nan[5, 3] = np.nan
        worst, lowest = accuracy_of(nan)
        check(math.isinf(worst) and math.isnan(lowest), f"a NaN shows: {worst}, {lowest}")
        zero = ref.copy()
        zero[7] = 0
        worst, lowest = accuracy_of(zero)
        check(math.isinf(worst) and math.isnan(lowest), f"an all-zero token shows: {worst}, {lowest}")
        bad = ref.copy()
        bad[100] = -bad[100]  # one token of the 256-token sequence flipped
        worst, lowest = accuracy_of(bad)
        check(lowest < -0.99, f"one bad token of 256 sets the lowest cosine ({lowest:.4f})")
    # Every PyTorch process but the "Debian defaults" row runs with the tuned
    # environment, the in-process LibTorch rows too (until 2026-12-07 they ran
    # with the defaults, and so as slow on W2 as that row).
    chosen = run_peers.systems(types.SimpleNamespace(
        encoderd="build/cli/encoderd", inputs=pathlib.Path("in"), threads=2, workloads="W1,W2",
        min_seconds=3.0, with_inprocess=True, only=None))
    for key, label, _, _, env in chosen:
        tuned = env == run_peers.PYTORCH_ENV
        if key.startswith("encoderd") or key.startswith("ort"):
            check(env == {}, f"{key} runs in the environment as it is")
        else:
            check(tuned == (key != "pytorch-nested-defaults"),
                  f"{key} ({label}) runs with PYTORCH_ENV: {tuned}")
    check(sum(key.startswith("inprocess") for key, *_ in chosen) == 2,
          "--with-inprocess adds the two in-process rows")
    # machine_limits lists its readers over 2 MiB pages only when the kernel
    # granted them, so readings may name different readers.
    def reading(peak, gbs, readers):
        return {"gemm": {"float32": {"peak_gflops": peak}}, "read_bandwidth_gbs": gbs,
                "read_bandwidth_readers_gbs": readers}
    limits = run_peers.combined_limits([
        reading(400.0, 60.0, {"scalar": 50.0, "avx512": 60.0}),
        reading(420.0, 70.0, {"scalar": 52.0, "avx512": 58.0, "avx512_2m": 70.0}),
        reading(440.0, 80.0, {"scalar": 54.0, "avx512": 62.0, "avx512_2m": 80.0})])
    check(limits["read_bandwidth_readers_gbs"] == {"scalar": 52.0, "avx512": 60.0,
                                                   "avx512_2m": 75.0},
          f"each reader's mean over the readings that have it: "
          f"{limits['read_bandwidth_readers_gbs']}")
    check(limits["read_bandwidth_gbs"] == 70.0 and limits["gemm"]["float32"]["peak_gflops"] == 420.0,
          "the read bandwidth and GEMM peak are the readings' means")
    check(limits["read_huge_pages_readings"] == [False, False, False] and
          run_peers.huge_pages_text(limits["read_huge_pages_readings"]) ==
          "no 2 MiB pages granted: 4 KiB pages only",
          f"readings without read_huge_pages count as 4 KiB pages only "
          f"({limits['read_huge_pages_readings']})")
    check(run_peers.huge_pages_text([True, False, True]) == "2 MiB pages granted in 2 of 3 readings",
          "a report says in how many readings 2 MiB pages were granted")
    check(run_peers.huge_pages_text([]) == "", "a run recorded without read_huge_pages says nothing")
    two_cpus = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
                "model name\t: AMD EPYC\nstepping\t: 1\n\nprocessor\t: 1\ncpu family\t: 25\n")
    check(run_peers.cpu_identity(two_cpus) == "AMD EPYC (cpu family 26, model 2, stepping 1)",
          f"the machine names the first CPU's family, model and stepping "
          f"({run_peers.cpu_identity(two_cpus)})")
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
