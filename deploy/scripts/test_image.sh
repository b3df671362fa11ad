#!/usr/bin/env bash
# Builds the CPU image (deploy/Dockerfile) with podman and checks it end to
# end: image metadata (non-root user, exec-form entrypoint, health check,
# ports), then starts the container and calls it on loopback: gRPC health,
# the image's own HEALTHCHECK command, Embed and Classify (scripts/client.py),
# /metrics, and finally SIGTERM -> drain -> exit status 0.
#
# Nothing is pulled from a registry: the debian:bookworm base is made with
# debootstrap and `podman import` (apt inside the build reaches Debian's
# archive). Where `podman run` cannot start containers (nested sandboxes), the
# image's filesystem is mounted (`podman image mount`) and the entrypoint is
# started in a chroot as the image's user, with the image's working directory.
#
# Not part of the default test command (slow: the build stage compiles
# encoderd). Needs root, podman, debootstrap (Debian: apt-get install podman
# debootstrap) and the repository's Python client deps (scripts/setup.sh).
# Usage: sudo deploy/scripts/test_image.sh [--skip-build] [--tag IMAGE]
#        [--port N] [--metrics-port N] [--jobs N]
set -euo pipefail
cd "$(dirname "$0")/../.."

TAG=localhost/encoderd:cpu-test
BASE=localhost/debian:bookworm
PORT=50551
METRICS_PORT=9451
JOBS=2
BUILD=1
PY=/usr/bin/python3
while (($#)); do
  case "$1" in
    --skip-build) BUILD=0 ;;
    --tag) TAG=$2; shift ;;
    --port) PORT=$2; shift ;;
    --metrics-port) METRICS_PORT=$2; shift ;;
    --jobs) JOBS=$2; shift ;;
    *) echo "test_image: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "test_image: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
command -v podman >/dev/null || fail "podman not installed (apt-get install podman)"

# ---- base image ------------------------------------------------------------
if ! podman image exists "$BASE"; then
  command -v debootstrap >/dev/null || fail "debootstrap not installed"
  root=$(mktemp -d /tmp/encoderd-bookworm.XXXXXX)
  log "debootstrap bookworm -> $root"
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >&2
  # As Debian's official image: no downloaded packages or package lists
  # (80 MB that debootstrap leaves behind).
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | podman import - "$BASE" >&2
  rm -rf "$root"
fi

# ---- build -----------------------------------------------------------------
if ((BUILD)); then
  log "building $TAG (this compiles encoderd)"
  start=$(date +%s)
  nice -n 19 podman build --isolation chroot --format docker \
    --build-arg DEBIAN_IMAGE="$BASE" --build-arg BUILD_JOBS="$JOBS" \
    -f deploy/Dockerfile -t "$TAG" .
  log "build took $(($(date +%s) - start)) s"
fi
podman image exists "$TAG" || fail "no image $TAG (run without --skip-build)"

# ---- image metadata --------------------------------------------------------
inspect() { podman image inspect --format "$1" "$TAG"; }
size=$(inspect '{{.Size}}')
log "image size: $size bytes ($((size / 1000000)) MB)"
# The runtime image carries no LibTorch (deploy/Dockerfile): 300 MB at most.
[ "$size" -le 300000000 ] || fail "image is $((size / 1000000)) MB, over 300 MB"
[ "$(inspect '{{.Config.User}}')" = "10001:10001" ] || fail "image user is not 10001:10001"
[ "$(inspect '{{json .Config.Entrypoint}}')" = '["/opt/encoderd/bin/encoderd","serve"]' ] ||
  fail "entrypoint is not the exec form of encoderd serve: $(inspect '{{json .Config.Entrypoint}}')"
inspect '{{json .Config.Healthcheck}}' | grep -q '"health"' || fail "no HEALTHCHECK (encoderd health)"
for p in 50051 9400; do
  inspect '{{json .Config.ExposedPorts}}' | grep -q "\"$p/tcp\"" || fail "port $p not exposed"
done

# ---- start -----------------------------------------------------------------
NAME=encoderd-test-$$
MNT=""
PID=""
MODE=""
cleanup() {
  if [ "$MODE" = podman ]; then
    podman rm -f "$NAME" >/dev/null 2>&1 || true
  elif [ "$MODE" = chroot ]; then
    [ -z "$PID" ] || kill -KILL "$PID" 2>/dev/null || true
    podman image unmount "$TAG" >/dev/null 2>&1 || true
    # The container `podman run` created before it failed to start.
    podman rm -f "$NAME" >/dev/null 2>&1 || true
  fi
  rm -f "/tmp/$NAME.err"
}
trap cleanup EXIT
# The ports through the environment, not flags after the image name: the
# image's HEALTHCHECK (encoderd health) reads ENCODERD_PORT, and is run as
# the image states it below.
RUN_ENV=(ENCODERD_PORT="$PORT" ENCODERD_METRICS_PORT="$METRICS_PORT")

