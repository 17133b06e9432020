"""MicroCoder-GRPO inside verl 0.9.1 itself: the plugin's registration, our reward manager loaded
by verl's own loader on evaluator-judged samples, and verl's `compute_advantage` with our
estimator giving the advantages our TRL trainer's pure functions give on the same inputs.

Needs verl: `bash scripts/test_verl.sh` builds its environment and runs these; in the main
environment they skip.
"""

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("verl", reason="verl 0.9.1 is not installed here (its transformers pin conflicts with ours): "
                                   "run `bash scripts/test_verl.sh`, which builds its environment and runs these tests")

from hydra import compose, initialize_config_dir  # noqa: E402  (verl brings hydra)
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402
from verl.trainer.ppo.reward import load_reward_manager  # noqa: E402

from microcoder.algorithms import group_advantages, is_repetitive, non_incorrect, truncation_mask  # noqa: E402
from microcoder.integrations.verl import reward  # noqa: E402
from microcoder.integrations.verl.advantage import ESTIMATOR_NAME, reset_mask_generators  # noqa: E402
from microcoder.integrations.verl.reward_manager import MicroCoderRewardManager  # noqa: E402
from microcoder.integrations.verl.score_bits import encode_score  # noqa: E402
from tests.test_integrations_verl_advantage import GROUPS  # noqa: E402
from tests.test_integrations_verl_reward import LIMIT, REPETITION_M, SAMPLES, CharTokenizer, tokens  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "verl"
EXAMPLE = "microcoder_qwen3_1.7b_4k"


def example_config(*overrides):
    with initialize_config_dir(config_dir=str(EXAMPLES), version_base=None):
        return compose(config_name=EXAMPLE, overrides=list(overrides))


def test_the_plugin_registers_the_estimator_in_any_process_that_imports_verl():
    """A fresh interpreter, no import of ours: verl's own __init__ loads the entry point."""
    code = ("import verl\nfrom verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
            f"print(get_adv_estimator_fn({ESTIMATOR_NAME!r}).__module__)\n")
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "auto"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=True)
    assert done.stdout.strip().splitlines()[-1] == "microcoder.integrations.verl.advantage"


def test_the_example_config_composes_and_passes_verls_checks():
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    config = example_config()
    actor = config.actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.use_kl_loss) == (0.2, 0.28, False)
    assert config.algorithm.adv_estimator == ESTIMATOR_NAME and config.algorithm.use_kl_in_reward is False
    assert config.actor_rollout_ref.rollout.response_length == 4096
    assert not need_reference_policy(config) and not need_critic(config)  # no KL: no reference model
    validate_config(config=config, use_reference_policy=False, use_critic=False)


def test_the_launch_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(EXAMPLES / "run_qwen3_1.7b_4k.sh")], check=True)


# ---- samples through verl's reward loading, then verl's compute_advantage ----------------------

def item(problem, ids, prompt_length=3):
    """One response as verl's agent loop hands it to the reward loop (left-padded prompt, right-padded response)."""
    responses = torch.tensor([ids + [0] * (LIMIT + 1 - len(ids))])
    attention = torch.tensor([[1] * prompt_length + [1] * len(ids) + [0] * (LIMIT + 1 - len(ids))])
    return DataProto.from_dict(
        tensors={"prompts": torch.ones(1, prompt_length, dtype=torch.long), "responses": responses,
                 "attention_mask": attention},
        non_tensors={"data_source": np.array(["microcoder/tests"], dtype=object),
                     "reward_model": np.array([{"style": "rule", "ground_truth": problem.model_dump_json()}], dtype=object),
                     "extra_info": np.array([{"split": "train", "index": 0}], dtype=object)})


@pytest.fixture(scope="module")
def scored():
    """GROUPS' responses scored by our manager as verl loads it from the example config."""
    config = example_config(f"data.max_response_length={LIMIT}",
                            "reward.custom_reward_function.reward_kwargs.evaluator_workers=2",
                            f"reward.custom_reward_function.reward_kwargs.repetition_m={REPETITION_M}")
    manager = load_reward_manager(config, CharTokenizer())
    assert isinstance(manager, MicroCoderRewardManager)
    by_name = {sample[0]: sample for sample in SAMPLES}
    rows = []
    for group, names in enumerate(GROUPS):
        for name in names:
            _, problem, text, truncated, verdict, qualifying = by_name[name]
            ids = tokens(text, truncated)
            out = manager.loop.run_until_complete(manager.run_single(item(problem, ids)))
            rows.append({"name": name, "uid": f"prompt-{group}", "ids": ids, "verdict": verdict,
                         "qualifying": qualifying, "out": out})
    reward.close_shared_evaluator()
    return rows


