#!/usr/bin/env bash
# The GPU check: at most 10 minutes on one CUDA GPU, no network. Prints PASS/FAIL per item
# and its numbers (scripts/gpu_check.py says what each item runs):
#   environment, pass-rate-ray (the data pipeline's pass-rate stage on vLLM generation actors, one
#   engine per GPU, against the local stage; if vllm and ray are installed), train-bf16 (our
#   trainer, tiny model, bf16), vllm (if installed), judge (all cores). The stage on a cluster:
#     ray start --head --num-gpus N && microcoder data build --config configs/data/with-model.yaml \
#         --engine ray --ray-address auto                          (docs/data_pipeline.md)
#
#   bash scripts/gpu_check.sh            # on the GPU machine
#   bash scripts/gpu_check.sh --cpu      # dry run on CPU (float32): checks the script itself
#
# Needs torch (CUDA build), transformers, accelerate and peft, with datasets (TRL imports it).
# TRL need not be installed: a wheel of trl==1.16.0 in $MICROCODER_WHEELS (default: wheels/ at
# the repository root) is installed offline without dependencies when `import trl` fails.
# The project runs from this checkout (PYTHONPATH), nothing else is installed.
#   PYTHON   the interpreter (default: python3)
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
WHEELS="${MICROCODER_WHEELS:-wheels}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
if ! "$PYTHON" -c "import trl" 2>/dev/null; then
    wheel=$(ls "$WHEELS"/trl-1.16.0-*.whl 2>/dev/null | head -1)
    if [ -z "$wheel" ]; then
        echo "FAIL  environment: trl is not importable and no trl-1.16.0 wheel in $WHEELS/"
        exit 1
    fi
    "$PYTHON" -m pip install -q --no-index --no-deps "$wheel" || { echo "FAIL  environment: installing $wheel"; exit 1; }
fi
exec timeout 600 "$PYTHON" scripts/gpu_check.py "$@"
