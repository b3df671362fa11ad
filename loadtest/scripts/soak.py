#!/usr/bin/python3
"""Soak test of `encoderd serve` (not part of ctest): starts a daemon, finds
its saturation throughput on a mixed workload (or takes --rate), then offers
--fraction (default 70%) of it, open loop, for --minutes (default 30).
Before the soak, a peak warm-up (--peak-clients calls in flight for
--peak-seconds) takes the daemon to its high-water marks.

The workload mixes successful Embed calls with cancels (at once and after
a few ms), 1 ms deadlines, invalid arguments and an unknown model; every call
must get the code its kind expects. Every second a row goes to the CSV: the
daemon's RSS, threads and open fds (from /proc/PID), its CPU use, its live
requests, queue depth and refusals (from /metrics), the calls done and
unexpected codes so far, how far the load generator ran behind its schedule,
and the CPU time the hypervisor took from this machine (steal, from
/proc/stat: on a VM, cores the daemon did not get). At the end it prints RSS
after warm-up vs at the end, threads/fds first/last/max and idle
before/after, the outcome counts, and where the unexpected codes fell
relative to steal; it exits 1 when RSS grew >= 5%, threads or fds grew, any
call got an unexpected code, or request state was left behind.

usage: loadtest/scripts/soak.py [--binary build/cli/encoderd]
       [--model-dir models/langid] [--minutes 30] [--warmup-minutes 2]
       [--rate R | --fraction 0.7] [--csv soak.csv] [--serve-arg=--flag=value ...]
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
from e2e_common import (generate_stubs, metric_value, proc_cpu_seconds, proc_fds,  # noqa: E402
                        proc_rss_bytes, proc_threads, start_daemon, steal_seconds, wait_serving)

Code = grpc.StatusCode
SENTENCE = "the quick brown fox jumps over the lazy dog and keeps running far away "
# Kind: (share of calls, expected code). A cancel that loses the race with
# the answer must have got OK.
KINDS = {"ok": (0.70, Code.OK), "cancel_queued": (0.06, Code.CANCELLED),
         "cancel_running": (0.06, Code.CANCELLED), "tiny_deadline": (0.06, Code.DEADLINE_EXCEEDED),
         "invalid": (0.06, Code.INVALID_ARGUMENT), "unknown_model": (0.06, Code.NOT_FOUND)}
# A call that cannot make its 1 ms deadline may also be refused at once
# (predicted to finish late).
ALSO_EXPECTED = {"tiny_deadline": {Code.RESOURCE_EXHAUSTED}}
THREAD_SLACK = 2  # gRPC's own pollers
FD_SLACK = 2
# An unexpected code counts as "during steal" when the hypervisor took at
# least this many cores in one of the STEAL_WINDOW seconds before it.
STEAL_CORES = 0.25
STEAL_WINDOW = 3


class Outcomes:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.unexpected = []  # (kind, got, wanted, time.monotonic())
        self.done = 0

    def record(self, kind, got, want):
        with self.lock:
            key = (kind, got.name)
            self.counts[key] = self.counts.get(key, 0) + 1
            self.done += 1
            if got != want and got not in ALSO_EXPECTED.get(kind, ()):
                self.unexpected.append((kind, got.name, want.name, time.monotonic()))


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
        self.max_lag = 0.0  # seconds behind the arrival schedule, since last read
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

    def open_loop(self, rate, seconds):
        """Poisson arrivals at `rate`; calls the loop fell behind on are sent
        at once (as clients on other machines would have sent them)."""
        start = time.perf_counter()
        next_send = start
        while True:
            now = time.perf_counter()
            if now - start >= seconds:
                break
            self.run_cancels(now)
            if next_send <= now:
                self.max_lag = max(self.max_lag, now - next_send)
            while next_send <= now:
                self.send()
                next_send += self.rng.expovariate(rate)
            time.sleep(max(0.0, min(next_send, self.cancels[0][0] if self.cancels else next_send) -
                           time.perf_counter()))
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


class Sampler:
    """Every second, a CSV row of the daemon's and the machine's state."""
    COLUMNS = ["elapsed_s", "rss_bytes", "threads", "fds", "daemon_cpu_cores", "steal_cores",
               "live_requests", "queue_depth", "refused", "calls_done", "unexpected",
               "client_lag_s"]

    def __init__(self, daemon, load, path):
        self.daemon, self.load = daemon, load
        self.pid = daemon.proc.pid
        self.out = open(path, "w", newline="")
        self.writer = csv.writer(self.out)
        self.writer.writerow(self.COLUMNS)
        self.rows = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def start(self):
        self.start_time = time.monotonic()
        self.last = (self.start_time, proc_cpu_seconds(self.pid), steal_seconds(), self.refused())
        self.thread.start()

    def refused(self):
        return metric_value(self.daemon.metrics_text(), "encoderd_request_failures_total",
                            {"reason": "overloaded"})

    def sample(self):
        now, cpu, steal = time.monotonic(), proc_cpu_seconds(self.pid), steal_seconds()
        text = self.daemon.metrics_text()
        refused = metric_value(text, "encoderd_request_failures_total", {"reason": "overloaded"})
        then, cpu0, steal0, refused0 = self.last
        self.last = (now, cpu, steal, refused)
        dt = max(now - then, 1e-3)
        lag, self.load.max_lag = self.load.max_lag, 0.0
        row = [round(now - self.start_time, 1), proc_rss_bytes(self.pid), proc_threads(self.pid),
               proc_fds(self.pid), round((cpu - cpu0) / dt, 2), round((steal - steal0) / dt, 2),
               metric_value(text, "encoderd_live_requests"), metric_value(text, "encoderd_queue_depth"),
               refused - refused0, self.load.outcomes.done, len(self.load.outcomes.unexpected),
               round(lag, 3)]
        self.rows.append(dict(zip(self.COLUMNS, row), time=now))
        self.writer.writerow(row)
        self.out.flush()

    def run(self):
        while not self.stop.wait(1 - (time.monotonic() - self.start_time) % 1):
            self.sample()

    def finish(self):
        """Stops sampling after one last row."""
        self.stop.set()
        self.thread.join()
        self.sample()
        self.out.close()

    def steal_before(self, t):
        """The most cores stolen in one second of the STEAL_WINDOW s up to `t`."""
        return max((r["steal_cores"] for r in self.rows
                    if t - STEAL_WINDOW <= r["time"] <= t + 1), default=0.0)


def idle_state(daemon):
    text = daemon.metrics_text()
    return tuple(metric_value(text, n) for n in ("encoderd_live_requests", "encoderd_in_flight_requests",
                                                 "encoderd_queue_depth",
                                                 "encoderd_concurrency_slots_in_use",
                                                 "encoderd_answers_sending"))


def settle(daemon, pid, timeout=15):
    """Waits for the daemon to be idle; returns (threads, fds, idle_state)."""
    end = time.time() + timeout
    best = None
    while time.time() < end:
        state = idle_state(daemon)
        sample = (proc_threads(pid), proc_fds(pid), state)
        if best is None or sample[:2] < best[:2]:
            best = sample
        if state == (0, 0, 0, 0, 0) and time.time() > end - timeout + 2:
            return sample if sample[:2] <= best[:2] else best
        time.sleep(0.2)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", default=str(REPO / "build" / "cli" / "encoderd"))
    p.add_argument("--model-dir", default=str(REPO / "models" / "langid"))
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--warmup-minutes", type=float, default=2,
                   help="RSS is compared from this point of the run to its end")
    p.add_argument("--rate", type=float, help="offered calls/s (default: fraction x saturation)")
    p.add_argument("--fraction", type=float, default=0.7)
    p.add_argument("--probe-seconds", type=float, default=15)
    p.add_argument("--clients", type=int, default=64, help="closed-loop calls in flight (probe)")
    p.add_argument("--peak-clients", type=int, default=700,
                   help="calls in flight during the peak warm-up (0: none); below one "
                        "connection's share of listen.max_concurrent_requests (three quarters "
                        "of 1024 by default, with listen.fair_share)")
    p.add_argument("--peak-seconds", type=float, default=10)
    p.add_argument("--csv", default="soak.csv")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--serve-arg", action="append", default=[],
                   help="extra `encoderd serve` argument (repeat), e.g. --serve-arg=--replicas=2")
    args = p.parse_args()

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="encoderd_soak_"))
    generate_stubs(REPO, tmp)
    from proto import encoderd_pb2 as pb, encoderd_pb2_grpc as pb_grpc
    from health_v1 import health_pb2, health_pb2_grpc
    daemon = start_daemon(args.binary, ["--model-name", "langid", "--model-dir", args.model_dir,
                                        *args.serve_arg], tmp / "server.log")
    pid = daemon.proc.pid
    failures = []
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{daemon.port}")
        if not wait_serving(health_pb2, health_pb2_grpc.HealthStub(channel), ["", "langid"]):
            raise RuntimeError("daemon not SERVING")
        load = Load(pb, pb_grpc.EncoderStub(channel), args.seed)
        saturation = load.closed_loop(args.clients, args.probe_seconds)
        rate = args.rate or args.fraction * saturation
        probe_unexpected = list(load.outcomes.unexpected)
        # Warm-up at the peak: a backlog near the concurrency cap makes the
        # daemon reach its high-water marks (a handler thread per call, the
        # largest batches' buffers) before RSS is compared; growth after that
        # is what a leak would show. Its outcomes are printed, not judged.
        if args.peak_clients:
            load.outcomes = Outcomes()
            load.closed_loop(args.peak_clients, args.peak_seconds)
            peak_counts = load.outcomes.counts
            print(f"peak warm-up ({args.peak_clients} in flight, {args.peak_seconds:.0f} s): "
                  f"{dict((f'{k}/{c}', n) for (k, c), n in sorted(peak_counts.items()))}", flush=True)
        threads0, fds0, _ = settle(daemon, pid)
        rss_idle0 = proc_rss_bytes(pid)
        print(f"saturation (closed loop, {args.clients} in flight, {args.probe_seconds:.0f} s): "
              f"{saturation:.0f} calls/s; soak rate {rate:.0f} calls/s for {args.minutes} min; "
              f"idle before: {threads0} threads, {fds0} fds, RSS {rss_idle0 / 2**20:.1f} MiB",
              flush=True)
        load.outcomes = Outcomes()

        sampler = Sampler(daemon, load, args.csv)
        sampler.start()
        load.open_loop(rate, args.minutes * 60)
        sampler.finish()
        threads1, fds1, state = settle(daemon, pid)
        rss_idle1 = proc_rss_bytes(pid)

        samples = sampler.rows
        warm = [r for r in samples if r["elapsed_s"] >= args.warmup_minutes * 60] or samples[-1:]
        rss_warm, rss_end = warm[0]["rss_bytes"], samples[-1]["rss_bytes"]
        growth = 100.0 * (rss_end - rss_warm) / rss_warm
        threads, fds = [r["threads"] for r in samples], [r["fds"] for r in samples]
        counts = load.outcomes.counts
        total = sum(counts.values())
        print(f"calls: {total} in {args.minutes} min ({total / (args.minutes * 60):.0f}/s)")
        for (kind, code), n in sorted(counts.items()):
            print(f"  {kind:15s} {code:20s} {n}")
        unexpected = probe_unexpected + load.outcomes.unexpected
        print(f"unexpected codes: {len(unexpected)} {[u[:3] for u in unexpected[:10]]}")
        print(f"RSS: {rss_warm / 2**20:.1f} MiB at {warm[0]['elapsed_s']:.0f} s -> "
              f"{rss_end / 2**20:.1f} MiB at {samples[-1]['elapsed_s']:.0f} s ({growth:+.2f}%); "
              f"idle before the soak {rss_idle0 / 2**20:.1f} MiB, after {rss_idle1 / 2**20:.1f} MiB")
        print(f"threads under load: first {threads[0]} last {threads[-1]} max {max(threads)}; "
              f"idle before {threads0} after {threads1}")
        print(f"fds under load: first {fds[0]} last {fds[-1]} max {max(fds)}; "
              f"idle before {fds0} after {fds1}")
        print(f"idle state after (live, in flight, queue, slots, answers sending): {state}; samples in {args.csv}")
        steal = [r["steal_cores"] for r in samples]
        stolen = sum(1 for x in steal if x >= STEAL_CORES)
        print(f"host CPU steal: {sum(steal):.0f} core-seconds in all, max {max(steal):.2f} cores in "
              f"one second, {stolen} of {len(steal)} seconds >= {STEAL_CORES} cores; daemon CPU "
              f"mean {sum(r['daemon_cpu_cores'] for r in samples) / len(samples):.2f} cores; "
              f"backlog max {max(r['live_requests'] for r in samples):.0f} live requests; "
              f"client lag max {max(r['client_lag_s'] for r in samples):.3f} s")
        during = sum(1 for u in load.outcomes.unexpected if sampler.steal_before(u[3]) >= STEAL_CORES)
        print(f"unexpected codes within {STEAL_WINDOW} s after a second with steal >= "
              f"{STEAL_CORES} cores: {during} of {len(load.outcomes.unexpected)}")
        if growth >= 5:
            failures.append(f"RSS grew {growth:.2f}% (>= 5%)")
        if threads1 > threads0 + THREAD_SLACK:
            failures.append(f"threads grew: idle {threads0} -> {threads1}")
        if fds1 > fds0 + FD_SLACK:
            failures.append(f"fds grew: idle {fds0} -> {fds1}")
        if unexpected:
            failures.append(f"{len(unexpected)} unexpected codes")
        if state != (0, 0, 0, 0, 0):
            failures.append(f"request state left behind: {state}")
    finally:
        daemon.stop()
    for f in failures:
        print("FAIL:", f)
    print("soak", "FAILED" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
