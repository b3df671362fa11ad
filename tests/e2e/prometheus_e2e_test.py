#!/usr/bin/python3
"""End-to-end test of encoderd's metrics against a real Prometheus server.

Starts `encoderd serve` (metrics on a free loopback port) and Debian's
`prometheus` (scraping it every second, config generated from
deploy/prometheus/prometheus-loopback.yml, TSDB in a temp dir), sends known
traffic, then checks the values Prometheus answers to PromQL against what was
sent, and that every query of deploy/grafana/encoderd-dashboard.json parses
and returns data. Also runs promtool on deploy/prometheus.

usage: prometheus_e2e_test.py --binary build/cli/encoderd --model-dir DIR
       --source-dir REPO
Exit 0: every check passed; 1: a check failed; 77: no prometheus binary (skip).
"""
import argparse
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from e2e_common import free_port  # noqa: E402  (below the ephemeral range)

SKIP = 77
FAILURES = []
N_OK = 24  # serial Embed requests
N_BAD = 5  # Embed requests with an empty text: INVALID_ARGUMENT


def check(condition, what):
    if not condition:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)
    else:
        print("ok:", what, flush=True)
    return condition


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


class Prom:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr, at=None):
        """The instant-query result list (at time `at`, default now); raises
        on a PromQL error."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        url = self.base + "/api/v1/query?" + urllib.parse.urlencode(params)
        try:
            body = json.loads(http_get(url))
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{expr}: {e.read().decode()}")
        if body.get("status") != "success":
            raise RuntimeError(f"{expr}: {body}")
        return body["data"]["result"]

    def scalar(self, expr, at=None):
        """The single sample's value, or None when the result is empty."""
        result = self.query(expr, at)
        if not result:
            return None
        if len(result) != 1:
            raise RuntimeError(f"{expr}: {len(result)} series, expected 1")
        return float(result[0]["value"][1])

    def wait_for(self, expr, predicate, timeout=30):
        deadline = time.time() + timeout
        value = None
        while time.time() < deadline:
            try:
                value = self.scalar(expr)
            except (RuntimeError, OSError):
                value = None
            if value is not None and predicate(value):
                return value
            time.sleep(0.25)
        return value


