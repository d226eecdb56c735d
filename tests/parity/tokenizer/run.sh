#!/bin/sh
# run.sh - ctest entry of the tokenizer parity tests: skips (exit 77) with a message when node or
# transformers.js or the shared tokenizer files are missing, otherwise runs parity.mjs (or the script
# named by a leading --script NAME, e.g. parity_json.mjs) with the given arguments.
here=$(cd "$(dirname "$0")" && pwd)
script=parity.mjs
if [ "$1" = "--script" ]; then
    script=$2
    shift 2
fi
if ! command -v node >/dev/null 2>&1; then
    echo "SKIP: node is not installed (the tokenizer parity test needs Node.js >= 18)"
    exit 77
fi
if [ ! -d "$here/node_modules/@huggingface/transformers" ]; then
    echo "SKIP: transformers.js is not installed; run: (cd $here && npm ci --ignore-scripts)"
    exit 77
fi
fixtures=
prev=
for a in "$@"; do
    [ "$prev" = "--fixtures" ] && fixtures=$a
    prev=$a
done
if [ -n "$fixtures" ] && [ ! -f "$fixtures/bert-base-uncased/tokenizer.json" ]; then
    echo "SKIP: $fixtures/bert-base-uncased/tokenizer.json is absent (the shared tokenizers; set ADAPTERD_DATA_DIR)"
    exit 77
fi
exec node "$here/$script" "$@"
