#!/usr/bin/python3
"""Validates deploy/k8s: yamllint on every YAML file, then renders each
kustomization (base and overlays, tests/deploy/kustomize_lite.py) and checks
the properties a working rollout depends on against the daemon's own
sources: ports and shutdown grace from config/default.yaml, ENCODERD_*
variables from server/config/config_loader.cc, metric names from server/**/*.cc, the
image's user and ports from deploy/Dockerfile*.

Each check is also run on deliberately broken copies of the rendered
manifests (MUTATIONS) to prove it can fail.

usage: validate_manifests.py --source-dir REPO
Exit status 0 when everything holds; the failures are printed otherwise.
"""
import argparse
import copy
import hashlib
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import kustomize_lite  # noqa: E402
from manifest_checks import check_rendered, device_dtype_errors  # noqa: E402

KUSTOMIZATIONS = ["base", "overlays/cpu", "overlays/cuda", "overlays/model-pvc",
                  "overlays/model-fetch"]
GPU_OVERLAYS = {"overlays/cuda"}
# Broken variants of a rendered overlay, each of which must be reported.
MUTATIONS = {
    "no readiness probe": lambda d: d["containers"][0].pop("readinessProbe"),
    "HTTP liveness probe": lambda d: d["containers"][0].update(
        livenessProbe={"httpGet": {"port": 9400, "path": "/"}}),
    "grace period too short": lambda d: d["pod"].update(terminationGracePeriodSeconds=20),
    "root allowed": lambda d: (d["pod"]["securityContext"].pop("runAsNonRoot"),
                               d["containers"][0]["securityContext"].pop("runAsNonRoot")),
    "writable root": lambda d: d["containers"][0]["securityContext"].update(
        readOnlyRootFilesystem=False),
    "no memory limit": lambda d: d["containers"][0]["resources"]["limits"].pop("memory"),
    "wrong gRPC port": lambda d: d["containers"][0]["ports"][0].update(containerPort=50052),
    "unknown env var": lambda d: d["containers"][0]["env"].append(
        {"name": "ENCODERD_MAX_BATCH_TOKEN", "value": "1"}),
    "no connection age": lambda d: d["containers"][0].update(env=[
        e for e in d["containers"][0]["env"] if e["name"] != "ENCODERD_MAX_CONNECTION_AGE_S"]),
    # An adapter rule that serves the HPA's metric from the call counter.
    "HPA on the call rate": lambda d: d["adapter"].update(
        encoderd_tokens_per_second="encoderd_requests_total"),
    "replicas beside the HPA": lambda d: d["deployment"]["spec"].update(replicas=2),
    "ServiceMonitor without release label": lambda d: d["servicemonitor"]["metadata"][
        "labels"].pop("release"),
    "HPA on unknown metric": lambda d: d["hpa"]["spec"]["metrics"][0]["pods"]["metric"].update(
        name="encoderd_queue_length"),
}

# Broken variants of the model-fetch overlay's Deployment.
FETCH_MUTATIONS = {
    "no checksum check": lambda c, i: i.update(command=[
        x.replace("sha256sum -c -", "true") for x in i["command"]]),
    "plain HTTP model URL": lambda c, i: i["env"][0].update(value="http://example.com/m.tar.gz"),
    "model dir outside its mounts": lambda c, i: c["env"].append(
        {"name": "ENCODERD_MODEL_DIR", "value": "/models/elsewhere"}),
    "writable model volume": lambda c, i: next(
        m for m in c["volumeMounts"] if m["name"] == "model").pop("readOnly"),
    "root init container": lambda c, i: i["securityContext"].update(runAsNonRoot=False),
}
# Broken variants of the KServe example: (ServingRuntime, InferenceService).
KSERVE_MUTATIONS = {
    "runtime serves another directory": lambda rt, isvc: rt["spec"]["containers"][0].update(
        args=["--model-dir=/models/langid"]),
    "runtime repeats the entrypoint": lambda rt, isvc: rt["spec"]["containers"][0]["args"].insert(
        0, "serve"),
    "runtime on another port": lambda rt, isvc: rt["spec"]["containers"][0]["ports"][0].update(
        containerPort=8080),
    "service names another format": lambda rt, isvc: isvc["spec"]["predictor"]["model"][
        "modelFormat"].update(name="onnx"),
}