def run_promtool(source_dir, config_path):
    deploy = source_dir / "deploy" / "prometheus"
    for cmd in (["promtool", "check", "config", str(config_path)],
                ["promtool", "check", "config", str(deploy / "prometheus.yml")],
                ["promtool", "check", "rules", str(deploy / "alerts.yml")],
                ["promtool", "test", "rules", str(deploy / "alerts_test.yml")]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        check(r.returncode == 0, " ".join(cmd[:3]) + " " + pathlib.Path(cmd[-1]).name +
              ("" if r.returncode == 0 else ": " + r.stdout + r.stderr))


def write_scrape_config(source_dir, tmp, metrics_port):
    deploy = (source_dir / "deploy" / "prometheus").resolve()
    config = yaml.safe_load((deploy / "prometheus-loopback.yml").read_text())
    config["rule_files"] = [str(deploy / f) for f in config["rule_files"]]
    job = config["scrape_configs"][0]
    job["static_configs"] = [{"targets": [f"127.0.0.1:{metrics_port}"]}]
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def start_prometheus(binary, config_path, tmp):
    port = free_port()
    log = open(tmp / "prometheus.log", "w")
    proc = subprocess.Popen(
        [binary, f"--config.file={config_path}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            break
        try:
            http_get(f"http://127.0.0.1:{port}/-/ready", timeout=1)
            return proc, port
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("prometheus did not start:\n" + (tmp / "prometheus.log").read_text())


def dashboard_queries(source_dir):
    dash = json.loads((source_dir / "deploy" / "grafana" / "encoderd-dashboard.json").read_text())
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", "30s")
            expr = expr.replace("$model", ".+").replace("$instance", ".+")
            yield panel["title"], expr


def adapter_queries(source_dir):
    """The prometheus-adapter rules' queries as the adapter would send them
    for the pods of job "encoderd" (grouped by job here: no pod label)."""
    import yaml
    rules = yaml.safe_load((source_dir / "deploy/k8s/prometheus-adapter/rules.yaml").read_text())
    for rule in rules["rules"]["custom"]:
        series = rule["seriesQuery"].split("{")[0]
        expr = (rule["metricsQuery"].replace("<<.Series>>", series)
                .replace("<<.LabelMatchers>>", 'job="encoderd"').replace("<<.GroupBy>>", "job"))
        yield rule["name"]["as"], expr


def send_traffic(pb, stub, model, prom):
    """Serial requests (one batch each, so padding is known exactly). After
    the first, waits until Prometheus has scraped it, so the rest shows up
    as an increase of an existing series."""
    texts = ["hello world", "the quick brown fox jumps over the lazy dog",
             "Grüße aus Köln", "x", "a much longer sentence " * 6, "¿Dónde está?"]
    sent = {"sequences": 0, "tokens": 0, "padded": 0, "lengths": [], "latency": [], "ids": set()}
    for i in range(N_OK):
        batch = [texts[i % len(texts)], texts[(i * 5 + 1) % len(texts)]][: 1 + i % 2]
        lengths = [len(t.ids) for t in stub.Tokenize(
            pb.TokenizeRequest(model=model, texts=batch)).tokenizations]
        start = time.time()
        response, call = stub.Embed.with_call(pb.EmbedRequest(model=model, texts=batch))
        sent["latency"].append(time.time() - start)
        rid = dict(call.trailing_metadata()).get("x-request-id", "")
        if not rid.isdigit() or rid in sent["ids"]:
            check(False, f"OK call {i} carries a new x-request-id ({rid!r})")
        sent["ids"].add(rid)
        sent["sequences"] += len(batch)
        sent["tokens"] += response.token_count
        sent["padded"] += len(batch) * max(lengths)
        sent["lengths"] += lengths
        if response.token_count != sum(lengths):
            check(False, f"Embed {i} token_count {response.token_count} != Tokenize {sum(lengths)}")
        if i == 0:
            seen = prom.wait_for(f'encoderd_requests_total{{model="{model}",rpc="Embed",code="OK"}}',
                                 lambda v: v >= 1)
            check(seen == 1, f"Prometheus scraped the first request ({seen})")
    import grpc
    for i in range(N_BAD):
        try:
            stub.Embed(pb.EmbedRequest(model=model, texts=["fine", ""]))
            check(False, "an empty text is INVALID_ARGUMENT")
        except grpc.RpcError as e:
            rid = dict(e.trailing_metadata() or ()).get("x-request-id", "")
            if i == 0:
                check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, "an empty text is INVALID_ARGUMENT")
                check(rid.isdigit() and rid not in sent["ids"], f"the error carries x-request-id ({rid!r})")
            sent["ids"].add(rid)
    check(len(sent["ids"]) == N_OK + N_BAD, "every request got its own x-request-id")
    return sent


def check_values(prom, sent, model):
    sel = f'job="encoderd",model="{model}"'
    ok = prom.wait_for(f'encoderd_requests_total{{{sel},rpc="Embed",code="OK"}}', lambda v: v >= N_OK)
    check(ok == N_OK, f"requests_total Embed OK = {ok} (sent {N_OK})")
    bad = prom.wait_for(f'encoderd_requests_total{{{sel},rpc="Embed",code="INVALID_ARGUMENT"}}',
                        lambda v: v >= N_BAD)
    check(bad == N_BAD, f"requests_total Embed INVALID_ARGUMENT = {bad} (sent {N_BAD})")
    reason = prom.scalar(f'encoderd_request_failures_total{{{sel},rpc="Embed",reason="invalid_argument"}}')
    check(reason == N_BAD, f"failures_total reason=invalid_argument = {reason}")
    tokenize = prom.scalar(f'encoderd_requests_total{{{sel},rpc="Tokenize",code="OK"}}')
    check(tokenize == N_OK, f"requests_total Tokenize OK = {tokenize}")
    # Every scrape after the traffic sees the same totals.
    prom.wait_for(f'encoderd_batch_padded_tokens_total{{{sel}}}', lambda v: v >= sent["padded"])
    for name, expected in (("encoderd_sequences_total", sent["sequences"]),
                           ("encoderd_tokens_total", sent["tokens"]),
                           ("encoderd_batch_tokens_total", sent["tokens"]),
                           ("encoderd_batch_padded_tokens_total", sent["padded"]),
                           ("encoderd_input_length_tokens_count", len(sent["lengths"])),
                           ("encoderd_input_length_tokens_sum", sum(sent["lengths"])),
                           ("encoderd_batch_size_sequences_count", N_OK),
                           ("encoderd_batch_size_sequences_sum", sent["sequences"]),
                           ("encoderd_queue_duration_seconds_count", N_OK),
                           ("encoderd_inference_duration_seconds_count", N_OK)):
        value = prom.scalar(f"{name}{{{sel}}}")
        check(value == expected, f"{name} = {value} (expected {expected})")
    # Each OK call here ran in a batch of its own, so the executors' busy time
    # is the sum of their engine times.
    busy = prom.scalar(f"encoderd_batch_seconds_total{{{sel}}}")
    engine = prom.scalar(f"encoderd_inference_duration_seconds_sum{{{sel}}}")
    check(busy is not None and engine is not None and busy > 0 and abs(busy - engine) < 1e-6,
          f"batch_seconds_total = {busy} (the batches' engine time: {engine})")
    count = prom.scalar(f'encoderd_request_duration_seconds_count{{{sel},rpc="Embed"}}')
    check(count == N_OK + N_BAD, f"request_duration count = {count} (every answered Embed)")

    saved = prom.scalar(f"1 - sum(encoderd_batch_tokens_total{{{sel}}}) / "
                        f"sum(encoderd_batch_padded_tokens_total{{{sel}}})")
    expected_saved = 1 - sent["tokens"] / sent["padded"]
    check(saved is not None and abs(saved - expected_saved) < 1e-9,
          f"padding-saved ratio = {saved} (expected {expected_saved:.6f})")

    # p99 over all OK-or-not Embed answers: at most the bucket bound just above
    # the slowest client-side latency (server time <= client time), above 0.
    p99 = prom.scalar(f'histogram_quantile(0.99, sum by (le) '
                      f'(encoderd_request_duration_seconds_bucket{{{sel},rpc="Embed"}}))')
    bounds = [float(r["metric"]["le"]) for r in prom.query(
        f'encoderd_request_duration_seconds_bucket{{{sel},rpc="Embed"}}')]
    limit = min(b for b in bounds if b >= max(sent["latency"]))
    check(p99 is not None and 0 < p99 <= limit,
          f"p99 from the histogram = {p99} s (client max {max(sent['latency']):.4f} s, bucket {limit})")

    # increase() extrapolates to the window's edges, so it is only close to
    # the N_OK - 1 requests sent after the first scrape. Evaluated at the
    # last scrape: evaluated later it extrapolates past the last sample by up
    # to 1.1 scrape intervals, which with few samples (a fast run) went past
    # 1.5 x N_OK.
    now = prom.scalar(f'max(timestamp(encoderd_requests_total{{{sel},rpc="Embed",code="OK"}}))')
    check(now is not None, "the OK Embed counter has a last sample")
    now = now if now is not None else time.time()
    inc = prom.scalar(f'sum(increase(encoderd_requests_total{{{sel},rpc="Embed",code="OK"}}[5m]))',
                      now)
    check(inc is not None and N_OK - 1 <= inc <= 1.5 * N_OK,
          f"increase() over 5m = {inc} (sent {N_OK - 1} after the first scrape)")
    rate = prom.scalar(f'sum(rate(encoderd_requests_total{{{sel},rpc="Embed",code="OK"}}[5m]))',
                       now)
    check(rate is not None and abs(rate * 300 - inc) < 1e-6, f"rate() over 5m = {rate}/s")
    check(prom.scalar(f"encoderd_queue_depth{{{sel}}}") == 0, "queue depth is 0 once idle")
    check(prom.scalar(f"encoderd_in_flight_requests{{{sel}}}") == 0, "in-flight is 0 once idle")
    check(prom.scalar(f"encoderd_model_ready{{{sel}}}") == 1, "model_ready = 1")
    info = prom.query(f"encoderd_model_info{{{sel}}}")
    check(len(info) == 1 and info[0]["metric"].get("family") == "torchtext-roberta" and
          info[0]["metric"].get("dtype") == "float32" and info[0]["metric"].get("device") == "cpu",
          f"model_info labels {info[0]['metric'] if info else None}")
    check(prom.query('encoderd_build_info{job="encoderd"}') != [], "build_info present")
    rss = prom.scalar('encoderd_process_resident_memory_bytes{job="encoderd"}')
    check(rss is not None and rss > 10e6, f"resident memory {rss} bytes")
    cpu = prom.scalar('encoderd_process_cpu_seconds_total{job="encoderd"}')
    check(cpu is not None and cpu > 0, f"cpu seconds {cpu}")
    check(prom.scalar('up{job="encoderd"}') == 1, "target up")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--source-dir", required=True)
    args = p.parse_args()
    source_dir = pathlib.Path(args.source_dir)

    prometheus = shutil.which("prometheus") or ("/usr/bin/prometheus"
                                                if pathlib.Path("/usr/bin/prometheus").exists() else None)
    if not prometheus or not shutil.which("promtool"):
        print("SKIP: no `prometheus`/`promtool` binary (Debian package `prometheus`, "
              "installed by scripts/setup.sh)")
        return SKIP

    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    import serve_e2e_test as base

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="encoderd_prom_e2e_"))
    base.generate_stubs(source_dir, tmp)
    from proto import encoderd_pb2 as pb
    from proto import encoderd_pb2_grpc as pb_grpc
    from health_v1 import health_pb2, health_pb2_grpc
    import grpc

    procs = []
    try:
        server, port = base.start_server(args.binary, args.model_dir, tmp / "server.log",
                                         extra=["--metrics-port", "0", "--access-log-sample", "0.5"])
        procs.append(server)
        m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", (tmp / "server.log").read_text())
        if not check(m is not None, "the daemon logs its metrics address"):
            return 1
        metrics_port = int(m.group(1))
        config_path = write_scrape_config(source_dir, tmp, metrics_port)
        run_promtool(source_dir, config_path)
        prom_proc, prom_port = start_prometheus(prometheus, config_path, tmp)
        procs.append(prom_proc)
        prom = Prom(prom_port)

        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = pb_grpc.EncoderStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        if not check(base.wait_serving(health_pb2, health, ["", base.MODEL]), "daemon SERVING"):
            return 1
        sent = send_traffic(pb, stub, base.MODEL, prom)
        check_values(prom, sent, base.MODEL)
        log = (tmp / "server.log").read_text()
        access = len(re.findall(r"access id=\d+ model=xlmr rpc=\w+ code=\w+", log))
        total = 2 * N_OK + N_BAD
        check(access == total // 2, f"access log lines at 0.5 sampling: {access} of {total}")

        # A second scrape interval so every rate() window holds two samples.
        time.sleep(2)
        n = 0
        for title, expr in dashboard_queries(source_dir):
            n += 1
            try:
                result = prom.query(expr)
                check(result != [], f"dashboard '{title}': {expr[:70]} returns data")
            except (RuntimeError, OSError) as e:
                check(False, f"dashboard '{title}': {e}")
        check(n >= 15, f"{n} dashboard queries checked")
        # What the HPA scales on: work in the last minute, so more than 0.
        for name, expr in adapter_queries(source_dir):
            try:
                value = prom.scalar(expr)
                check(value is not None and 0 < value < float("inf"),
                      f"autoscaling metric {name} = {value} ({expr[:60]}...)")
            except (RuntimeError, OSError) as e:
                check(False, f"autoscaling metric {name}: {e}")
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(tmp / "tsdb", ignore_errors=True)

    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed; logs in {tmp}")
        return 1
    print("all prometheus e2e checks passed")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
