"""MicroCoder-GRPO on verl 0.9.1 (`pip install microcoder[verl]`), judged by our evaluator.

The pieces, and the verl config key that picks each (examples/verl/ has the whole config):

    reward.py          compute_score, the reward function      reward.custom_reward_function
    reward_manager.py  MicroCoderRewardManager: tokens in,      reward.reward_manager (importlib)
                       the mask's facts coded into the reward
    score_bits.py      that code: four low bits of the float32 reward
    advantage.py       the microcoder_grpo estimator            algorithm.adv_estimator
    plugin.py          registers it in every verl process       (entry point verl.plugins)
    data.py            problems JSONL -> verl parquet           data.train_files / val_files
    problem_store.py   problems by reference (id + sha256)      reward_kwargs.problems_files
    preflight.py       checks a config in seconds, before a run  (python -m ...preflight CONFIG)

Clip-higher and no KL are verl's own keys (actor_rollout_ref.actor.clip_ratio_low/high,
use_kl_loss=false, algorithm.use_kl_in_reward=false). verl has no per-step temperature:
a staged schedule is one run per stage, each resumed from the last (docs/scaling.md).

Only `data`, `reward`, `score_bits`, `problem_store` and `advantage` import without verl;
the others need it. Tests: `bash scripts/test_verl.sh` (builds verl's environment, whose transformers pin
differs from ours, with the TransferQueue its v1 trainer needs, and runs
tests/test_integrations_verl*.py in it).
"""