def kserve_errors(docs: dict, facts: dict) -> list:
    """The KServe example: the runtime serves KServe's /mnt/models on the gRPC
    port (h2c) after the image's ENTRYPOINT (encoderd serve), with known
    variables, and the InferenceService selects it."""
    errors = []
    rt, isvc = docs["ServingRuntime"], docs["InferenceService"]
    if rt.get("apiVersion") != "serving.kserve.io/v1alpha1" or \
            isvc.get("apiVersion") != "serving.kserve.io/v1beta1":
        errors.append("kserve: unexpected apiVersion")
    containers = rt["spec"].get("containers", [])
    c = containers[0] if containers else {}
    if c.get("name") != "kserve-container":
        errors.append("kserve: the runtime's container must be named kserve-container")
    args = c.get("args", [])
    if "--model-dir=/mnt/models" not in args:
        errors.append(f"kserve: the runtime must serve /mnt/models (args {args})")
    if "serve" in args:
        errors.append("kserve: args repeat 'serve' (the image's ENTRYPOINT is encoderd serve)")
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    if ports.get("h2c") != facts["grpc_port"]:
        errors.append(f"kserve: port h2c must be encoderd's gRPC port {facts['grpc_port']}")
    for e in c.get("env", []):
        if e["name"].startswith("ENCODERD_") and e["name"] not in facts["env_vars"]:
            errors.append(f"kserve: env {e['name']} is not read by encoderd")
    model = isvc["spec"]["predictor"]["model"]
    formats = {f["name"] for f in rt["spec"].get("supportedModelFormats", [])}
    if model["modelFormat"]["name"] not in formats:
        errors.append(f"kserve: format {model['modelFormat']['name']} is not one the runtime "
                      f"supports ({sorted(formats)})")
    if model.get("runtime") != rt["metadata"]["name"]:
        errors.append(f"kserve: the InferenceService names runtime {model.get('runtime')}")
    return errors


def fetch_script_errors(docs: list) -> list:
    """Runs the model-fetch init container's script (with sh, curl,
    sha256sum and tar from the host) on a file:// archive (file:// allowed
    beside https for the test): the right checksum unpacks the model
    directory, a wrong one fails and leaves none. As written it downloads
    over https only: an http:// URL fails before any connection is made."""
    dep = next(d for d in docs if d["kind"] == "Deployment")
    init = dep["spec"]["template"]["spec"]["initContainers"][0]
    mount = init["volumeMounts"][0]["mountPath"]
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        src = tmp / "src"
        src.mkdir()
        (src / "encoderd.yaml").write_text("family: generic\n")
        (src / "vocab.txt").write_text("[PAD]\n")
        archive = tmp / "model.tar.gz"
        subprocess.run(["tar", "-czf", str(archive), "-C", str(src), "."], check=True)
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        for sha, want in ((digest, True), ("0" * 64, False)):
            out = tmp / ("ok" if want else "bad")
            out.mkdir()
            script = init["command"][-1].replace(mount, str(out)).replace("=https", "=https,file")
            env = {"PATH": "/usr/bin:/bin", "MODEL_URL": archive.as_uri(), "MODEL_SHA256": sha}
            run = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)
            got = (out / "model" / "encoderd.yaml").is_file() and (out / "model" / "vocab.txt").is_file()
            if want and (run.returncode != 0 or not got):
                errors.append(f"model-fetch script: the right checksum did not unpack the model "
                              f"({run.returncode}: {run.stderr.strip()[:200]})")
            if not want and (run.returncode == 0 or (out / "model").exists()):
                errors.append("model-fetch script: a wrong checksum was not refused")
        out = tmp / "plain"
        out.mkdir()
        script = init["command"][-1].replace(mount, str(out))
        env = {"PATH": "/usr/bin:/bin", "MODEL_URL": "http://127.0.0.1:9/model.tar.gz",
               "MODEL_SHA256": digest}
        run = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)
        if run.returncode == 0 or "http" not in run.stderr.lower() or "disabled" not in run.stderr.lower():
            errors.append(f"model-fetch script: an http:// URL was not refused as a protocol "
                          f"({run.returncode}: {run.stderr.strip()[:200]})")
    return errors


