#!/usr/bin/env bash
# MicroCoder-GRPO on verl 0.9.1, Qwen3-1.7B at a 4K response limit, one node of 8 GPUs.
# NOT RUN: nothing in this repository has run on a GPU (docs/scaling.md, "verl").
#
#   bash examples/verl/run_qwen3_1.7b_4k.sh TRAIN.jsonl HELDOUT.jsonl [key=value ...]
#
# Environment: a machine with CUDA and verl 0.9.1's GPU stack (verl's own install guide:
# its vllm extra pins torch 2.11 and vllm 0.24), then `pip install -e ".[verl]"
# TransferQueue==0.1.11` from this repository (the verl extra, and the store verl's v1
# trainer needs; not beside the train extra, whose transformers pin differs).
# Extra key=value arguments go to both stages (e.g. actor_rollout_ref.model.path=/models/Qwen3-1.7B).
set -euo pipefail
cd "$(dirname "$0")/../.."
TRAIN="${1:?usage: $0 TRAIN.jsonl HELDOUT.jsonl [key=value ...]}"
HELDOUT="${2:?usage: $0 TRAIN.jsonl HELDOUT.jsonl [key=value ...]}"
shift 2

# 1. Our problems as verl's parquet (the config's data.train_files / data.val_files). Rows
# name their problems by id and sha256; each reward worker reads them from the JSONL files.
python3 -m microcoder.integrations.verl.data "$TRAIN" --out data/verl/train.parquet --split train
python3 -m microcoder.integrations.verl.data "$HELDOUT" --out data/verl/heldout.parquet --split heldout
PROBLEMS="reward.custom_reward_function.reward_kwargs.problems_files=['$(realpath "$TRAIN")','$(realpath "$HELDOUT")']"

# 1b. The preflight: the estimator resolves in a Ray worker, the reward path judges a correct
# and a wrong answer, no refused setting, no flush-to-zero, every problem found. Seconds to
# a minute; a failure names the key at fault.
python3 -m microcoder.integrations.verl.preflight examples/verl/microcoder_qwen3_1.7b_4k.yaml "$PROBLEMS" "$@"

# 2. The staged temperature schedule, low to high. verl 0.9.1 reads one rollout temperature
# per run (sampling and the ratio's log-probs both use it) and has no per-step schedule, so
# each stage is a run: stage 1 trains steps 1-140 at T = 0.6 and checkpoints at 140
# (save_freq 20); stage 2 resumes from that checkpoint (resume_mode auto, same
# experiment directory) and trains steps 141-300 at T = 1.2. The paper's staged runs
# switched at about step 140; its stable fixed temperatures were 1.2 and above.
run_stage() {
    python3 -m verl.trainer.main_ppo --config-path "$PWD/examples/verl" --config-name microcoder_qwen3_1.7b_4k \
        "actor_rollout_ref.rollout.temperature=$1" "trainer.total_training_steps=$2" "$PROBLEMS" "${@:3}"
}
run_stage 0.6 140 "$@"
run_stage 1.2 300 "$@"
