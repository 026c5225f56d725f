#!/usr/bin/env bash
# GPU smoke test of rlkit-nemo, from a clone of this repository on a machine with NVIDIA GPUs.
# It builds what it needs, then runs, in order:
#   1. the environment: a venv (Python 3.11) with torch, NeMo 2.7.3 and megatron-core 0.15.3
#      as rlkit-nemo[nemo] pins them; or, with --container, rlkit installed --no-deps into an
#      NGC NeMo Framework container's Python (its torch, megatron-core, NeMo and Transformer
#      Engine stay; megatron-core must be 0.15.x, which step 2 checks)
#   2. a check: CUDA visible, the versions
#   3. one PPO, ILQL and SFT step of the NeMo trainers in bf16 (Megatron O2) on a small Llama
#      (gpu_smoke.py, under torchrun on NPROC GPUs at tensor parallel size TP)
#   4. sampling tokens/s with megatron-core's KV cache against recomputation (kv_cache_bench.py)
#   5. rlkit run examples/nemo/sft_randomwalks.yml (the SFT model PPO starts from)
#   6. with an even number of GPUs: the PPO example at pipeline parallel size 2 (a copy of
#      its Megatron YAML)
#   7. rlkit run examples/nemo/ppo_randomwalks.yml (PPO from step 5's export)
# Transformer Engine is not installed in the venv: rlkit-nemo's models use megatron-core's
# plain-torch layer spec (docs/nemo.md). Logs: OUT_DIR/<step>.log; a failing step stops the run.
#
#   plugins/rlkit_nemo/scripts/gpu_smoke.sh [--dry-run] [--container] [OUT_DIR]
#     --dry-run    print the steps' commands, run nothing (no GPU or Python packages needed)
#     --container  use the container's Python instead of building a venv
#   env: NPROC (GPUs; default: all that nvidia-smi lists), TP (step 3; default 1),
#        PYTHON (for the venv; default python3.11), RLKIT_TORCH (default torch==2.13.0),
#        RLKIT_SMOKE_VENV (default .venv-nemo-gpu), RLKIT_WHEELS (a folder of wheels: install
#        from it alone, offline)
set -euo pipefail
cd "$(dirname "$0")/../../.."  # the repository root

DRY_RUN=0 CONTAINER=0 OUT=""
for arg in "$@"; do
    case "$arg" in
        --dry-run) DRY_RUN=1 ;;
        --container) CONTAINER=1 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        -*) echo "gpu_smoke.sh: unknown option $arg (options: --dry-run, --container, --help)" >&2; exit 2 ;;
        *) [ -z "$OUT" ] || { echo "gpu_smoke.sh: one OUT_DIR only, got $OUT and $arg" >&2; exit 2; }; OUT=$arg ;;
    esac
done
OUT=${OUT:-runs/nemo_gpu_smoke}
gpus() { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -c '^GPU' || echo 1; }
NPROC=${NPROC:-$(gpus)}
[ "$NPROC" -ge 1 ] 2>/dev/null || NPROC=1
TP=${TP:-1}
TORCH_SPEC=${RLKIT_TORCH:-torch==2.13.0}
VENV=${RLKIT_SMOKE_VENV:-.venv-nemo-gpu}

# step TITLE: a header; run CMD...: print it, then run it unless --dry-run;
# logged NAME CMD...: the same, its output also in OUT/NAME.log; to_file FILE CMD...: output to FILE
# (commands are printed shell-quoted: a dry run's lines can be pasted)
step() { echo; echo "== $*"; }
quoted() {
    local out=() a
    for a in "$@"; do
        if [[ $a =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]]; then out+=("$a"); else out+=("'${a//\'/\'\\\'\'}'"); fi
    done
    echo "${out[*]}"
}
run() { echo "+ $(quoted "$@")"; [ "$DRY_RUN" = 1 ] || "$@"; }
logged() {
    local name=$1; shift
    echo "+ $(quoted "$@") 2>&1 | tee $(quoted "$OUT/$name.log")"
    [ "$DRY_RUN" = 1 ] || { "$@" 2>&1 | tee "$OUT/$name.log"; }
}
to_file() { local file=$1; shift; echo "+ $(quoted "$@") > $(quoted "$file")"; [ "$DRY_RUN" = 1 ] || "$@" > "$file"; }

pip_args=(--disable-pip-version-check)
[ -z "${RLKIT_WHEELS:-}" ] || pip_args+=(--no-index --find-links "$RLKIT_WHEELS")

