"""Helpers shared by the end-to-end tests of `encoderd serve`: checks that
collect failures, Python stubs generated at test time, starting the real
daemon on free loopback ports, health waits and /metrics scrapes.

Use /usr/bin/python3 (Debian's python3-grpcio).
"""
import os
import pathlib
import re
import subprocess
import sys
import time
import urllib.request

import grpc

HEALTH_PROTO = """
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health {
  rpc Check(HealthCheckRequest) returns (HealthCheckResponse);
  rpc Watch(HealthCheckRequest) returns (stream HealthCheckResponse);
}
"""

# Every failed check, in order; a test exits non-zero when it is not empty.
FAILURES = []


def check(condition, what):
    if not condition:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)
    return condition


def generate_stubs(source_dir, out_dir):
    """protoc + grpc_python_plugin for encoderd.proto and the health proto into
    `out_dir`, which is put on sys.path: then `from proto import encoderd_pb2`
    and `from health_v1 import health_pb2` work."""
    out_dir = pathlib.Path(out_dir)
    plugin = subprocess.run(["which", "grpc_python_plugin"], capture_output=True,
                            text=True, check=True).stdout.strip()
    health_dir = out_dir / "health_v1"
    health_dir.mkdir()
    (health_dir / "health.proto").write_text(HEALTH_PROTO)
    for include, proto in ((source_dir, "proto/encoderd.proto"), (out_dir, "health_v1/health.proto")):
        subprocess.run(["protoc", f"-I{include}", f"--python_out={out_dir}", f"--grpc_out={out_dir}",
                        f"--plugin=protoc-gen-grpc={plugin}", proto], check=True)
    sys.path.insert(0, str(out_dir))


class Daemon:
    """A running `encoderd serve`: the process, its gRPC port and (when
    metrics are on) its metrics port."""

    def __init__(self, proc, port, metrics_port, log_path):
        self.proc = proc
        self.port = port
        self.metrics_port = metrics_port
        self.log_path = pathlib.Path(log_path)

    def metrics_text(self):
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()

    def metric(self, name, labels=None):
        """Sum of the samples of `name` whose labels include `labels`."""
        return metric_value(self.metrics_text(), name, labels)

    def stop(self, timeout=20):
        stop_process(self.proc, timeout)


def stop_process(proc, timeout=20):
    """SIGTERM, then SIGKILL if `proc` has not exited within `timeout` s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_daemon(binary, serve_args, log_path, timeout=60):
    """Starts `binary serve --address 127.0.0.1 --port 0 --metrics-port 0
    *serve_args` and waits for its "listening on" line."""
    log = open(log_path, "w")
    proc = subprocess.Popen([binary, "serve", "--address", "127.0.0.1", "--port", "0",
                             "--metrics-port", "0", *serve_args],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = pathlib.Path(log_path).read_text()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
        if m:
            mm = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", text)
            return Daemon(proc, int(m.group(1)), int(mm.group(1)) if mm else None, log_path)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("server did not start:\n" + pathlib.Path(log_path).read_text())


def wait_serving(health_pb2, health_stub, names, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if all(health_stub.Check(health_pb2.HealthCheckRequest(service=n)).status ==
                   health_pb2.HealthCheckResponse.SERVING for n in names):
                return True
        except grpc.RpcError:
            pass
        time.sleep(0.1)
    return False


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metric_value(text, name, labels=None):
    """Sum of the samples of `name` in Prometheus text format whose labels
    include every (key, value) of `labels`; 0 when there is none."""
    total = 0.0
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or m.group(1) != name:
            continue
        got = dict(_LABEL.findall(m.group(2) or ""))
        if all(got.get(k) == v for k, v in (labels or {}).items()):
            total += float(m.group(3))
    return total


def proc_threads(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise RuntimeError("no Threads line")


def proc_fds(pid):
    return len(list(pathlib.Path(f"/proc/{pid}/fd").iterdir()))


def proc_cpu_seconds(pid):
    """User + system CPU seconds of process `pid` so far."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_bytes(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS line")