if podman run -d --name "$NAME" --network host --read-only --tmpfs /tmp \
  --cap-drop ALL --security-opt no-new-privileges \
  "${RUN_ENV[@]/#/--env=}" "$TAG" >/dev/null 2>/tmp/$NAME.err; then
  MODE=podman
  log "started with podman run (container $NAME)"
  in_image() { podman exec "$NAME" "$@"; }
else
  log "podman run failed ($(tail -n1 /tmp/$NAME.err)); starting the image's filesystem in a chroot"
  MODE=chroot
  MNT=$(podman image mount "$TAG")
  user=$(inspect '{{.Config.User}}')
  workdir=$(inspect '{{.Config.WorkingDir}}')
  # The image's environment (PATH) and working directory, the image's user,
  # /proc and /dev from the host in a private mount namespace, the
  # entrypoint exec'ed so that SIGTERM reaches encoderd itself.
  mapfile -t envs < <(inspect '{{range .Config.Env}}{{println .}}{{end}}' | sed '/^$/d')
  envs+=("${RUN_ENV[@]}")
  unshare --mount --propagation private -- sh -c '
    mnt=$1; user=$2; dir=$3; shift 3
    mount -t proc proc "$mnt/proc" && mount --rbind /dev "$mnt/dev" &&
    mount -t tmpfs tmpfs "$mnt/tmp" || exit 97
    exec "$@"' sh "$MNT" "$user" "$workdir" \
    chroot --userspec="$user" "$MNT" /usr/bin/env -i "${envs[@]}" /bin/sh -c \
    "cd '$workdir' && exec /opt/encoderd/bin/encoderd serve" &
  PID=$!
  in_image() {
    nsenter --target "$PID" --mount -- chroot --userspec="$user" "$MNT" /usr/bin/env -i "${envs[@]}" "$@"
  }
fi

log "waiting for SERVING on 127.0.0.1:$PORT"
# The container's own HEALTHCHECK command, exactly as the image states it
# (CMD form), run inside the image with the container's environment.
mapfile -t healthcheck < <(inspect '{{range .Config.Healthcheck.Test}}{{println .}}{{end}}' | sed '/^$/d')
[ "${healthcheck[0]:-}" = CMD ] && ((${#healthcheck[@]} > 1)) ||
  fail "HEALTHCHECK is not in CMD form: ${healthcheck[*]:-none}"
healthcheck=("${healthcheck[@]:1}")
for _ in $(seq 120); do
  in_image "${healthcheck[@]}" >/dev/null 2>&1 && break
  if [ "$MODE" = chroot ] && ! kill -0 "$PID" 2>/dev/null; then fail "encoderd exited during start"; fi
  sleep 1
done
in_image "${healthcheck[@]}" || fail "the image's HEALTHCHECK (${healthcheck[*]}) not passing after 120 s"
log "health: SERVING (the image's HEALTHCHECK: ${healthcheck[*]})"
in_image /opt/encoderd/bin/encoderd health --service langid || fail "model langid not SERVING"

out=$($PY scripts/client.py --address "127.0.0.1:$PORT" embed "Hello from the container") ||
  fail "Embed failed"
echo "$out" | head -c 300 >&2; echo >&2
[ -n "$out" ] || fail "Embed returned nothing"
out=$($PY scripts/client.py --address "127.0.0.1:$PORT" classify "Bonjour tout le monde" \
  "Guten Morgen, wie geht es dir?") || fail "Classify failed"
echo "$out" >&2
# One labelled line per text (the labels themselves are the model's business).
[ "$(echo "$out" | grep -c "'Bonjour tout le monde'\\|'Guten Morgen, wie geht es dir?'")" = 2 ] ||
  fail "Classify did not answer both texts"

# /metrics, where this build serves it.
if metrics=$($PY -c 'import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
  "http://127.0.0.1:$METRICS_PORT/metrics" 2>/dev/null); then
  echo "$metrics" | grep -q '^encoderd_requests_total' || fail "/metrics has no encoderd_requests_total"
  log "metrics: $(echo "$metrics" | grep -c '^encoderd_') encoderd_* samples"
else
  log "no /metrics on port $METRICS_PORT (binary built without the metrics endpoint?)"
fi

# ---- SIGTERM ---------------------------------------------------------------
log "SIGTERM"
if [ "$MODE" = podman ]; then
  podman kill --signal TERM "$NAME" >/dev/null
  rc=$(timeout 60 podman wait "$NAME") || fail "container did not stop within 60 s"
  podman logs "$NAME" 2>&1 | tail -n 5 >&2
else
  kill -TERM "$PID"
  set +e
  if timeout 60 tail --pid="$PID" -f /dev/null; then
    wait "$PID"
    rc=$?
  else
    rc="still running 60 s after SIGTERM"
  fi
  set -e
  PID=""
fi
[ "$rc" = 0 ] || fail "exit status after SIGTERM: $rc (want 0)"
log "exit status after SIGTERM: 0"
log "PASS ($MODE)"
