#!/usr/bin/env bash
# Builds verl's own environment (idempotently) and runs the verl integration tests in it.
#
#   bash scripts/test_verl.sh [pytest arguments]
#
# verl 0.9.1 pins transformers<5.11 and our train extra pins 5.24, so verl cannot live in
# the main environment; this one holds torch 2.13.0 (CPU), microcoder[verl,dev] (our base
# dependencies, verl 0.9.1 and what it imports, with TransferQueue 0.1.11: the store of
# verl's v1 trainer, its default, named by verl's verl-core extra, not by its base
# requirements; tests/test_integrations_verl_v1.py runs a v1 step on a local Ray with it) and nothing of
# the train extra. In the main environment (CI) the same tests that need verl skip, saying why.
# Among them: the preflight run as a user runs it (test_integrations_verl_preflight.py), the judge
# inside verl's reward worker as a Ray actor (test_integrations_verl_ray_reward.py) and the refused
# settings (test_integrations_verl_estimator.py, _preflight.py). Each starts and stops its own local
# Ray (at most 2 CPUs).
#   VERL_VENV   where the environment lives (default: ~/.cache/microcoder/venv-verl)
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
VENV="${VERL_VENV:-$HOME/.cache/microcoder/venv-verl}"
if [ ! -x "$VENV/bin/python" ]; then
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv "$VENV"
fi
# torch first and held at 2.13.0 for every later install: a local CPU wheel here, and
# nothing verl needs asks for another version (one that did would pull a CUDA build).
"$VENV/bin/python" -m pip install -q torch==2.13.0
echo "torch==2.13.0" > "$VENV/constraints.txt"
# Editable and re-run every time: the entry point that registers the estimator
# (verl.plugins) is read from the installed metadata, so it must follow pyproject.toml.
"$VENV/bin/python" -m pip install -q -c "$VENV/constraints.txt" -e ".[verl,dev]"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec "$VENV/bin/python" -m pytest -q tests/test_integrations_verl*.py "$@"
