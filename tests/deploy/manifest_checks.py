"""Checks on rendered Kubernetes manifests of encoderd (see
validate_manifests.py). check_rendered() returns a list of error strings,
empty when the manifests hold every property."""
import re

API_VERSIONS = {
    "Deployment": "apps/v1",
    "Service": "v1",
    "PodDisruptionBudget": "policy/v1",
    "HorizontalPodAutoscaler": "autoscaling/v2",
    "ServiceMonitor": "monitoring.coreos.com/v1",
    "PersistentVolumeClaim": "v1",
}
_SUFFIX = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


# The dtypes each device runs (engine/runtime/encoder.h, CheckDeviceDType);
# the daemon refuses any other pair when it reads its config.
# Every spelling core/dtype.cc's ParseDType accepts.
DEVICE_DTYPES = {"cpu": {"float32", "fp32", "float", "bfloat16", "bf16", "int8"},
                 "cuda": {"float16", "fp16", "half", "bfloat16", "bf16"}}


def device_dtype_errors(where: str, env: dict) -> list:
    device = env.get("ENCODERD_DEVICE", "cpu")
    dtype = env.get("ENCODERD_DTYPE", "float32")  # config/default.yaml's
    if dtype in DEVICE_DTYPES.get(device, set()):
        return []
    return [f"{where}: device {device} does not run dtype {dtype} "
            f"(set ENCODERD_DTYPE to one of {sorted(DEVICE_DTYPES.get(device, set()))})"]


def quantity(value) -> float:
    """A Kubernetes resource quantity ("500m", "2", "1Gi") as a number."""
    m = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(value))
    if not m or (m.group(2) and m.group(2) not in _SUFFIX):
        raise ValueError(f"bad quantity {value!r}")
    return float(m.group(1)) * _SUFFIX.get(m.group(2), 1)


