#!/bin/sh
# run.sh - ctest entry of the real-client test (clients.mjs): skips (exit 77) with a message when node
# or the npm packages are missing, otherwise runs it.
#     run.sh <adapterd> <registry>
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null 2>&1; then
    echo "SKIP: node is not installed (the client test needs Node.js >= 20)"
    exit 77
fi
for p in openai @huggingface/inference @langchain/community @langchain/core; do
    if [ ! -e "$here/node_modules/$p" ]; then
        echo "SKIP: npm package $p is not installed; run: (cd $here && npm ci --ignore-scripts)"
        exit 77
    fi
done
exec node "$here/clients.mjs" "$@"
