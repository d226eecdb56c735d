#!/usr/bin/env bash
# CI: builds the container image with podman on a Debian base made by mmdebstrap (no image registry
# is needed), starts the example image, waits for /readyz, sends the README's sample request,
# checks the answer and the health check, then stops it with SIGTERM and checks that it drained. Then the
# same for linux/arm64: a base made by mmdebstrap for arm64, the image built on it (adapterd cross-compiled
# in an amd64 build stage, the runtime stage's apt-get under qemu-user), the
# same smoke test run under emulation (binfmt_misc), and one manifest list naming both images.
#   scripts/ci-container.sh
# Environment: CI_WORK (default build-container/: podman's storage, the base image tarball),
# ADAPTERD_SKIP_APT=1 (packages already there), ADAPTERD_CI_PORT (default 18080; arm64's is one above),
# ADAPTERD_CI_ARM64=0 (the amd64 image only), ADAPTERD_CI_AMD64=0 (the arm64 image only).
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
  for p in podman runc mmdebstrap netavark aardvark-dns iptables catatonit curl python3 qemu-user-static binfmt-support arch-test; do
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

# the base image: a minimal bookworm from the machine's own Debian mirror, for an architecture (amd64:
# tagged as debian:bookworm-slim, so that the Dockerfile's default base needs no registry; arm64:
# localhost/debian:bookworm-arm64, its package scripts run by qemu-user through binfmt_misc)
base_image() {
  local arch=$1 tag=$2
  podman image exists "$tag" && return 0
  srcs=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  mirror=$(grep -oE 'https?://[^ ]+/debian/?( |$)' <<<"$srcs" | head -n1 | tr -d ' ' || true)
  security=$(grep -oE 'https?://[^ ]+/debian-security/?( |$)' <<<"$srcs" | head -n1 | tr -d ' ' || true)
  if [ -z "$mirror" ]; then
    echo "ci-container: no Debian mirror found in /etc/apt/sources.list*: cannot build the base image"; exit 1
  fi
  security=${security:-${mirror%/debian*}/debian-security}
  echo "ci-container: mmdebstrap bookworm ($arch) from $mirror"
  local b0
  b0=$(date +%s)
  # like the official slim image: no manuals, docs (but copyrights) or translations, no apt lists
  # shellcheck disable=SC2016 # $1 is the hook's argument (the root file system), expanded by mmdebstrap
  mmdebstrap --quiet --variant=minbase --architectures="$arch" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*' \
    bookworm "$WORK/rootfs-$arch.tar" \
    "deb $mirror bookworm main" "deb $mirror bookworm-updates main" "deb $security bookworm-security main"
  podman import --arch "$arch" --change 'CMD ["/bin/bash"]' "$WORK/rootfs-$arch.tar" "$tag"
  rm -f "$WORK/rootfs-$arch.tar"
  echo "ci-container: base image $tag ($arch) in $(($(date +%s) - b0)) s"
}
if ! podman image exists docker.io/library/debian:bookworm-slim; then
  base_image amd64 localhost/debian:bookworm
  podman tag localhost/debian:bookworm docker.io/library/debian:bookworm-slim
fi

rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ "${ADAPTERD_CI_AMD64:-1}" != 0 ]; then
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
fi

