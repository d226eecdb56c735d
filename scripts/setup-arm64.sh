#!/usr/bin/env bash
# Sets up this (amd64 Debian bookworm) machine to cross-build adapterd for ARM64 and run its tests under
# emulation, then builds it into build-arm64/ (cmake/aarch64-linux-gnu.cmake).
#   scripts/setup-arm64.sh            install, register the emulator, build
# Environment: ADAPTERD_SKIP_APT=1 skips apt-get; BUILD_DIR overrides build-arm64/; ARM64_DEPS overrides
# build-arm64-deps/ (the arm64 libraries that cannot be installed beside their amd64 twins, see below).
#
# What it installs: Debian's cross compiler, the arm64 -dev packages of every library adapterd links
# (through multiarch: dpkg --add-architecture arm64), and qemu-user-static, whose binfmt_misc entry
# (flag F: the emulator is opened once, so it also works inside containers and chroots) runs arm64
# programs that the tests start by path (the server, scripts' `adapterd version`).
# Criterion's arm64 -dev package cannot be installed beside the amd64 one the native tests use
# (libnanomsg5 and libgit2-dev are not Multi-Arch: same, so apt removes one for the other): its
# libraries are unpacked into ARM64_DEPS instead (apt-get download + dpkg-deb -x; the headers are
# the amd64 package's, the same version), and the toolchain file links the tests against them.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build-arm64}
DEPS=${ARM64_DEPS:-$ROOT/build-arm64-deps}

# protoc-c runs on the build host (proto/CMakeLists.txt), so protobuf-c-compiler is the host's
PKGS_CROSS="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static binfmt-support libcriterion-dev protobuf-c-compiler"
PKGS_ARM64="libopenblas-dev:arm64 libjansson-dev:arm64 libutf8proc-dev:arm64 libpcre2-dev:arm64 libmicrohttpd-dev:arm64
  libuv1-dev:arm64 libyaml-dev:arm64 zlib1g-dev:arm64 libcurl4-openssl-dev:arm64 libgit2-1.5:arm64 libffi8:arm64
  libnghttp2-dev:arm64 libprotobuf-c-dev:arm64 libgnutls28-dev:arm64"
CRITERION_ARM64="libcriterion3:arm64 libcriterion-dev:arm64 libnanomsg5:arm64"

if [ "${ADAPTERD_SKIP_APT:-0}" != 1 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "setup-arm64: dpkg --add-architecture arm64"
    $SUDO dpkg --add-architecture arm64
    $SUDO apt-get update -q
  fi
  missing=""
  for p in $PKGS_CROSS $PKGS_ARM64; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  if [ -n "${missing// /}" ]; then
    echo "setup-arm64: installing$missing"
    $SUDO apt-get update -q
    # shellcheck disable=SC2086 # lists of package names
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
  fi
fi

if [ ! -e "$DEPS/usr/lib/aarch64-linux-gnu/libcriterion.so" ]; then
  echo "setup-arm64: unpacking Criterion for arm64 into $DEPS"
  tmp=$(mktemp -d)
  # shellcheck disable=SC2086
  (cd "$tmp" && apt-get download -q $CRITERION_ARM64 2>&1 | grep -v "unsandboxed" || true)
  mkdir -p "$DEPS"
  for d in "$tmp"/*.deb; do dpkg-deb -x "$d" "$DEPS"; done
  rm -rf "$tmp"
  # its pkg-config file, pointed at the unpacked copy; the private (static-link) requirements dropped
  sed -i -e "s|^prefix=.*|prefix=$DEPS/usr|" -e '/^Requires.private/d' -e '/^Libs.private/d' \
    "$DEPS/usr/lib/aarch64-linux-gnu/pkgconfig/criterion.pc"
  [ -e "$DEPS/usr/lib/aarch64-linux-gnu/libcriterion.so" ] || { echo "setup-arm64: Criterion for arm64 missing"; exit 1; }
fi

# binfmt_misc: programs started by path (not through CMAKE_CROSSCOMPILING_EMULATOR) run under qemu too
if [ "$(id -u)" = 0 ]; then
  [ -e /proc/sys/fs/binfmt_misc/status ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
  if [ -e /proc/sys/fs/binfmt_misc/status ] && [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    update-binfmts --enable qemu-aarch64 2>/dev/null || update-binfmts --import qemu-aarch64 || true
  fi
fi
if [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  echo "setup-arm64: binfmt_misc runs arm64 programs with $(sed -n 's/^interpreter //p' /proc/sys/fs/binfmt_misc/qemu-aarch64)"
else
  echo "setup-arm64: no binfmt_misc entry for arm64: tests that start arm64 programs by path will fail"
fi

cmake -S . -B "$BUILD_DIR" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release \
  -DADAPTERD_BUILD_BENCH=OFF -DADAPTERD_ARM64_DEPS="$DEPS"
cmake --build "$BUILD_DIR" -j"$(nproc)"
echo "setup-arm64: built $BUILD_DIR/tools/adapterd ($(file -b "$BUILD_DIR/tools/adapterd" | cut -d, -f1-2))"
