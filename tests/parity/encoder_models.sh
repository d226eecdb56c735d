# encoder_models.sh - sourced by encoder_parity.sh and encoder_levels.sh: the PyTorch check and the generated
# bert/roberta/distilbert-base shaped checkpoints they share.
#   need_torch                                   exits 77 with the reason when $PY cannot import torch
#   encoder_model REF WORK ARCH SEED DTYPE FLAGS...  generates WORK/ARCH-base-DTYPE with the reference once (kept
#                                                while REF's sources are unchanged) and prints its path
PY=${ADAPTERD_PYTHON:-/usr/bin/python3}

need_torch() {
  if ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "SKIP: $PY cannot import torch (install Debian's python3-torch)"
    exit 77
  fi
}

encoder_model() {
  local ref=$1 work=$2 arch=$3 seed=$4 dtype=$5 stamp d
  shift 5
  stamp=$(cat "$ref"/encoder.py "$ref"/gen_encoder.py "$ref"/st.py | sha256sum | cut -c1-16)
  d="$work/$arch-base-$dtype"
  if [ "$(cat "$d/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$d"
    mkdir -p "$work"
    echo "generating $d" >&2
    "$PY" "$ref/gen_encoder.py" --arch "$arch" --shape base --seed "$seed" --dtype "$dtype" "$@" --out "$d" >/dev/null
    echo "$stamp" > "$d/.stamp"
  fi
  echo "$d"
}