# The smoke test of one image: start it, wait for /readyz (within wait_s), the README's sample request, the
# health check, Redoc's licence (when the host installed Redoc), SIGTERM drains with exit status 0.
NAMES=""
cleanup() { for n in $NAMES; do podman rm -f "$n" >/dev/null 2>&1 || true; done; }
trap cleanup EXIT
smoke() {
  local img=$1 port=$2 wait_s=$3 name="$NAME-$4"
  NAMES="$NAMES $name"
  podman run -d --init --name "$name" -p "127.0.0.1:$port:8080" "$img" >/dev/null
  local start ready=0
  start=$(date +%s.%N)
  for _ in $(seq 1 $((wait_s * 10))); do
    if curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then ready=1; break; fi
    sleep 0.1
  done
  if [ "$ready" != 1 ]; then
    echo "ci-container: $img not ready within $wait_s s"; podman logs "$name" | tail -n 30; exit 1
  fi
  echo "ci-container: $img ready $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}') s after podman run"
  echo "ci-container: $img runs $(podman exec "$name" /usr/local/bin/adapterd version)"

  # the README's sample request
  local body
  body=$(curl -sf "http://127.0.0.1:$port/v1/predict" -H 'Content-Type: application/json' \
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
  podman healthcheck run "$name" >/dev/null 2>&1 || true # needs systemd to schedule; run it by hand:
  podman exec "$name" /bin/bash -c 'exec 3<>/dev/tcp/127.0.0.1/8080 && printf "GET /healthz HTTP/1.0\r\n\r\n" >&3 && head -n1 <&3' |
    grep -q ' 200 ' || { echo "ci-container: health check failed"; exit 1; }
  echo "ci-container: health check passes"

  # GET /docs: Redoc's bundle and its licence texts are compiled in when this host had them installed
  # (scripts/setup.sh, in docs/redoc; .dockerignore lets them into the build)
  if [ -f "$ROOT/docs/redoc/node_modules/redoc/bundles/redoc.standalone.js" ]; then
    local lic
    lic=$(curl -sf "http://127.0.0.1:$port/docs/redoc.standalone.js.LICENSE.txt" || true)
    [[ "$lic" == *"The MIT License"* ]] ||
      { echo "ci-container: the image serves no Redoc licence at /docs/redoc.standalone.js.LICENSE.txt"; exit 1; }
    echo "ci-container: GET /docs serves Redoc, its licence beside it"
  fi

  # SIGTERM drains: exit status 0
  podman stop -t 60 "$name" >/dev/null
  local code
  code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
  podman logs "$name" 2>&1 | tail -n 3
  [ "$code" = 0 ] || { echo "ci-container: exit status $code after SIGTERM"; exit 1; }
  echo "ci-container: stopped by SIGTERM, exit 0"
}

if [ "${ADAPTERD_CI_AMD64:-1}" != 0 ]; then
  smoke localhost/adapterd:ci-example "$PORT" 60 amd64
  echo "ci-container: amd64 image done, $(($(date +%s) - t0)) s in all"
fi

# ---- linux/arm64, under emulation ----
if [ "${ADAPTERD_CI_ARM64:-1}" = 0 ]; then exit 0; fi
[ -e /proc/sys/fs/binfmt_misc/status ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
if [ -e /proc/sys/fs/binfmt_misc/status ] && [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  update-binfmts --enable qemu-aarch64 2>/dev/null || update-binfmts --import qemu-aarch64 || true
fi
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  if [ -e /proc/sys/fs/binfmt_misc/status ]; then why="binfmt_misc is mounted but has no qemu-aarch64 entry"; else why="binfmt_misc is not mounted"; fi
  echo "ci-container: cannot register qemu-aarch64 with binfmt_misc here ($why): no arm64 image"
  exit 1
fi
grep -q '^flags:.*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 ||
  echo "ci-container: warning: qemu-aarch64's binfmt entry lacks flag F; containers may not find the emulator"
a0=$(date +%s)
base_image arm64 localhost/debian:bookworm-arm64
# Not `--platform linux/arm64`: podman 4.3 then finds no amd64 image for the build stage with --pull=never
# ("image not known", FROM --platform=$BUILDPLATFORM notwithstanding). A plain build does it: the build stage
# on the amd64 base, told TARGETARCH=arm64 (it cross-compiles), the runtime stages on the arm64 base (their
# RUN steps under qemu-user through binfmt_misc); the image takes its architecture, arm64, from that base.
echo "ci-container: podman build for linux/arm64 (runtime and example targets)"
for target in runtime example; do
  tag=localhost/adapterd:ci-arm64; [ "$target" = example ] && tag=localhost/adapterd:ci-example-arm64
  podman build --pull=never --format docker --network host --build-arg TARGETARCH=arm64 --build-arg REVISION="$rev" \
    --build-arg BASE=localhost/debian:bookworm-arm64 --build-arg BUILD_BASE=docker.io/library/debian:bookworm-slim \
    --target "$target" -t "$tag" .
done
for img in localhost/adapterd:ci-arm64 localhost/adapterd:ci-example-arm64; do
  arch=$(podman image inspect --format '{{.Architecture}}' "$img")
  [ "$arch" = arm64 ] || { echo "ci-container: $img is $arch, not arm64"; exit 1; }
  echo "ci-container: $img ($arch) weighs $(podman image inspect --format '{{.Size}}' "$img" | awk '{printf "%.1f MB", $1 / 1e6}')"
done
podman run --rm --entrypoint /bin/sh localhost/adapterd:ci-arm64 -c 'file=/usr/local/bin/adapterd; head -c 20 $file | od -An -tx1 | tr -d " \n"' |
  grep -Eq '^7f454c4602[0-9a-f]{26}b700$' || { echo "ci-container: the arm64 image's adapterd is not an aarch64 ELF"; exit 1; } # ELF64, e_machine 183
# one manifest list naming both images: what a registry serves to amd64 and arm64 nodes under one tag
for list in localhost/adapterd:ci-multi localhost/adapterd:ci-example-multi; do
  podman manifest exists "$list" && podman manifest rm "$list" >/dev/null
done
podman manifest create localhost/adapterd:ci-multi >/dev/null
podman manifest add localhost/adapterd:ci-multi containers-storage:localhost/adapterd:ci >/dev/null
podman manifest add localhost/adapterd:ci-multi containers-storage:localhost/adapterd:ci-arm64 >/dev/null
podman manifest create localhost/adapterd:ci-example-multi >/dev/null
podman manifest add localhost/adapterd:ci-example-multi containers-storage:localhost/adapterd:ci-example >/dev/null
podman manifest add localhost/adapterd:ci-example-multi containers-storage:localhost/adapterd:ci-example-arm64 >/dev/null
platforms=$(podman manifest inspect localhost/adapterd:ci-multi | python3 -c 'import json, sys; print(" ".join(sorted(m["platform"]["os"] + "/" + m["platform"]["architecture"] for m in json.load(sys.stdin)["manifests"])))')
[ "$platforms" = "linux/amd64 linux/arm64" ] || { echo "ci-container: the manifest list names $platforms"; exit 1; }
echo "ci-container: manifest list localhost/adapterd:ci-multi: $platforms"
smoke localhost/adapterd:ci-example-arm64 $((PORT + 1)) 300 arm64
echo "ci-container: arm64 image (base, build, smoke test under emulation) in $(($(date +%s) - a0)) s; $(($(date +%s) - t0)) s in all"
