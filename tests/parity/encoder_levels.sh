#!/usr/bin/env bash
# The whole encoder at every CPU level this machine has and in every precision, against the PyTorch
# reference's float32 outputs (engine/math/kern.h: each level runs its own kernels).
#   encoder_levels.sh PARITY_BIN ADAPTERD REFERENCE_DIR WORK_DIR
# The model is encoder_parity.sh's bert-base-shaped checkpoint (12 layers, generated once, shared).
# Tolerances on the largest difference of any hidden state (max |adapterd - reference|, LayerNorm-scale
# values): fp32 1e-4 (float rounding: every level sums in float32; measured 1.3e-5 to 1.4e-5); bf16 0.08
# and int8 0.4, about 1.8x the largest difference measured on this checkpoint at every level (bf16 0.043,
# int8 0.216 at the AVX2, AVX-VNNI, AVX-512 and AVX512-BF16/VNNI levels, 2026-11-26; int8's kernels give
# the same bits at every level, bf16's AVX2 kernel rounds its float32 sums apart from vdpbf16ps').
# The portable level runs fp32 only: its bf16 kernel is 10-50x slower, and the models refuse it.
set -euo pipefail
bin=$1 adapterd=$2 ref=$3 work=$4
. "$(dirname "$0")/encoder_models.sh"
need_torch
d=$(encoder_model "$ref" "$work" bert 11 f32 --no-prefix) # encoder_parity.sh's: generated once for both
fail=0 ran=0
for level in baseline avx2 avx_vnni avx512 native; do
  if ! why=$("$adapterd" version --cpu-level "$level" 2>&1 >/dev/null); then
    echo "level $level: skipped, ${why#adapterd: --cpu-level: }"
    continue
  fi
  kernels=$("$adapterd" version --cpu-level "$level" | sed 's/.*"kernels":\(.*\)}/\1/')
  for spec in "fp32 1e-4" "bf16 0.08" "int8 0.4"; do
    set -- $spec
    if [ "$level" = baseline ] && [ "$1" != fp32 ]; then continue; fi
    echo "level $level ($kernels), $1:"
    ran=$((ran + 1))
    ADAPTERD_CPU_LEVEL=$level "$bin" --tol "$2" --precision "$1" "$d" || fail=1
  done
done
echo "$ran level x precision runs"
exit $fail