def yamllint(files: list) -> list:
    config = ("{extends: default, rules: {line-length: {max: 100}, "
              "document-start: disable, truthy: {check-keys: false}, "
              "comments: {min-spaces-from-content: 1}}}")
    try:
        proc = subprocess.run(["yamllint", "--strict", "-f", "parsable", "-d", config] +
                              [str(f) for f in files], capture_output=True, text=True)
    except FileNotFoundError:
        return ["yamllint is not installed (scripts/setup.sh installs it)"]
    if proc.returncode != 0:
        return [f"yamllint: {line}" for line in (proc.stdout + proc.stderr).splitlines()]
    return []


def source_facts(repo: pathlib.Path) -> dict:
    """What the manifests must agree with, read from the daemon's sources."""
    default = yaml.safe_load((repo / "config/default.yaml").read_text())
    loader = (repo / "server/config/config_loader.cc").read_text()
    env_vars = set(re.findall(r'"(ENCODERD_[A-Z0-9_]+)"', loader))
    metrics = set()
    for src in sorted((repo / "server").rglob("*.cc")):
        metrics |= set(re.findall(r'"(encoderd_[a-z0-9_]+)"', src.read_text()))
    dockerfiles = {}
    for name in ["Dockerfile", "Dockerfile.cuda"]:
        text = (repo / "deploy" / name).read_text()
        user = re.search(r"^USER\s+(\d+)(?::(\d+))?\s*$", text, re.M)
        expose = re.search(r"^EXPOSE\s+(.+)$", text, re.M)
        entry = re.search(r"^ENTRYPOINT\s+(.+)$", text, re.M)
        dockerfiles[name] = {
            "uid": int(user.group(1)) if user else None,
            "ports": {int(p.split("/")[0]) for p in expose.group(1).split()} if expose else set(),
            "exec_form": bool(entry) and entry.group(1).strip().startswith("["),
            "healthcheck": re.search(r"^HEALTHCHECK\s", text, re.M) is not None,
            "env": dict(re.findall(r"\b(ENCODERD_[A-Z0-9_]+)=(\S+)", "\n".join(
                line for line in text.splitlines() if not line.lstrip().startswith("#")))),
        }
    return {
        "grpc_port": default["listen"]["port"],
        "metrics_port": default["listen"]["metrics_port"],
        "grace_s": float(default["shutdown"]["grace_s"]),
        "env_vars": env_vars,
        "metrics": metrics,
        "dockerfiles": dockerfiles,
    }


def adapter_metrics(repo: pathlib.Path, facts: dict) -> tuple:
    """The metrics prometheus-adapter exposes (name -> the series it reads),
    and errors in its rules."""
    rules = yaml.safe_load((repo / "deploy/k8s/prometheus-adapter/rules.yaml").read_text())
    exposed, errors = {}, []
    for rule in rules["rules"]["custom"]:
        series = re.match(r"([a-z0-9_]+)\{", rule["seriesQuery"]).group(1)
        if re.sub(r"_(sum|count|bucket)$", "", series) not in facts["metrics"]:
            errors.append(f"prometheus-adapter: series {series} is not exported by server/")
        exposed[rule["name"]["as"]] = series
    return exposed, errors


def dockerfile_errors(facts: dict) -> list:
    errors = []
    for name, d in facts["dockerfiles"].items():
        if not d["uid"]:
            errors.append(f"deploy/{name}: USER must be a numeric non-root uid")
        if {facts["grpc_port"], facts["metrics_port"]} - d["ports"]:
            errors.append(f"deploy/{name}: EXPOSE {sorted(d['ports'])} lacks the default ports")
        if not d["exec_form"]:
            errors.append(f"deploy/{name}: ENTRYPOINT must be exec form (PID 1 gets SIGTERM)")
        if not d["healthcheck"]:
            errors.append(f"deploy/{name}: no HEALTHCHECK")
        errors += device_dtype_errors(f"deploy/{name}", d["env"])
    return errors


