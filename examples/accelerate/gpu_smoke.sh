#!/usr/bin/env bash
# Runs examples/accelerate/smoke.py under each shipped accelerate config on the GPUs of this
# machine (all of them; NPROC=n to choose). Needs rlkit with its accelerate plugin, peft, and
# deepspeed for the ZeRO configs. Exits non-zero if any run fails (or hangs past RUN_TIMEOUT
# seconds, 300 by default); prints one line per run.
#   bash examples/accelerate/gpu_smoke.sh [OUT]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-smoke-out}
NPROC=${NPROC:-$(python3 -c "import torch; print(max(torch.cuda.device_count(), 1))")}
RUNS=${RUNS:-"ddp:ppo zero2:ppo zero2:ppo_lora zero2:ilql zero2:sft zero3:ppo zero3:ilql zero3:sft fsdp:ppo fsdp:ppo_lora fsdp:ilql fsdp:sft"}
failed=0
for run in $RUNS; do
    config=${run%%:*} method=${run##*:}
    log="$OUT/$config-$method.log"
    mkdir -p "$OUT/$config-$method"
    start=$(date +%s)
    if timeout "${RUN_TIMEOUT:-300}" accelerate launch --config_file "examples/accelerate/$config.yaml" --num_processes "$NPROC" \
        examples/accelerate/smoke.py "$method" "$OUT/$config-$method" > "$log" 2>&1; then status=ok; else status=FAILED; failed=1; fi
    echo "[$config $method: $status in $(( $(date +%s) - start )) s]"
    grep -E "^(ppo|ilql|sft)" "$log" || tail -n 25 "$log"
done
exit $failed
