#!/usr/bin/python3
"""Soak test of `encoderd serve` (not part of ctest): starts a daemon, finds
its saturation throughput on a mixed workload (or takes --rate), then offers
--fraction (default 70%) of it, open loop, for --minutes (default 30).

The workload mixes successful Embed calls with cancels (at once and after
a few ms), 1 ms deadlines, invalid arguments and an unknown model; every call
must get the code its kind expects. Every 10 s the daemon's RSS, threads and
open fds (from /proc/PID) go to a CSV. At the end it prints RSS after warm-up
vs at the end, threads/fds first/last/max and idle before/after, and the
outcome counts, and exits 1 when RSS grew >= 5%, threads or fds grew, any call
got an unexpected code, or request state was left behind.

usage: loadtest/scripts/soak.py [--binary build/server/encoderd]
       [--model-dir models/langid] [--minutes 30] [--warmup-minutes 2]
       [--rate R] [--csv soak.csv]
Use /usr/bin/python3 (Debian's python3-grpcio).
"""
import argparse
import csv
import heapq
import pathlib
import random
import sys
import tempfile
import threading
import time

import grpc

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from e2e_common import (generate_stubs, metric_value, proc_fds, proc_rss_bytes,  # noqa: E402
                        proc_threads, start_daemon, wait_serving)

Code = grpc.StatusCode
SENTENCE = "the quick brown fox jumps over the lazy dog and keeps running far away "
# Kind: (share of calls, expected code). A cancel that loses the race with
# the answer must have got OK.
KINDS = {"ok": (0.70, Code.OK), "cancel_queued": (0.06, Code.CANCELLED),
         "cancel_running": (0.06, Code.CANCELLED), "tiny_deadline": (0.06, Code.DEADLINE_EXCEEDED),
         "invalid": (0.06, Code.INVALID_ARGUMENT), "unknown_model": (0.06, Code.NOT_FOUND)}
THREAD_SLACK = 2  # gRPC's own pollers
FD_SLACK = 2


class Outcomes:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.unexpected = []
        self.done = 0

    def record(self, kind, got, want):
        with self.lock:
            key = (kind, got.name)
            self.counts[key] = self.counts.get(key, 0) + 1
            self.done += 1
            if got != want:
                self.unexpected.append((kind, got.name, want.name))


class Load:
    """Sends calls of random kinds; completions are recorded by callbacks."""

    def __init__(self, pb, stub, seed):
        self.pb, self.stub = pb, stub
        self.rng = random.Random(seed)
        self.names = list(KINDS)
        self.weights = [KINDS[k][0] for k in self.names]
        self.medium = [SENTENCE * 3] * 16
        self.outcomes = Outcomes()
        self.cancels = []  # heap of (when, seq, future, kind)
        self.seq = 0
        self.in_flight = 0
        self.lock = threading.Lock()

    def request(self, kind, i):
        pb = self.pb
        if kind == "ok":
            return pb.EmbedRequest(texts=[f"soak text number {i} " + SENTENCE[: 10 + i % 50]]), 30
        if kind == "invalid":
            return pb.EmbedRequest(texts=[]), 30
        if kind == "unknown_model":
            return pb.EmbedRequest(texts=["a"], model="no-such-model"), 30
        if kind == "tiny_deadline":
            return pb.EmbedRequest(texts=self.medium), 0.001
        return pb.EmbedRequest(texts=self.medium), 30

    def send(self):
        kind = self.rng.choices(self.names, self.weights)[0]
        self.seq += 1
        request, timeout = self.request(kind, self.seq)
        future = self.stub.Embed.future(request, timeout=timeout)
        state = {"want": KINDS[kind][1]}
        with self.lock:
            self.in_flight += 1

        def done(f):
            try:
                f.result()
                got = Code.OK
            except grpc.FutureCancelledError:
                got = Code.CANCELLED
            except grpc.RpcError as e:
                got = e.code()
            want = state["want"]
            # The answer can arrive before run_cancels() gets to the call
            # (this callback then runs before cancel() is tried): the cancel
            # lost the race, and OK is the right answer.
            if kind.startswith("cancel") and got == Code.OK:
                want = Code.OK
            self.outcomes.record(kind, got, want)
            with self.lock:
                self.in_flight -= 1
        if kind.startswith("cancel"):
            delay = 0 if kind == "cancel_queued" else 0.005
            heapq.heappush(self.cancels, (time.perf_counter() + delay, self.seq, future, state))
        future.add_done_callback(done)

    def run_cancels(self, now):
        while self.cancels and self.cancels[0][0] <= now:
            _, _, future, state = heapq.heappop(self.cancels)
            if not future.cancel():
                state["want"] = Code.OK

    def open_loop(self, rate, seconds, on_tick=None):
        start = time.perf_counter()
        next_send = start
        while True:
            now = time.perf_counter()
            if now - start >= seconds:
                break
            self.run_cancels(now)
            while next_send <= now:
                self.send()
                next_send += self.rng.expovariate(rate)
            if on_tick:
                on_tick(now - start, False)
            time.sleep(max(0.0, min(next_send, self.cancels[0][0] if self.cancels else next_send) -
                           time.perf_counter()))
        if on_tick:
            on_tick(time.perf_counter() - start, True)  # the last sample, at the end
        self.drain()

    def closed_loop(self, clients, seconds):
        """`clients` calls kept in flight for `seconds`; returns completed/s."""
        start = time.perf_counter()
        done0 = self.outcomes.done
        while time.perf_counter() - start < seconds:
            self.run_cancels(time.perf_counter())
            while self.in_flight < clients:
                self.send()
            time.sleep(0.0005)
        elapsed = time.perf_counter() - start
        rate = (self.outcomes.done - done0) / elapsed
        self.drain()
        return rate

    def drain(self):
        while self.in_flight > 0 or self.cancels:
            self.run_cancels(time.perf_counter())
            time.sleep(0.001)


