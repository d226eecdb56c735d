#!/bin/sh
# run.sh - ctest entry of the API checks (lint, contract, docs): skips (exit 77) with a message when
# node, the npm packages or chromium are missing, otherwise runs the check's script.
#     run.sh lint|contract|docs ARGS...
here=$(cd "$(dirname "$0")" && pwd)
check=$1
shift
if ! command -v node >/dev/null 2>&1; then
    echo "SKIP: node is not installed (the API checks need Node.js >= 18)"
    exit 77
fi
need() {
    if [ ! -e "$here/node_modules/$1" ]; then
        echo "SKIP: npm package $1 is not installed; run: (cd $here && npm ci --ignore-scripts)"
        exit 77
    fi
}
case "$check" in
lint) need @redocly/cli ;;
contract) need dredd ;;
docs)
    need playwright-core
    chromium=${CHROMIUM:-/usr/bin/chromium}
    if [ ! -x "$chromium" ]; then
        echo "SKIP: no chromium at $chromium (Debian's chromium package; or set CHROMIUM)"
        exit 77
    fi
    ;;
*) echo "run.sh: unknown check $check" >&2; exit 2 ;;
esac
[ "$check" = docs ] && script=docs_page || script=$check
exec node "$here/$script.mjs" "$@"
