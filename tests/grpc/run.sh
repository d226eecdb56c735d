#!/bin/sh
# run.sh - ctest entry of the gRPC client test (test_grpc.py): Debian's python3-grpcio and
# python3-grpc-tools generate a client from proto/grpc_service.proto at test time; skips (exit 77) with
# a message when they are missing.
#     run.sh <adapterd> <registry> <proto dir> [tls]     (tls: both ports over TLS; needs the openssl CLI)
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
if ! [ -x "$py" ] || ! "$py" -c 'import grpc, grpc_tools.protoc' 2>/dev/null; then
    echo "SKIP: Debian's python3-grpcio and python3-grpc-tools are not installed (scripts/setup.sh installs them)"
    exit 77
fi
if [ "${4:-}" = tls ] && ! command -v openssl >/dev/null 2>&1; then
    echo "SKIP: the openssl CLI is not installed (scripts/setup.sh installs it)"
    exit 77
fi
exec "$py" "$here/test_grpc.py" "$@"