def runtime_packages_errors(repo: pathlib.Path) -> list:
    """deploy/scripts/runtime_packages.sh on an ELF that links the dynamic
    loader directly (NEEDED ld-linux-x86-64.so.2, as every CUDA build does:
    CUDA's static cudart references __tls_get_addr) names libc6; ldd prints
    the loader without "=>", and the script once failed on it, which failed
    Dockerfile.cuda's build. A file that is not there fails it."""
    script = repo / "deploy" / "scripts" / "runtime_packages.sh"
    loader = pathlib.Path("/lib64/ld-linux-x86-64.so.2")
    if not loader.exists() or not shutil.which("cc") or not shutil.which("dpkg"):
        return []  # not an x86-64 Debian machine: nothing to check against
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "main.c").write_text("int main(void) { return 0; }\n")
        elf = tmp / "needs_loader"
        subprocess.run(["cc", "-o", str(elf), str(tmp / "main.c"), "-Wl,--no-as-needed", str(loader)],
                       check=True)
        run = subprocess.run(["bash", str(script), str(elf)], capture_output=True, text=True)
        if run.returncode != 0 or run.stdout.split() != ["libc6"]:
            errors.append(f"runtime_packages.sh on an ELF that needs ld-linux-x86-64.so.2 and libc.so.6: "
                          f"rc {run.returncode}, {run.stdout.split()} (want ['libc6']), "
                          f"{run.stderr.strip()[:200]}")
        run = subprocess.run(["bash", str(script), str(tmp / "absent")], capture_output=True, text=True)
        if run.returncode == 0:
            errors.append("runtime_packages.sh on a file that is not there exits 0")
    return errors


def prometheus_scrape_errors(repo: pathlib.Path, base: list, facts: dict) -> list:
    """deploy/prometheus/prometheus.yml finds the replicas the manifests
    deploy: through the DNS of a headless Service of deploy/k8s's base that
    publishes pods that are not ready, at the metrics port (it once listed
    encoderd-0.encoderd and encoderd-1.encoderd, StatefulSet names that a
    Deployment's pods never have; then encoderd-headless, which lists ready
    pods only: EncoderdModelNotReady could never fire)."""
    config = yaml.safe_load((repo / "deploy" / "prometheus" / "prometheus.yml").read_text())
    headless = {d["metadata"]["name"] for d in base
                if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None" and
                d["spec"].get("publishNotReadyAddresses") is True}
    errors = []
    for job in config.get("scrape_configs", []):
        if job.get("static_configs"):
            errors.append(f"prometheus.yml: job {job.get('job_name')}: static targets (pod names change "
                          f"with every rollout); use dns_sd_configs on a headless Service")
        for sd in job.get("dns_sd_configs", []):
            for name in sd.get("names", []):
                if name.split(".")[0] not in headless:
                    errors.append(f"prometheus.yml: {name} is not a headless Service of deploy/k8s/base "
                                  f"that publishes pods not ready ({sorted(headless)})")
            if sd.get("type") != "A" or sd.get("port") != facts["metrics_port"]:
                errors.append(f"prometheus.yml: dns_sd_configs must be type A at port "
                              f"{facts['metrics_port']} ({sd.get('type')}, {sd.get('port')})")
    if not any(job.get("dns_sd_configs") for job in config.get("scrape_configs", [])):
        errors.append("prometheus.yml: no job finds the replicas (dns_sd_configs)")
    return errors


