#!/usr/bin/env bash
# The first thing to run when a GPU is lent: rlkit-nemo's precision, optimizer, methods and
# sampling on one GPU in at most 8 minutes, one JSON line per phase on stdout (gpu_check.py),
# each phase guarded so that one failure does not hide the rest:
#   environment            python, torch, CUDA, megatron-core, Transformer Engine
#   dtype_matrix           (GPT-2 LayerNorm, rope + LayerNorm, Llama RMSNorm) x (bf16 O2,
#                          bf16 autocast, fp16 O2): one forward and one step each
#   distributed_optimizer  step, save, fresh load, step (equal to the run that went on)
#   methods                PPO, ILQL and SFT, 2 steps each in bf16 O2
#   kv_cache               greedy samples with the KV cache equal to recomputation
#   te_mask                Transformer Engine's layers with left padding, if TE imports
# It installs only megatron-core (no NeMo), and only when it does not import: from
# RLKIT_WHEELS (a folder of wheels, offline) if set, else from the index, --no-deps (the
# machine's torch and numpy stay). rlkit itself runs from this checkout (PYTHONPATH).
#
#   plugins/rlkit_nemo/scripts/gpu_check.sh [--cpu] [--phases=a,b] [OUT_DIR]
#     --cpu   the dry run: the same phases on the CPU (gloo), as the tests run it
#   env: PYTHON (default python3), RLKIT_GPU_CHECK_SECONDS (default 480), RLKIT_WHEELS
set -uo pipefail
cd "$(dirname "$0")/../../.."  # the repository root

PYTHON=${PYTHON:-python3}
LIMIT=${RLKIT_GPU_CHECK_SECONDS:-480}
ARGS=()
for arg in "$@"; do
    case "$arg" in
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        --cpu|--phases=*) ARGS+=("$arg") ;;
        -*) echo "gpu_check.sh: unknown option $arg (options: --cpu, --phases=a,b, --help)" >&2; exit 2 ;;
        *) ARGS+=("$arg") ;;
    esac
done

json() { printf '{"phase": "%s", "status": "%s", "detail": "%s"}\n' "$1" "$2" "${3//\"/\'}"; }

if ! "$PYTHON" -c "import megatron.core" 2>/dev/null; then
    if [ -n "${RLKIT_WHEELS:-}" ]; then
        src=(--no-index --find-links "$RLKIT_WHEELS")
    else
        src=()
    fi
    if out=$("$PYTHON" -m pip install -q --no-deps "${src[@]}" "megatron-core==0.15.3" 2>&1); then
        json install ok "megatron-core==0.15.3 installed"
    else
        json install failed "$(echo "$out" | tail -1)"
        exit 1
    fi
else
    json install ok "megatron-core already importable"
fi

# rlkit's methods and backends are found through entry points (group rlkit), which exist only
# with installed metadata: where this python has none (a bare GPU image), install rlkit's
# distributions --no-deps into a folder of their own and put it on PYTHONPATH.
if ! "$PYTHON" -c "import importlib.metadata as m, sys; sys.exit(not {'rlkit_methods', 'rlkit_nemo'} <= {e.name for e in m.entry_points(group='rlkit')})" 2>/dev/null; then
    SITE=${RLKIT_SITE:-/tmp/rlkit-site}
    if out=$("$PYTHON" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --upgrade \
            --target "$SITE" . plugins/rlkit_methods plugins/rlkit_accelerate plugins/rlkit_nemo 2>&1); then
        json install ok "rlkit's distributions installed into $SITE"
        export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    else
        json install failed "$(echo "$out" | tail -1)"
        exit 1
    fi
fi
export PYTHONPATH="$PWD:$PWD/plugins/rlkit_methods:$PWD/plugins/rlkit_nemo${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
timeout --signal=TERM --kill-after=15 "$LIMIT" "$PYTHON" plugins/rlkit_nemo/scripts/gpu_check.py "${ARGS[@]}"
rc=$?
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    json time_limit failed "stopped after ${LIMIT}s; the phases above finished"
fi
exit "$rc"
