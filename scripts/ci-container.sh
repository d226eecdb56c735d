#!/usr/bin/env bash
# CI: builds the container image with podman on a Debian base made by mmdebstrap (no image registry
# is needed), starts the example image, waits for /readyz, sends the README's sample request,
# checks the answer and the health check, then stops it with SIGTERM and checks that it drained.
#   scripts/ci-container.sh
# Environment: CI_WORK (default build-container/: podman's storage, the base image tarball),
# ADAPTERD_SKIP_APT=1 (packages already there), ADAPTERD_CI_PORT (default 18080).
# Runs as root (podman's rootful mode); elsewhere it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=${CI_WORK:-$ROOT/build-container}
PORT=${ADAPTERD_CI_PORT:-18080}
NAME=adapterd-ci-$$
t0=$(date +%s)

if [ "$(id -u)" != 0 ]; then
  echo "ci-container: needs root for podman here; skipped"
  exit 0
fi
if [ "${ADAPTERD_SKIP_APT:-0}" != 1 ]; then
  need=""
  for p in podman runc mmdebstrap netavark aardvark-dns iptables catatonit curl python3; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
  done
  if [ -n "$need" ]; then
    echo "ci-container: installing$need"
    apt-get update -q
    # shellcheck disable=SC2086 # a list of package names
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need
  fi
fi

# podman as this kind of machine allows: runc, cgroupfs, explicit ulimits (no CAP_SYS_RESOURCE),
# storage in the work folder
mkdir -p "$WORK/storage" "$WORK/run"
nofile=$(ulimit -Hn)
[ "$nofile" = unlimited ] && nofile=65536
[ "$nofile" -gt 20000 ] && nofile=20000
cat > "$WORK/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=30000:30000"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
cat > "$WORK/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$WORK/storage"
runroot = "$WORK/run"
CONF
export CONTAINERS_CONF=$WORK/containers.conf CONTAINERS_STORAGE_CONF=$WORK/storage.conf

# the base image: a minimal bookworm from the machine's own Debian mirror
if ! podman image exists docker.io/library/debian:bookworm-slim; then
  srcs=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  mirror=$(grep -oE 'https?://[^ ]+/debian/?( |$)' <<<"$srcs" | head -n1 | tr -d ' ' || true)
  security=$(grep -oE 'https?://[^ ]+/debian-security/?( |$)' <<<"$srcs" | head -n1 | tr -d ' ' || true)
  if [ -z "$mirror" ]; then
    echo "ci-container: no Debian mirror found in /etc/apt/sources.list*: cannot build the base image"; exit 1
  fi
  security=${security:-${mirror%/debian*}/debian-security}
  echo "ci-container: mmdebstrap bookworm from $mirror"
  # like the official slim image: no manuals, docs (but copyrights) or translations, no apt lists
  # shellcheck disable=SC2016 # $1 is the hook's argument (the root file system), expanded by mmdebstrap
  mmdebstrap --quiet --variant=minbase \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*' \
    bookworm "$WORK/rootfs.tar" \
    "deb $mirror bookworm main" "deb $mirror bookworm-updates main" "deb $security bookworm-security main"
  podman import --change 'CMD ["/bin/bash"]' "$WORK/rootfs.tar" localhost/debian:bookworm
  podman tag localhost/debian:bookworm docker.io/library/debian:bookworm-slim
  rm -f "$WORK/rootfs.tar"
fi

rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "ci-container: podman build (runtime and example targets)"
podman build --pull=never --format docker --network host --build-arg REVISION="$rev" -t localhost/adapterd:ci .
podman build --pull=never --format docker --network host --build-arg REVISION="$rev" --target example \
  -t localhost/adapterd:ci-example .
for img in localhost/adapterd:ci localhost/adapterd:ci-example; do
  echo "ci-container: $img weighs $(podman image inspect --format '{{.Size}}' "$img" | awk '{printf "%.1f MB", $1 / 1e6}')"
done
podman image inspect --format '{{json .Config.Healthcheck}}' localhost/adapterd:ci | grep -q healthz ||
  { echo "ci-container: the image lost its HEALTHCHECK"; exit 1; }
[ "$(podman image inspect --format '{{.Config.User}}' localhost/adapterd:ci)" = "10001:10001" ] ||
  { echo "ci-container: the image does not run as the non-root user"; exit 1; }

cleanup() { podman rm -f "$NAME" >/dev/null 2>&1 || true; }
trap cleanup EXIT
podman run -d --init --name "$NAME" -p "127.0.0.1:$PORT:8080" localhost/adapterd:ci-example >/dev/null
start=$(date +%s.%N)
ready=0
for _ in $(seq 1 600); do
  if curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.1
done
if [ "$ready" != 1 ]; then
  echo "ci-container: not ready within 60 s"; podman logs "$NAME" | tail -n 30; exit 1
fi
echo "ci-container: ready $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}') s after podman run"

# the README's sample request
body=$(curl -sf "http://127.0.0.1:$PORT/v1/predict" -H 'Content-Type: application/json' \
  -d '{"inputs": ["the team played a wonderful game", "i feel so sad that the shares fell again"], "tasks": ["sentiment", "topic", "emotion"]}')
python3 - "$body" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
res = d["results"]
assert len(res) == 2, f"two inputs, {len(res)} results"
for r in res:
    for t in ("sentiment", "topic", "emotion"):
        a = r["tasks"][t]
        assert a["label"] in a["scores"], f"{t}: label {a['label']} not among {list(a['scores'])}"
        s = sum(a["scores"].values())
        assert abs(s - 1) < 1e-3, f"{t}: scores sum to {s}"
print("ci-container: sample request answered:", {t: res[0]["tasks"][t]["label"] for t in res[0]["tasks"]})
PY
podman healthcheck run "$NAME" >/dev/null 2>&1 || true # needs systemd to schedule; run it by hand:
podman exec "$NAME" /bin/bash -c 'exec 3<>/dev/tcp/127.0.0.1/8080 && printf "GET /healthz HTTP/1.0\r\n\r\n" >&3 && head -n1 <&3' |
  grep -q ' 200 ' || { echo "ci-container: health check failed"; exit 1; }
echo "ci-container: health check passes"

# SIGTERM drains: exit status 0
podman stop -t 30 "$NAME" >/dev/null
code=$(podman inspect --format '{{.State.ExitCode}}' "$NAME")
podman logs "$NAME" 2>&1 | tail -n 3
[ "$code" = 0 ] || { echo "ci-container: exit status $code after SIGTERM"; exit 1; }
echo "ci-container: stopped by SIGTERM, exit 0; $(($(date +%s) - t0)) s in all"