def _subset(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def _prestop_seconds(container: dict) -> float:
    pre = container.get("lifecycle", {}).get("preStop")
    if not pre:
        return 0.0
    if "sleep" in pre:
        return float(pre["sleep"]["seconds"])
    cmd = pre.get("exec", {}).get("command", [])
    if len(cmd) == 2 and cmd[0] in ("sleep", "/bin/sleep"):
        return float(cmd[1])
    raise ValueError(f"preStop {pre} has no duration this check understands")


def _check_container(c: dict, pod: dict, facts: dict, image_uid, gpu: bool) -> list:
    errors = []
    env = _env(c)
    for name in env:
        if name.startswith("ENCODERD_") and name not in facts["env_vars"]:
            errors.append(f"env {name} is not read by encoderd (server/config/config_loader.cc)")
    grpc_port = int(env.get("ENCODERD_PORT", facts["grpc_port"]))
    metrics_port = int(env.get("ENCODERD_METRICS_PORT", facts["metrics_port"]))
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    if ports.get("grpc") != grpc_port:
        errors.append(f"container port 'grpc' is {ports.get('grpc')}, encoderd listens on {grpc_port}")
    if ports.get("metrics") != metrics_port:
        errors.append(f"container port 'metrics' is {ports.get('metrics')}, "
                      f"encoderd serves metrics on {metrics_port}")

    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        p = c.get(probe)
        if not p:
            errors.append(f"no {probe}")
        elif set(p) & {"httpGet", "exec", "tcpSocket"} or p.get("grpc", {}).get("port") != grpc_port:
            errors.append(f"{probe} must be a native gRPC probe on port {grpc_port}: {p}")

    # Clients keep their connections: without a connection age, replicas the
    # autoscaler adds get no calls from them (docs: deploy/README.md).
    age_s = float(env.get("ENCODERD_MAX_CONNECTION_AGE_S", 0) or 0)
    if not age_s > 0:
        errors.append("ENCODERD_MAX_CONNECTION_AGE_S must be set (> 0) so that clients reach "
                      "new replicas")

    grace_s = float(env.get("ENCODERD_SHUTDOWN_GRACE_S", facts["grace_s"]))
    try:
        pre = _prestop_seconds(c)
    except (ValueError, KeyError) as e:
        errors.append(str(e))
        pre = 0.0
    term = pod.get("terminationGracePeriodSeconds", 30)
    if not term > grace_s + pre:
        errors.append(f"terminationGracePeriodSeconds {term} must exceed drain {grace_s} s "
                      f"+ preStop {pre} s")

    sc, psc = c.get("securityContext", {}), pod.get("securityContext", {})
    if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")):
        errors.append("runAsNonRoot is not set")
    uid = sc.get("runAsUser", psc.get("runAsUser"))
    if uid == 0 or (image_uid and uid not in (None, image_uid)):
        errors.append(f"runAsUser {uid} differs from the image's USER {image_uid}")
    if sc.get("allowPrivilegeEscalation") is not False:
        errors.append("allowPrivilegeEscalation must be false")
    if "ALL" not in sc.get("capabilities", {}).get("drop", []):
        errors.append("capabilities must drop ALL")
    seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
    if seccomp != "RuntimeDefault":
        errors.append(f"seccompProfile is {seccomp}, want RuntimeDefault")
    if sc.get("readOnlyRootFilesystem") is not True:
        errors.append("readOnlyRootFilesystem must be true")
    empty_dirs = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
    if not any(m["mountPath"] == "/tmp" and m["name"] in empty_dirs
               for m in c.get("volumeMounts", [])):
        errors.append("/tmp must be an emptyDir (the root filesystem is read-only)")

    res = c.get("resources", {})
    req, lim = res.get("requests", {}), res.get("limits", {})
    for kind in ("cpu", "memory"):
        if kind not in req or kind not in lim:
            errors.append(f"resources need requests and limits of {kind}")
        elif quantity(req[kind]) > quantity(lim[kind]):
            errors.append(f"{kind} request {req[kind]} exceeds limit {lim[kind]}")
    if gpu:
        if quantity(lim.get("nvidia.com/gpu", 0)) < 1:
            errors.append("GPU variant needs an nvidia.com/gpu limit")
        if env.get("ENCODERD_DEVICE") != "cuda":
            errors.append("GPU variant must set ENCODERD_DEVICE=cuda")
        errors += device_dtype_errors("GPU variant", env)
    elif "nvidia.com/gpu" in lim or env.get("ENCODERD_DEVICE", "cpu") != "cpu":
        errors.append("CPU variant asks for a GPU")
    threads = int(env.get("ENCODERD_NUM_THREADS", 0) or 0)
    if "cpu" in req and threads > quantity(req["cpu"]):
        errors.append(f"num_threads {threads} exceeds the CPU request {req['cpu']}")
    return errors


# Series an HPA may scale on: the work a pod does.
WORK_SERIES = {"encoderd_queue_duration_seconds_sum", "encoderd_batch_tokens_total"}


def _restricted(sc: dict) -> bool:
    return (sc.get("runAsNonRoot") is True and sc.get("allowPrivilegeEscalation") is False and
            sc.get("readOnlyRootFilesystem") is True and
            "ALL" in sc.get("capabilities", {}).get("drop", []))


def model_source_errors(c: dict, pod: dict) -> list:
    """Where the model comes from: every mount backed by a pod volume, the
    model directory under one of the server's mounts (unless it is the
    image's own), volumes from a claim or filled by an init container mounted
    read-only by the server, and init containers restricted, bounded, and,
    when they download, over HTTPS with a checksum checked."""
    errors = []
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
    for m in mounts.values():
        if m["name"] not in volumes:
            errors.append(f"volumeMount {m['mountPath']} names no pod volume '{m['name']}'")
    model_dir = _env(c).get("ENCODERD_MODEL_DIR")
    if model_dir and not model_dir.startswith("/models/langid"):
        under = [m for path, m in mounts.items()
                 if model_dir == path or model_dir.startswith(path.rstrip("/") + "/")]
        if not under:
            errors.append(f"ENCODERD_MODEL_DIR {model_dir} is under none of the container's mounts")
        for m in under:
            v = volumes.get(m["name"], {})
            if ("persistentVolumeClaim" in v or "emptyDir" in v) and not m.get("readOnly"):
                errors.append(f"the model volume at {m['mountPath']} must be mounted readOnly")
    for init in pod.get("initContainers", []):
        where = f"initContainer {init.get('name')}"
        if not _restricted(init.get("securityContext", {})):
            errors.append(f"{where}: securityContext must be restricted (non-root, no "
                          "escalation, read-only root, drop ALL)")
        if "memory" not in init.get("resources", {}).get("limits", {}):
            errors.append(f"{where}: needs a memory limit")
        script = " ".join(init.get("command", []) + init.get("args", []))
        if re.search(r"\b(curl|wget)\b", script):
            if not re.search(r"sha256sum\s+-c", script):
                errors.append(f"{where}: downloads without checking a SHA-256 (sha256sum -c)")
            url = _env(init).get("MODEL_URL", "")
            if not url.startswith("https://"):
                errors.append(f"{where}: MODEL_URL {url!r} is not https://")
            if not re.fullmatch(r"[0-9a-f]{64}", _env(init).get("MODEL_SHA256", "")):
                errors.append(f"{where}: MODEL_SHA256 must be 64 hex digits")
    return errors


def check_rendered(docs: list, facts: dict, hpa_metrics: set, image_uid, gpu: bool) -> list:
    errors = []
    seen = set()
    for d in docs:
        kind, name = d.get("kind"), d.get("metadata", {}).get("name")
        if kind not in API_VERSIONS or d.get("apiVersion") != API_VERSIONS[kind] or not name:
            errors.append(f"unexpected resource {d.get('apiVersion')}/{kind}/{name}")
        if (kind, name) in seen:
            errors.append(f"duplicate {kind}/{name}")
        seen.add((kind, name))
    by_kind = {k: [d for d in docs if d.get("kind") == k] for k in API_VERSIONS}
    if len(by_kind["Deployment"]) != 1:
        return errors + [f"want exactly one Deployment, got {len(by_kind['Deployment'])}"]
    dep = by_kind["Deployment"][0]
    pod_labels = dep["spec"]["template"]["metadata"].get("labels", {})
    if not _subset(dep["spec"]["selector"].get("matchLabels", {}), pod_labels):
        errors.append("Deployment selector does not match its pod labels")
    pod = dep["spec"]["template"]["spec"]
    server = [c for c in pod.get("containers", []) if c.get("name") == "encoderd"]
    if len(server) != 1:
        return errors + ["no container named encoderd"]
    c = server[0]
    errors += [f"Deployment/{dep['metadata']['name']}: {e}"
               for e in _check_container(c, pod, facts, image_uid, gpu) +
               model_source_errors(c, pod)]
    container_ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}

    headless = cluster_ip = 0
    for s in by_kind["Service"]:
        sname = s["metadata"]["name"]
        if not _subset(s["spec"].get("selector", {}), pod_labels):
            errors.append(f"Service/{sname}: selector matches no encoderd pod")
        names = {}
        for p in s["spec"].get("ports", []):
            target = p.get("targetPort", p.get("port"))
            resolved = container_ports.get(target) if isinstance(target, str) else target
            if resolved not in container_ports.values():
                errors.append(f"Service/{sname}: targetPort {target} is no container port")
            names[p.get("name")] = resolved
        # A Service for scraping alone (service-metrics.yaml) has no gRPC port.
        if names.get("grpc") != container_ports.get("grpc") and set(names) != {"metrics"}:
            errors.append(f"Service/{sname}: no 'grpc' port to the gRPC container port")
        # Headless for gRPC clients (client-side balancing): a gRPC port; a
        # scraping one alone (service-metrics.yaml) does not count.
        if s["spec"].get("clusterIP") == "None":
            headless += names.get("grpc") == container_ports.get("grpc")
        elif names.get("metrics") == container_ports.get("metrics"):
            cluster_ip += 1
    if not headless or not cluster_ip:
        errors.append("need a ClusterIP Service with grpc+metrics ports and a headless Service "
                      "with a grpc port")

    if not any(_subset(p["spec"].get("selector", {}).get("matchLabels", {}), pod_labels) and
               ("maxUnavailable" in p["spec"] or "minAvailable" in p["spec"])
               for p in by_kind["PodDisruptionBudget"]):
        errors.append("no PodDisruptionBudget covering the encoderd pods")

    for h in by_kind["HorizontalPodAutoscaler"]:
        spec = h["spec"]
        ref = spec["scaleTargetRef"]
        if (ref.get("kind"), ref.get("name")) != ("Deployment", dep["metadata"]["name"]):
            errors.append(f"HPA targets {ref}, not the Deployment")
        if not 1 <= spec.get("minReplicas", 1) <= spec["maxReplicas"]:
            errors.append("HPA needs 1 <= minReplicas <= maxReplicas")
        for m in spec.get("metrics", []):
            name = m.get(m["type"].lower(), {}).get("metric", {}).get("name")
            if m["type"] not in ("Pods", "Object", "External"):
                continue
            if name not in hpa_metrics:
                errors.append(f"HPA metric {name} is not served by prometheus-adapter rules")
            elif hpa_metrics[name] not in WORK_SERIES:
                errors.append(f"HPA metric {name} reads {hpa_metrics[name]}, not work: scale on "
                              f"queue wait or tokens per second (calls carry 1-256 texts and "
                              f"count refusals)")
        if "replicas" in dep["spec"]:
            errors.append("the Deployment sets spec.replicas while an HPA scales it: every "
                          "apply resets the replica count")
    if by_kind["HorizontalPodAutoscaler"] and not by_kind["ServiceMonitor"]:
        errors.append("HPA on Prometheus metrics but no ServiceMonitor scrapes them")
    for sm in by_kind["ServiceMonitor"]:
        if "release" not in sm["metadata"].get("labels", {}):
            errors.append("ServiceMonitor has no 'release' label: kube-prometheus-stack selects "
                          "ServiceMonitors by release=<its Helm release>")
        targets = [s for s in by_kind["Service"]
                   if _subset(sm["spec"]["selector"].get("matchLabels", {}),
                              s["metadata"].get("labels", {}))]
        for ep in sm["spec"].get("endpoints", []):
            ok = [s for s in targets for p in s["spec"]["ports"] if p.get("name") == ep.get("port")]
            if not ok or ep.get("path", "/metrics") != "/metrics":
                errors.append(f"ServiceMonitor endpoint {ep} reaches no Service metrics port")
    return errors
