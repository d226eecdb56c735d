#!/bin/sh
# run.sh - ctest entry of the tokenizer parity test: skips (exit 77) with a message when node or
# transformers.js is missing, otherwise runs parity.mjs with the given arguments.
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null 2>&1; then
    echo "SKIP: node is not installed (the tokenizer parity test needs Node.js >= 18)"
    exit 77
fi
if [ ! -d "$here/node_modules/@huggingface/transformers" ]; then
    echo "SKIP: transformers.js is not installed; run: (cd $here && npm ci --ignore-scripts)"
    exit 77
fi
exec node "$here/parity.mjs" "$@"
