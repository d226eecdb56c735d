#!/bin/sh
# at_level.sh LEVEL ADAPTERD COMMAND [ARGS...] - runs COMMAND with the engine's kernels capped at LEVEL
# (ADAPTERD_CPU_LEVEL), or skips (exit 77) with the reason when this CPU lacks the level: the AVX2 path
# is then tested on AVX-512 machines too, and a level the machine lacks is said, never silently passed.
level=$1 adapterd=$2
shift 2
if ! why=$("$adapterd" version --cpu-level "$level" 2>&1 >/dev/null); then
  echo "SKIP: CPU level $level: ${why#adapterd: --cpu-level: }"
  exit 77
fi
ADAPTERD_CPU_LEVEL=$level exec "$@"