def dashboard_errors(repo: pathlib.Path) -> list:
    """Every series a Grafana panel selects is filtered by the dashboard's
    $instance variable (the request, latency, queue, batch and error panels
    once filtered by $model only: picking a pod changed nothing there)."""
    dash = json.loads((repo / "deploy" / "grafana" / "encoderd-dashboard.json").read_text())
    errors = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            for m in re.finditer(r"(encoderd_[a-z0-9_]+)(\{[^}]*\})?", target["expr"]):
                if 'instance=~"$instance"' not in (m.group(2) or ""):
                    errors.append(f"grafana: panel {panel.get('title')!r}: {m.group(1)} is not "
                                  f"filtered by $instance")
    return errors


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source-dir", type=pathlib.Path, required=True)
    args = parser.parse_args()
    repo = args.source_dir.resolve()
    deploy = repo / "deploy"

    # The Kubernetes manifests and adapter rules (deploy/prometheus has its
    # own checks: promtool test rules).
    yaml_files = sorted(p for d in ("k8s", "kserve") for p in (deploy / d).rglob("*")
                        if p.suffix in (".yaml", ".yml"))
    errors = yamllint(yaml_files)
    facts = source_facts(repo)
    hpa_metrics, adapter_errors = adapter_metrics(repo, facts)
    errors += adapter_errors + dockerfile_errors(facts) + runtime_packages_errors(repo)
    errors += dashboard_errors(repo)

    rendered = {}
    for k in KUSTOMIZATIONS:
        try:
            rendered[k] = kustomize_lite.render(deploy / "k8s" / k)
        except (kustomize_lite.KustomizeError, OSError, yaml.YAMLError) as e:
            errors.append(f"{k}: {e}")
            continue
        image = "Dockerfile.cuda" if k in GPU_OVERLAYS else "Dockerfile"
        errors += [f"{k}: {e}" for e in check_rendered(
            rendered[k], facts, hpa_metrics, facts["dockerfiles"][image]["uid"],
            gpu=k in GPU_OVERLAYS)]

    if "base" in rendered:
        errors += prometheus_scrape_errors(repo, rendered["base"], facts)

    # Every mutation of the CPU overlay must be caught.
    if "overlays/cpu" in rendered:
        for what, mutate in MUTATIONS.items():
            docs = copy.deepcopy(rendered["overlays/cpu"])
            dep = next(d for d in docs if d["kind"] == "Deployment")
            pod = dep["spec"]["template"]["spec"]
            adapter = dict(hpa_metrics)
            mutate({"pod": pod, "containers": pod["containers"], "deployment": dep,
                    "hpa": next(d for d in docs if d["kind"] == "HorizontalPodAutoscaler"),
                    "servicemonitor": next(d for d in docs if d["kind"] == "ServiceMonitor"),
                    "adapter": adapter})
            if not check_rendered(docs, facts, adapter, facts["dockerfiles"]["Dockerfile"]["uid"],
                                  gpu=False):
                errors.append(f"self-test: mutation '{what}' was not detected")

    if "overlays/model-fetch" in rendered:
        errors += fetch_script_errors(rendered["overlays/model-fetch"])
        for what, mutate in FETCH_MUTATIONS.items():
            docs = copy.deepcopy(rendered["overlays/model-fetch"])
            pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
            mutate(pod["containers"][0], pod["initContainers"][0])
            if not check_rendered(docs, facts, hpa_metrics, facts["dockerfiles"]["Dockerfile"]["uid"],
                                  gpu=False):
                errors.append(f"self-test: mutation '{what}' was not detected")

    kserve = {d["kind"]: d for f in sorted((deploy / "kserve").glob("*.yaml"))
              for d in yaml.safe_load_all(f.read_text()) if d}
    errors += kserve_errors(kserve, facts)
    for what, mutate in KSERVE_MUTATIONS.items():
        docs = copy.deepcopy(kserve)
        mutate(docs["ServingRuntime"], docs["InferenceService"])
        if not kserve_errors(docs, facts):
            errors.append(f"self-test: mutation '{what}' was not detected")

    for e in errors:
        print(f"FAIL {e}")
    counts = ", ".join(f"{k}: {len(v)} resources" for k, v in rendered.items())
    print(f"validate_manifests: {len(yaml_files)} YAML files linted; {counts}; "
          f"{len(MUTATIONS) + len(FETCH_MUTATIONS) + len(KSERVE_MUTATIONS)} mutations; "
          f"{len(errors)} failure(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
