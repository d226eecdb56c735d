#!/bin/sh
# run.sh - ctest entry of the traces test (test_traces.py): Debian's python3-grpc-tools compiles the official
# opentelemetry-proto messages, shipped in the npm package of this folder (scripts/setup.sh runs npm ci here),
# and the gRPC service's; skips (exit 77) with a message when either is missing.
#     run.sh tree|faults <adapterd> <registry> <proto dir>
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
protos="$here/node_modules/@opentelemetry/otlp-grpc-exporter-base/build/protos"
if ! [ -x "$py" ] || ! "$py" -c 'import grpc, grpc_tools.protoc' 2>/dev/null; then
    echo "SKIP: Debian's python3-grpcio and python3-grpc-tools are not installed (scripts/setup.sh installs them)"
    exit 77
fi
if ! [ -f "$protos/opentelemetry/proto/trace/v1/trace.proto" ]; then
    echo "SKIP: the opentelemetry-proto files are missing: run npm ci in tests/trace (scripts/setup.sh does)"
    exit 77
fi
exec "$py" "$here/test_traces.py" "$1" "$2" "$3" "$4" "$protos"