def idle_state(daemon):
    text = daemon.metrics_text()
    return tuple(metric_value(text, n) for n in ("encoderd_live_requests", "encoderd_in_flight_requests",
                                                 "encoderd_queue_depth",
                                                 "encoderd_concurrency_slots_in_use"))


def settle(daemon, pid, timeout=15):
    """Waits for the daemon to be idle; returns (threads, fds, idle_state)."""
    end = time.time() + timeout
    best = None
    while time.time() < end:
        state = idle_state(daemon)
        sample = (proc_threads(pid), proc_fds(pid), state)
        if best is None or sample[:2] < best[:2]:
            best = sample
        if state == (0, 0, 0, 0) and time.time() > end - timeout + 2:
            return sample if sample[:2] <= best[:2] else best
        time.sleep(0.2)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", default=str(REPO / "build" / "server" / "encoderd"))
    p.add_argument("--model-dir", default=str(REPO / "models" / "langid"))
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--warmup-minutes", type=float, default=2,
                   help="RSS is compared from this point of the run to its end")
    p.add_argument("--rate", type=float, help="offered calls/s (default: fraction x saturation)")
    p.add_argument("--fraction", type=float, default=0.7)
    p.add_argument("--probe-seconds", type=float, default=15)
    p.add_argument("--clients", type=int, default=64, help="closed-loop calls in flight (probe)")
    p.add_argument("--csv", default="soak.csv")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="encoderd_soak_"))
    generate_stubs(REPO, tmp)
    from proto import encoderd_pb2 as pb, encoderd_pb2_grpc as pb_grpc
    from health_v1 import health_pb2, health_pb2_grpc
    daemon = start_daemon(args.binary, ["--model-name", "langid", "--model-dir", args.model_dir],
                          tmp / "server.log")
    pid = daemon.proc.pid
    failures = []
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{daemon.port}")
        if not wait_serving(health_pb2, health_pb2_grpc.HealthStub(channel), ["", "langid"]):
            raise RuntimeError("daemon not SERVING")
        load = Load(pb, pb_grpc.EncoderStub(channel), args.seed)
        saturation = load.closed_loop(args.clients, args.probe_seconds)
        rate = args.rate or args.fraction * saturation
        threads0, fds0, _ = settle(daemon, pid)
        print(f"saturation (closed loop, {args.clients} in flight, {args.probe_seconds:.0f} s): "
              f"{saturation:.0f} calls/s; soak rate {rate:.0f} calls/s for {args.minutes} min; "
              f"idle before: {threads0} threads, {fds0} fds", flush=True)
        probe_unexpected = list(load.outcomes.unexpected)
        load.outcomes = Outcomes()

        samples = []
        out = open(args.csv, "w", newline="")
        writer = csv.writer(out)
        writer.writerow(["elapsed_s", "rss_bytes", "threads", "fds", "calls_done", "unexpected"])
        next_sample = [0.0]

        def tick(elapsed, last):
            if elapsed < next_sample[0] and not last:
                return
            next_sample[0] += 10
            row = [round(elapsed, 1), proc_rss_bytes(pid), proc_threads(pid), proc_fds(pid),
                   load.outcomes.done, len(load.outcomes.unexpected)]
            samples.append(row)
            writer.writerow(row)
            out.flush()
        load.open_loop(rate, args.minutes * 60, tick)
        out.close()
        threads1, fds1, state = settle(daemon, pid)

        warm = [s for s in samples if s[0] >= args.warmup_minutes * 60] or samples[-1:]
        rss_warm, rss_end = warm[0][1], samples[-1][1]
        growth = 100.0 * (rss_end - rss_warm) / rss_warm
        threads, fds = [s[2] for s in samples], [s[3] for s in samples]
        counts = load.outcomes.counts
        total = sum(counts.values())
        print(f"calls: {total} in {args.minutes} min ({total / (args.minutes * 60):.0f}/s)")
        for (kind, code), n in sorted(counts.items()):
            print(f"  {kind:15s} {code:20s} {n}")
        unexpected = probe_unexpected + load.outcomes.unexpected
        print(f"unexpected codes: {len(unexpected)} {unexpected[:10]}")
        print(f"RSS: {rss_warm / 2**20:.1f} MiB at {warm[0][0]:.0f} s -> {rss_end / 2**20:.1f} MiB "
              f"at {samples[-1][0]:.0f} s ({growth:+.2f}%)")
        print(f"threads under load: first {threads[0]} last {threads[-1]} max {max(threads)}; "
              f"idle before {threads0} after {threads1}")
        print(f"fds under load: first {fds[0]} last {fds[-1]} max {max(fds)}; "
              f"idle before {fds0} after {fds1}")
        print(f"idle state after (live, in flight, queue, slots): {state}; samples in {args.csv}")
        if growth >= 5:
            failures.append(f"RSS grew {growth:.2f}% (>= 5%)")
        if threads1 > threads0 + THREAD_SLACK:
            failures.append(f"threads grew: idle {threads0} -> {threads1}")
        if fds1 > fds0 + FD_SLACK:
            failures.append(f"fds grew: idle {fds0} -> {fds1}")
        if unexpected:
            failures.append(f"{len(unexpected)} unexpected codes")
        if state != (0, 0, 0, 0):
            failures.append(f"request state left behind: {state}")
    finally:
        daemon.stop()
    for f in failures:
        print("FAIL:", f)
    print("soak", "FAILED" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
