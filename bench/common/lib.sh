# lib.sh - shell pieces the bench drivers share (source it; needs $root, $PY and a note() function).
#
#   bench_set_core CORE THREADS   one OpenBLAS core and thread count for every peer ("auto": OpenBLAS's own
#                                 detection, dropping an OPENBLAS_CORETYPE from the environment, with a note;
#                                 the environment's value is kept in $bench_env_core)
#   bench_set_level LEVEL         caps adapterd's kernels at a CPU level (ADAPTERD_CPU_LEVEL; "native": no cap)
#                                 and PyTorch's own kernels alike (ATEN_CPU_CAPABILITY=avx2 at avx2 and avx_vnni,
#                                 default at baseline; its oneDNN, which runs torch's int8, with ONEDNN_MAX_CPU_ISA
#                                 and DNNL_MAX_CPU_ISA: AVX2, AVX2_VNNI, SSE41); sets $bench_level_core to the OpenBLAS core that matches
#                                 (Haswell, Prescott; empty above AVX2) and $bench_torch_cap
#   bench_build BUILD TARGET      prints the path of build/bench/TARGET, configuring BUILD (Release) when it is
#                                 missing and bringing it up to date every time
#   bench_metric URL NAME         prints an unlabelled sample of adapterd's /metrics at URL (NAME or NAME{})
#   bench_backbone CACHE          makes CACHE/bert-base once with the reference (bert-base shapes, seed 0),
#                                 regenerated when tools/reference changes; sets $bench_stamp; returns 1
#                                 when it is missing and torch is not importable
#   bench_ort CACHE               checks that ONNX Runtime can run (node + npm onnxruntime-node in bench/peers)
#                                 and exports CACHE/bert-base to CACHE/bert-base.onnx once; returns 1, with a
#                                 note saying why, when the peer must be skipped
#   bench_ort_int8 CACHE          after bench_ort: rewrites CACHE/bert-base.onnx into ONNX Runtime's dynamic int8
#                                 graph (DynamicQuantizeLinear + MatMulInteger per Linear, as its quantize_dynamic;
#                                 tools/reference/quantize_onnx_int8.py, Debian's python3-onnx) at
#                                 CACHE/bert-base-int8.onnx once, again when the script changes; returns 1 with a
#                                 note when python3-onnx is missing

bench_set_core() {
  local core=$1 threads=$2
  bench_env_core=${OPENBLAS_CORETYPE:-} # what the environment had, for the report
  if [ "$core" = auto ]; then
    unset OPENBLAS_CORETYPE
    [ -n "$bench_env_core" ] && note "ignoring OPENBLAS_CORETYPE=$bench_env_core from the environment: OpenBLAS's own detection for every peer (--core $bench_env_core to force it)"
  else
    export OPENBLAS_CORETYPE=$core
  fi
  # No peer may start more threads than asked (torch's OpenMP, OpenBLAS's own pool); the peers set these too.
  export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
  return 0
}

bench_set_level() {
  export ADAPTERD_CPU_LEVEL=$1
  bench_level_core="" bench_torch_cap="" onednn=""
  case $1 in
    avx2) bench_level_core=Haswell bench_torch_cap=avx2 onednn=AVX2 ;;
    avx_vnni) bench_level_core=Haswell bench_torch_cap=avx2 onednn=AVX2_VNNI ;;
    avx512) onednn=AVX512_CORE ;;
    avx512_vnni) onednn=AVX512_CORE_VNNI ;;
    avx512_bf16) onednn=AVX512_CORE_BF16 ;;
    baseline) bench_level_core=Prescott bench_torch_cap=default onednn=SSE41 ;;
  esac
  if [ -n "$bench_torch_cap" ]; then export ATEN_CPU_CAPABILITY=$bench_torch_cap; else unset ATEN_CPU_CAPABILITY; fi
  if [ -n "$onednn" ]; then export ONEDNN_MAX_CPU_ISA=$onednn DNNL_MAX_CPU_ISA=$onednn; else unset ONEDNN_MAX_CPU_ISA DNNL_MAX_CPU_ISA; fi
}

bench_metric() {
  curl -s "$1/metrics" | awk -v k="$2" '$1 == k || $1 == k "{}" {print $2}'
}

bench_build() {
  local build=$1 target=$2
  if [ ! -x "$build/bench/$target" ]; then
    note "building $target into $build (Release)"
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  # Always brought up to date (a no-op when it is): a binary left from before a change to the engine or to
  # bench/common (the peak loops) would otherwise be measured as if it were the checkout's.
  cmake --build "$build" --target "$target" -j"$(nproc)" >/dev/null
  echo "$build/bench/$target"
}

bench_backbone() {
  local cache=$1 model=$1/bert-base
  bench_stamp=$(cat "$root"/tools/reference/{encoder.py,gen_encoder.py,st.py,export_onnx.py} | sha256sum | cut -c1-16)
  [ "$(cat "$model/.stamp" 2>/dev/null)" = "$bench_stamp" ] && return 0
  if ! "$PY" -c 'import torch' 2>/dev/null; then
    note "$PY cannot import torch (Debian python3-torch) and $model is not generated: nothing to measure"
    return 1
  fi
  rm -rf "$model" "$cache/bert-base.onnx" "$cache/bert-base-int8.onnx"
  mkdir -p "$cache"
  note "generating $model (bert-base shapes, reference seed 0)"
  "$PY" "$root/tools/reference/gen_encoder.py" --arch bert --shape base --cases single --out "$model" >/dev/null
  echo "$bench_stamp" > "$model/.stamp"
}

bench_ort() {
  local model=$1/bert-base onnx=$1/bert-base.onnx
  if ! command -v node >/dev/null; then
    note "skipping ONNX Runtime: node is not installed (scripts/setup.sh installs it)"
    return 1
  fi
  if ! (cd "$root/bench/peers" && node -e "require.resolve('onnxruntime-node')" 2>/dev/null); then
    note "skipping ONNX Runtime: onnxruntime-node missing; run (cd bench/peers && npm ci)"
    return 1
  fi
  [ -s "$onnx" ] && return 0
  if ! "$PY" -c 'import torch' 2>/dev/null; then
    note "skipping ONNX Runtime: no $onnx and no torch to export it"
    return 1
  fi
  note "exporting $onnx (opset 14)"
  "$PY" "$root/tools/reference/export_onnx.py" --model "$model" --out "$onnx.tmp" >/dev/null && mv "$onnx.tmp" "$onnx"
}

bench_ort_int8() {
  local onnx=$1/bert-base.onnx int8=$1/bert-base-int8.onnx stamp
  if ! "$PY" -c 'import onnx' 2>/dev/null; then
    note "skipping ONNX Runtime int8: $PY cannot import onnx (Debian python3-onnx; scripts/setup.sh installs it)"
    return 1
  fi
  stamp=$(sha256sum < "$root/tools/reference/quantize_onnx_int8.py" | cut -c1-16) # bench_backbone drops $int8 with $onnx
  [ -s "$int8" ] && [ "$(cat "$int8.stamp" 2>/dev/null)" = "$stamp" ] && return 0
  note "rewriting $onnx into ONNX Runtime's dynamic int8 graph ($int8)"
  "$PY" "$root/tools/reference/quantize_onnx_int8.py" --in "$onnx" --out "$int8.tmp" >/dev/null \
    && mv "$int8.tmp" "$int8" && echo "$stamp" > "$int8.stamp" && return 0
  note "skipping ONNX Runtime int8: the rewrite failed"
  rm -f "$int8.tmp"
  return 1
}
