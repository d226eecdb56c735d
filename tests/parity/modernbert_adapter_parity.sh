#!/usr/bin/env bash
# AdapterHub adapters on ModernBERT against the PyTorch reference (tools/reference/modernbert_adapters.py: AdapterHub's
# plugin-interface sites, written from adapter-hub/adapters' source), at every CPU level this machine has.
#   modernbert_adapter_parity.sh PARITY_ADAPTERS_BIN ADAPTERD REFERENCE_DIR WORK_DIR
# Cases (gen_modernbert_adapters.py, AdapterHub's file layout and key names model.layers.N.attention_adapters...,
# model.layers.N.attn.Wqkv.loras...): Pfeiffer, Houlsby, seq_bn at the attention site with gating, every bottleneck
# flag, parallel, scaled parallel, AdapterHub LoRA (merged Wqkv q,v + mlp.Wi + mlp.Wo; q,k,v), (IA)^3, Stack, Fusion
# (dynamic over seq_bn, static over Houlsby), a tagging head; at AdapterDrop skips 0 and 5 on ModernBERT-base's
# shapes (22 layers, modernbert_parity.sh's checkpoint) and 0 and 1 on a 4-layer model.
# Tolerance: logits at 1e-4 in fp32, BERT's adapter tolerance. Measured 2026-11-26 (Sapphire Rapids, 28 cases x 2
# skips): largest 3.1e-5 (base/ia3) at avx2, avx_vnni, avx512 and native, 2.3e-5 at baseline; the other base cases
# <= 2.9e-5, the tiny ones <= 1.6e-5. A mutation check: the attention site's LayerNorm taken from its own layer
# instead of the last (AdapterHub's late-bound getter), or the late split's residual left out, fails 6 cases by
# 0.04-4.9.
set -euo pipefail
bin=$1 adapterd=$2 ref=$3 work=$4
. "$(dirname "$0")/encoder_models.sh"
need_torch

modernbert_model() {   # as modernbert_parity.sh (same stamp and folder: one checkpoint for both tests)
  local name=$1 stamp d
  shift
  stamp=$(cat "$ref"/modernbert.py "$ref"/gen_modernbert.py "$ref"/encoder.py "$ref"/st.py | sha256sum | cut -c1-16)
  d="$work/modernbert-$name"
  if [ "$(cat "$d/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$d"
    mkdir -p "$work"
    echo "generating $d" >&2
    "$PY" "$ref/gen_modernbert.py" "$@" --out "$d" >/dev/null
    echo "$stamp" > "$d/.stamp"
  fi
  echo "$d"
}

cases() {   # cases BACKBONE OUT SKIPS
  local stamp
  stamp=$(cat "$ref"/adapters.py "$ref"/modernbert_adapters.py "$ref"/gen_modernbert_adapters.py "$1/.stamp" "$0" \
          | sha256sum | cut -c1-16)
  if [ "$(cat "$2/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$2"
    mkdir -p "$2"
    echo "generating $2" >&2
    "$PY" "$ref/gen_modernbert_adapters.py" --backbone "$1" --out "$2" --skips "$3" > "$2.log"
    echo "$stamp" > "$2/.stamp"
  fi
}

tiny=$(modernbert_model tiny-ah --shape tiny --seed 7 --cases single)
base=$(modernbert_model base --shape base --seed 21 --classifier)
cases "$tiny" "$work/modernbert-ah/tiny" 0,1
cases "$base" "$work/modernbert-ah/base" 0,5
fail=0 ran=0
for level in baseline avx2 avx_vnni avx512 native; do
  if ! why=$("$adapterd" version --cpu-level "$level" 2>&1 >/dev/null); then
    echo "level $level: skipped, ${why#adapterd: --cpu-level: }"
    continue
  fi
  echo "level $level:"
  ran=$((ran + 1))
  ADAPTERD_CPU_LEVEL=$level "$bin" --tol 1e-4 --threads 2 "$work/modernbert-ah/tiny" "$work/modernbert-ah/base" || fail=1
done
echo "$ran levels"
# End to end through the CLI: adapterd predict on the tiny model's Houlsby task, the second input of its expected
# file (7 tokens), against the reference's logits at 1e-4.
case_dir="$work/modernbert-ah/tiny/double_seq_bn"
read -r ids want < <("$PY" - "$ref" "$case_dir/expected/skip0.safetensors" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[1])
import st
t, _ = st.load_file(sys.argv[2])
n0, n1 = int(t["seq_lens"][0]), int(t["seq_lens"][1])
print(",".join(str(int(i)) for i in t["input_ids"][n0:n0 + n1]), ",".join(repr(float(v)) for v in t["logits"][1]))
PYEOF
)
got=$("$adapterd" predict --model "$tiny" --adapter "$case_dir/adapters/sst" --ids "$ids" --threads 2)
if ! "$PY" -c 'import json, sys
got = json.loads(sys.argv[1])["tasks"]["sst"]["logits"]
want = [float(v) for v in sys.argv[2].split(",")]
d = max(abs(a - b) for a, b in zip(got, want))
print(f"adapterd predict (double_seq_bn, 7 tokens): max |logit diff| {d:.3g} (tol 1e-4)")
sys.exit(0 if len(got) == len(want) and d <= 1e-4 else 1)' "$got" "$want"; then
  fail=1
fi
exit $fail