def test_the_manager_returns_the_coded_reward_and_the_plain_facts(scored):
    for row in scored:
        info = row["out"]["reward_extra_info"]
        assert info["verdict"] == row["verdict"], row["name"]
        assert info["qualifying"] == row["qualifying"], row["name"]
        assert info["truncated"] == (len(row["ids"]) == LIMIT)
        assert row["out"]["reward_score"] == encode_score(info["score"], info["qualifying"], info["unscorable"])
        assert abs(row["out"]["reward_score"] - info["score"]) < 1e-6


def verl_batch(rows, order):
    """What verl's trainer hands compute_advantage, rows in `order`: the agent loop's rm_scores
    (zeros, the reward at the last response token, float32) as token_level_rewards."""
    width = LIMIT + 1
    rewards = torch.zeros(len(order), width, dtype=torch.float32)
    mask = torch.zeros(len(order), width, dtype=torch.int64)
    for position, index in enumerate(order):
        length = len(rows[index]["ids"])
        rewards[position, length - 1] = rows[index]["out"]["reward_score"]
        mask[position, :length] = 1
    uids = np.array([rows[index]["uid"] for index in order], dtype=object)
    return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": uids})


def trainer_reference(rows, order, rho, generator, group_size=4):
    """The pure functions our TRL trainer's compute_advantages calls, on the same facts.

    Group advantages over the groups laid out contiguously (as the trainer has them), then
    put in verl's row order; the mask's draws in that same row order (one per row)."""
    correct = torch.tensor([math.nan if row["verdict"] == "judge_error" else float(row["verdict"] == "accepted")
                            for row in rows])
    contiguous = group_advantages(correct, group_size, "group_std", 1e-6)
    ordered = [rows[index] for index in order]
    mask = truncation_mask(
        "conditional",
        truncated=[len(row["ids"]) >= LIMIT and row["ids"][-1] != 0 for row in ordered],
        non_incorrect=[non_incorrect(row["verdict"]) for row in ordered],
        repetitive=[is_repetitive(row["ids"], REPETITION_M) for row in ordered],
        rho=rho, generator=generator)
    return contiguous[torch.tensor(order)] * mask.keep


@pytest.mark.parametrize("rho, seed", [(1.0, 0), (0.5, 3), (0.0, 0)])
def test_verls_compute_advantage_gives_our_trainers_advantages(scored, rho, seed):
    order = [5, 0, 7, 2, 4, 1, 6, 3]  # verl's balance_batch reorders rows: groups are not contiguous
    algorithm = example_config(f"algorithm.microcoder.rho={rho}", f"algorithm.microcoder.seed={seed}").algorithm
    reset_mask_generators()
    generator = torch.Generator().manual_seed(seed)
    for _ in range(2):  # two steps: both streams of draws go on
        data = compute_advantage(verl_batch(scored, order), adv_estimator=algorithm.adv_estimator,
                                 norm_adv_by_std_in_grpo=True, config=algorithm)
        expected = trainer_reference(scored, order, rho, generator)
        advantages, mask = data.batch["advantages"], data.batch["response_mask"]
        torch.testing.assert_close(advantages, expected.unsqueeze(-1) * mask, atol=1e-6, rtol=0)
        assert torch.equal(data.batch["returns"], advantages)


def test_with_rho_zero_it_is_verls_own_grpo():
    """A second implementation: verl's GRPO on the same rewards (groups of two or more, none unscorable)."""
    generator = torch.Generator().manual_seed(11)
    groups, size, width = 6, 5, 9
    correct = torch.randint(0, 2, (groups * size,), generator=generator).float()
    lengths = torch.randint(1, width + 1, (groups * size,), generator=generator)
    order = torch.randperm(groups * size, generator=generator).tolist()

    def batch():
        rewards = torch.zeros(groups * size, width)
        mask = torch.zeros(groups * size, width, dtype=torch.int64)
        for position, index in enumerate(order):
            rewards[position, lengths[index] - 1] = encode_score(float(correct[index]), bool(index % 3 == 0))
            mask[position, : lengths[index]] = 1
        uids = np.array([f"g{index // size}" for index in order], dtype=object)
        return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                                   non_tensors={"uid": uids})

    algorithm = example_config("algorithm.microcoder.rho=0.0").algorithm
    ours = compute_advantage(batch(), adv_estimator=ESTIMATOR_NAME, config=algorithm).batch["advantages"]
    theirs = compute_advantage(batch(), adv_estimator="grpo", config=algorithm).batch["advantages"]
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_plain_rewards_and_a_kl_penalty_in_the_reward_are_refused():
    rewards = torch.zeros(2, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0])
    plain = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": torch.ones(2, 3)},
                                non_tensors={"uid": np.array(["a", "a"], dtype=object)})
    with pytest.raises(ValueError, match="MicroCoderRewardManager"):
        compute_advantage(plain, adv_estimator=ESTIMATOR_NAME, config=example_config().algorithm)
    with pytest.raises(ValueError, match="use_kl_in_reward"):
        compute_advantage(plain, adv_estimator=ESTIMATOR_NAME,
                          config=example_config("algorithm.use_kl_in_reward=true").algorithm)