step "1. environment"
if [ "$CONTAINER" = 1 ]; then
    PY=python3
    # --no-deps: pip replaces none of the container's torch, megatron-core, NeMo, transformers
    run "$PY" -m pip install "${pip_args[@]}" --no-deps -e . -e plugins/rlkit_methods -e plugins/rlkit_nemo
    # rlkit's own light dependencies, none of which pulls torch (docs/install.md)
    run "$PY" -m pip install "${pip_args[@]}" "pluggy>=1.5" "attrs>=23.2" "cattrs>=24.1" "typer>=0.12" "rich>=13" \
        "matplotlib>=3.7" "vaderSentiment>=3.3"
    RLKIT=rlkit
else
    PYTHON=${PYTHON:-python3.11}
    [ -x "$VENV/bin/python" ] || run "$PYTHON" -m venv "$VENV"
    PY=$VENV/bin/python
    # torch on the same line as everything that depends on it, so pip never swaps it out
    run "$PY" -m pip install "${pip_args[@]}" "$TORCH_SPEC" -e . -e plugins/rlkit_methods -e "plugins/rlkit_nemo[nemo]"
    RLKIT=$VENV/bin/rlkit
fi

step "2. check: CUDA and versions"
run "$PY" -c 'import torch, megatron.core as m; assert torch.cuda.is_available(), "no CUDA GPU visible to torch"; assert m.__version__.startswith("0.15."), "rlkit-nemo needs megatron-core 0.15.x, not " + m.__version__; print("torch", torch.__version__, "CUDA", torch.version.cuda, "megatron-core", m.__version__, "GPUs", torch.cuda.device_count())'
run "$RLKIT" env
run mkdir -p "$OUT"

step "3. one PPO, ILQL and SFT step in bf16 on $NPROC GPU(s), TP=$TP"
logged engine_steps "$PY" -m torch.distributed.run --nproc_per_node "$NPROC" plugins/rlkit_nemo/scripts/gpu_smoke.py "$OUT/engine" "$TP"

step "4. sampling tokens/s: KV cache against recomputation, 64 new tokens"
logged kv_cache "$PY" plugins/rlkit_nemo/scripts/kv_cache_bench.py --new-tokens 64 --batch 16 --prompt-length 64 \
    --layers 12 --hidden 768 --heads 12

# every rlkit run below goes through torchrun when there is more than one GPU
rlkit_run() {
    local name=$1; shift
    if [ "$NPROC" -gt 1 ]; then
        logged "$name" "$PY" -m torch.distributed.run --nproc_per_node "$NPROC" "$(command -v "$RLKIT" || echo "$RLKIT")" run "$@"
    else
        logged "$name" "$RLKIT" run "$@"
    fi
}
SFT_DIR=$OUT/sft
SFT_MODEL=$SFT_DIR/checkpoint_200/hf_model  # examples/nemo/sft_randomwalks.yml: total_steps 200

step "5. rlkit run: SFT on the random walks (NeMo engine)"
rlkit_run sft examples/nemo/sft_randomwalks.yml --set "train.checkpoint_dir=$SFT_DIR" --set train.overwrite_checkpoint_dir=true

if [ "$NPROC" -ge 2 ] && [ $((NPROC % 2)) = 0 ]; then
    step "6. rlkit run: PPO at pipeline parallel size 2"
    run mkdir -p "$OUT/pp2"
    to_file "$OUT/pp2/megatron_pp2.yaml" sed 's/^  pipeline_model_parallel_size: 1$/  pipeline_model_parallel_size: 2/' \
        examples/nemo/megatron_randomwalks.yaml
    rlkit_run ppo_pp2 examples/nemo/ppo_randomwalks.yml --set "model.model_path=$SFT_MODEL" \
        --set "train.checkpoint_dir=$OUT/pp2/ppo" --set train.overwrite_checkpoint_dir=true \
        --set "train.trainer_kwargs={megatron_cfg: $OUT/pp2/megatron_pp2.yaml}"
fi

step "7. rlkit run: PPO from the SFT model (NeMo engine, KV-cached sampling)"
rlkit_run ppo examples/nemo/ppo_randomwalks.yml --set "model.model_path=$SFT_MODEL" \
    --set "train.checkpoint_dir=$OUT/ppo" --set train.overwrite_checkpoint_dir=true
