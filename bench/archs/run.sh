#!/usr/bin/env bash
# run.sh - issue 31: adapterd's float32 forward per architecture (BERT-base, ELECTRA-base discriminator,
# DeBERTa-v3-base shapes) next to the PyTorch reference (tools/reference/bench_archs.py: encoder.py / deberta.py),
# same run, same thread count, alternately per architecture, on 1x128 and 8x128 tokens. Checkpoints (random
# weights, the real shapes) are generated once by tools/reference/gen_encoder.py into --cache.
#   bench/archs/run.sh --bin build/bench/bench_modernbert [--threads N] [--reps N] [--archs bert,electra,deberta-v2]
#                      [--batches 1,8] [--cache DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PY=${ADAPTERD_PYTHON:-/usr/bin/python3}
bin="" threads=2 reps=5 archs=bert,electra,deberta-v2 batches=1,8 cache="${XDG_CACHE_HOME:-$HOME/.cache}/adapterd/bench"
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --archs) archs=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    *) sed -n '2,7p' "$0" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "run.sh: --bin PATH to bench_modernbert is required" >&2; exit 2; }
ref=$root/tools/reference
stamp=$(cat "$ref"/encoder.py "$ref"/deberta.py "$ref"/gen_encoder.py "$ref"/st.py | sha256sum | cut -c1-16)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus; threads $threads; reps $reps"
IFS=, read -r -a list <<< "$archs"
for arch in "${list[@]}"; do
  d=$cache/archs/$arch-base
  if [ "$(cat "$d/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$d"; mkdir -p "$cache/archs"
    echo "bench: generating $d" >&2
    "$PY" "$ref/gen_encoder.py" --arch "$arch" --shape base --seed 31 --cases single --out "$d" >/dev/null
    echo "$stamp" > "$d/.stamp"
  fi
  echo "== $arch: load $(load)"
  IFS=, read -r -a bl <<< "$batches"
  for b in "${bl[@]}"; do
    "$bin" --model "$d" --lens 128 --batch "$b" --reps "$reps" --threads "$threads" --precision fp32 |
      sed "s/^{/{\"arch\":\"$arch\",/" | tee -a "$out"
  done
  echo "   load $(load)"
  OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads "$PY" "$ref/bench_archs.py" \
    --model "$d" --batches "$batches" --seq 128 --reps "$reps" --threads "$threads" |
    sed "s/\"arch\": \"[^\"]*\"/\"arch\": \"$arch\"/" | tee -a "$out"
  echo "   load $(load)"
done
"$PY" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
t = {(r["arch"], r["batch"], r["peer"]): r["median_ms"] for r in rows}
print("\n| architecture | tokens | adapterd median ms | PyTorch median ms | PyTorch / adapterd |")
print("|---|---|---|---|---|")
for (arch, b, peer), ms in t.items():
    if peer != "adapterd" or (arch, b, "pytorch") not in t:
        continue
    pt = t[(arch, b, "pytorch")]
    print(f"| {arch} | {b}x128 | {ms:.1f} | {pt:.1f} | {pt / ms:.2f}x |")
PY
