#!/usr/bin/env bash
# Sets up a fresh Debian (bookworm) machine for adapterd and builds it (Release, into build/).
#   scripts/setup.sh            install packages, fetch the test peers' npm packages, build
# Environment: ADAPTERD_SKIP_APT=1 skips apt-get (packages already there); BUILD_DIR overrides build/.
set -euo pipefail
cd "$(dirname "$0")/.."

# Build and run: compiler, CMake, pkg-config and the libraries adapterd links.
# (gRPC, --grpc-port: libnghttp2-dev for HTTP/2, libprotobuf-c-dev and protobuf-c-compiler for its messages;
# libgnutls28-dev for TLS on both ports and the keys file's digests; libcurl4-openssl-dev for the OTLP trace export.)
PKGS_BUILD="build-essential cmake pkg-config libopenblas-dev libopenblas0-pthread libjansson-dev libutf8proc-dev
  libpcre2-dev libmicrohttpd-dev libuv1-dev libyaml-dev zlib1g-dev libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler
  libgnutls28-dev libcurl4-openssl-dev"
# Tests and benchmarks: Criterion (libcurl, which the HTTP tests use, is a build package), the PyTorch reference (Debian's python3-torch),
# node/npm for the transformers.js and ONNX Runtime peers and the API checks (Redocly's lint, dredd),
# chromium for the GET /docs page test (driven headless by playwright-core), wrk and hyperfine for
# load benchmarks; python3-onnx to write ONNX Runtime's int8 graph (bench/encoder/run_precision.sh);
# matplotlib for the quality plots (bench/quality); python3-grpcio and python3-grpc-tools for the
# gRPC client test (tests/grpc) and nghttp2-client (nghttp, h2load) for its raw HTTP/2 checks and bench/grpc; openssl and
# curl (the CLIs) for the TLS test (tests/tls: certificates made at test time, HTTPS requests);
# python3-prometheus-client's OpenMetrics parser reads /metrics' exemplars in the traces test (tests/trace).
# (The ARM64 cross-build's packages, arm64 libraries and emulator: scripts/setup-arm64.sh, which CI runs too.)
PKGS_TEST="libcriterion-dev python3 python3-torch python3-numpy python3-onnx python3-sentencepiece python3-matplotlib nodejs npm chromium wrk hyperfine python3-grpcio python3-grpc-tools nghttp2-client openssl curl python3-prometheus-client"

if [ "${ADAPTERD_SKIP_APT:-0}" != 1 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  missing=""
  for p in $PKGS_BUILD $PKGS_TEST; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  # node and npm may come from elsewhere than Debian's packages; keep the ones already on PATH.
  if command -v node >/dev/null && command -v npm >/dev/null; then
    missing=$(echo "$missing" | tr ' ' '\n' | grep -vx -e nodejs -e npm | tr '\n' ' ')
  fi
  if [ -n "${missing// /}" ]; then
    echo "setup: installing$missing"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
  fi
fi

# npm packages: docs/redoc holds Redoc's bundle and licence, which the build compiles into the
# server for GET /docs (proto/CMakeLists.txt), so it comes before the build; the others serve the
# parity tests, the API checks and benchmarks (local files only at run time). Install scripts are
# skipped: they would download binaries from outside the npm registry (the browser test uses
# Debian's chromium). Without npm the build still works and GET /docs answers 503 saying why.
if command -v npm >/dev/null; then
  for d in docs/redoc tests/parity/tokenizer tests/api tests/clients tests/trace bench/peers; do
    if [ -f "$d/package.json" ] && [ ! -d "$d/node_modules" ]; then
      echo "setup: npm ci in $d"
      (cd "$d" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) ||
        echo "setup: npm ci failed in $d; its tests will be skipped"
    fi
  done
fi

BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j"$(nproc)"
echo "setup: built $BUILD_DIR/tools/adapterd"
