#!/usr/bin/env bash
# GPU smoke test of rlkit-nemo: one PPO, one ILQL and one SFT step in bf16 (Megatron O2) on
# the GPUs of this machine, from a small Llama built from a config. Needs only the image's
# CUDA torch and wheels in .whl/ (no network): megatron-core (0.15.3 on Python 3.11; 0.17+
# is fine on Python >= 3.12), and whatever of rlkit-core's dependencies the image lacks
# (attrs, cattrs, pluggy, typer, rich, pyyaml, transformers, tokenizers, ...).
#
#   plugins/rlkit_nemo/scripts/gpu_smoke.sh [OUT_DIR]       # env: NPROC (GPUs), TP, RLKIT_WHEELS
set -euo pipefail
cd "$(dirname "$0")/../../.."  # the repository root
OUT=${1:-${OUT:-runs/nemo_gpu_smoke}}
WHEELS=${RLKIT_WHEELS:-.whl}
VENV=${RLKIT_SMOKE_VENV:-.venv-nemo-gpu}
NPROC=${NPROC:-$(python3 -c "import torch; print(max(torch.cuda.device_count(), 1))")}
TP=${TP:-1}

[ -d "$WHEELS" ] || { echo "gpu_smoke.sh: no wheel folder $WHEELS (set RLKIT_WHEELS)" >&2; exit 2; }
# --system-site-packages keeps the image's CUDA torch; --no-index: wheels from $WHEELS only
[ -x "$VENV/bin/python" ] || python3 -m venv --system-site-packages "$VENV"
pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-index --find-links "$WHEELS")
"${pip[@]}" megatron-core
"${pip[@]}" -e . -e plugins/rlkit_methods
# rlkit-nemo pins megatron-core 0.15.3 for Python 3.11; on a newer Python the wheel above wins
"${pip[@]}" --no-deps -e plugins/rlkit_nemo
"$VENV/bin/python" -c "import torch, megatron.core as m; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'megatron-core', m.__version__)"

mkdir -p "$OUT"
"$VENV/bin/python" -m torch.distributed.run --nproc_per_node "$NPROC" \
    plugins/rlkit_nemo/scripts/gpu_smoke.py "$OUT" "$TP" 2>&1 | tee "$OUT/gpu_smoke.log"
