#!/bin/sh
# run.sh - ctest entry of the TLS test (test_tls.py): needs the openssl CLI, curl and Debian's
# python3-grpcio / python3-grpc-tools; skips (exit 77) with a message when one is missing. The npm
# clients' part runs when tests/clients/node_modules is installed.
#     run.sh <adapterd> <registry> <proto dir>
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
for tool in openssl curl; do
    if ! command -v $tool >/dev/null 2>&1; then
        echo "SKIP: $tool is not installed (scripts/setup.sh installs it)"
        exit 77
    fi
done
if ! [ -x "$py" ] || ! "$py" -c 'import grpc, grpc_tools.protoc' 2>/dev/null; then
    echo "SKIP: Debian's python3-grpcio and python3-grpc-tools are not installed (scripts/setup.sh installs them)"
    exit 77
fi
exec "$py" "$here/test_tls.py" "$@" "$here/../clients"
