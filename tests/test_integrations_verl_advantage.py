"""MicroCoder-GRPO's verl estimator without verl: the reward's coded bits, the math against
hand-derived numbers, and the same advantages as our TRL trainer's own `compute_advantages`.

The same estimator through verl's `compute_advantage` is tests/test_integrations_verl_estimator.py.
"""

import math
from types import SimpleNamespace

import pytest
import torch

from microcoder.integrations.verl import reward
from microcoder.integrations.verl.advantage import (
    compute_microcoder_grpo_advantage,
    microcoder_grpo_advantages,
    reset_mask_generators,
    settings_from_config,
)
from microcoder.integrations.verl.score_bits import decode_scores, encode_score
from tests.test_integrations_verl_reward import LIMIT, REPETITION_M, SAMPLES, score, tokens

# Two groups of G = 4, the samples' verdicts spread over both (see test_integrations_verl_reward).
GROUPS = [["correct", "wrong", "cut_in_code", "correct_then_cut"],
          ["wrong_then_cut", "loop", "broken_problem", "cut_in_code"]]


@pytest.fixture(scope="module")
def judged():
    """Each response of GROUPS judged by compute_score (the real evaluator), in batch order."""
    by_name = {sample[0]: sample for sample in SAMPLES}
    rows = []
    for group, names in enumerate(GROUPS):
        for name in names:
            _, problem, text, truncated, _, _ = by_name[name]
            rows.append({"name": name, "group": group, "ids": tokens(text, truncated),
                         "result": score(problem, text, truncated)})
    reward.close_shared_evaluator()
    return rows


def coded_batch(rows, width=LIMIT + 1):
    """verl's view of the rows: (B, L) token_level_rewards with the coded reward at the last
    response token, the response mask, and the group uids."""
    batch = len(rows)
    token_level_rewards = torch.zeros(batch, width)
    response_mask = torch.zeros(batch, width, dtype=torch.int64)
    for row, item in enumerate(rows):
        length = len(item["ids"])
        result = item["result"]
        response_mask[row, :length] = 1
        token_level_rewards[row, length - 1] = encode_score(result["score"], result["qualifying"], result["unscorable"])
    return token_level_rewards, response_mask, [f"uid-{item['group']}" for item in rows]


# ---- the bits -------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [0.0, 1.0, -1.0, 0.5, 0.25, -0.75, 3.0])
@pytest.mark.parametrize("qualifying", [False, True])
@pytest.mark.parametrize("unscorable", [False, True])
@pytest.mark.parametrize("several_outputs", [False, True])
def test_dyadic_rewards_come_back_exactly_with_their_flags(value, qualifying, unscorable, several_outputs):
    coded = torch.tensor([encode_score(value, qualifying, unscorable, several_outputs)], dtype=torch.float32)
    rewards, qualifying_back, unscorable_back, several_back = decode_scores(coded)
    assert bool(qualifying_back[0]) == qualifying and bool(unscorable_back[0]) == unscorable
    assert bool(several_back[0]) == several_outputs
    if unscorable:
        assert math.isnan(rewards[0])
    else:
        assert rewards[0].item() == value
    assert abs(coded[0].item() - value) <= 15 * 2**-23 * max(abs(value), 2**-126)


def test_what_verls_metrics_read_for_one_and_zero():
    # 1 with the marker (bit 2) and qualifying (bit 0): 1 + 5 * 2^-23, the most a single
    # output's 1 reads as (unscorable responses score 0).
    assert encode_score(1.0, True) == 1 + 5 * 2**-23 == pytest.approx(1.0000006, abs=1e-7)
    assert 0 < encode_score(0.0, True, several_outputs=True) <= 15 * 2**-149 < 3e-44


def test_a_shaped_reward_moves_by_at_most_fifteen_ulps():
    as_float32 = torch.tensor(-0.123456789, dtype=torch.float32)
    ulp = 2.0**-27  # of a float32 in [2^-4, 2^-3)
    coded = encode_score(as_float32.item(), True)
    assert abs(decode_scores(torch.tensor([coded]))[0][0].item() - as_float32.item()) <= 15 * ulp
    assert abs(coded - as_float32.item()) <= 15 * ulp


def test_a_plain_reward_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="MicroCoderRewardManager"):
        decode_scores(torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="finite"):
        encode_score(math.nan, False)


# ---- the math -------------------------------------------------------------------------------

def test_hand_derived_advantages_with_groups_out_of_order():
    # Rows 0, 2, 3 are group "a" (rewards 1, 0, 0), rows 1, 4 group "b" (0, 1), row 5 alone.
    # a: mean 1/3, unbiased std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3) = 0.57735
    #    -> (2/3) / 0.57735 = 1.1547, (-1/3) / 0.57735 = -0.57735
    # b: mean 1/2, std sqrt(2 * 0.25 / 1) = 0.70711 -> -0.70711, 0.70711
    # a group of one: 0. Row 3 qualifies and rho = 1 masks it.
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    qualifying = torch.tensor([False, False, False, True, False, False])
    advantages, mask = microcoder_grpo_advantages(rewards, qualifying, ["a", "b", "a", "a", "b", "c"], 1.0,
                                                  torch.Generator().manual_seed(0))
    expected = torch.tensor([1.1547, -0.70711, -0.57735, 0.0, 0.70711, 0.0])
    torch.testing.assert_close(advantages, expected, atol=1e-4, rtol=0)
    assert mask.masked_fraction == pytest.approx(1 / 6)


def test_an_unscorable_response_is_out_of_its_group_and_gets_zero():
    # Group (1, 0, NaN): as if (1, 0): mean 0.5, std 0.70711.
    advantages, _ = microcoder_grpo_advantages(torch.tensor([1.0, 0.0, math.nan]), torch.zeros(3, dtype=torch.bool),
                                               ["g"] * 3, 0.0, torch.Generator())
    torch.testing.assert_close(advantages, torch.tensor([0.70711, -0.70711, 0.0]), atol=1e-4, rtol=0)


def test_settings_come_from_the_algorithm_node():
    assert settings_from_config(None) == {"rho": 0.3, "seed": 0, "eps": 1e-6, "mode": "group_std"}
    node = {"norm_adv_by_std_in_grpo": False, "microcoder": {"rho": 0.1, "seed": 5}}
    assert settings_from_config(node) == {"rho": 0.1, "seed": 5, "eps": 1e-6, "mode": "none"}
    with pytest.raises(ValueError, match="use_kl_in_reward"):
        settings_from_config({"use_kl_in_reward": True})
    with pytest.raises(ValueError, match="rho"):
        settings_from_config({"microcoder": {"rho": 1.5}})


def test_the_mask_defaults_have_one_home_in_algorithms():
    import inspect

    from microcoder.algorithms import masking
    from microcoder.integrations.verl import advantage, preflight
    from microcoder.training.config import TrainConfig

    # The estimator's and the preflight's rho are algorithms' constant itself, not a copy of it,
    # and it is the TRL trainer's default too.
    assert advantage.DEFAULT_RHO is masking.DEFAULT_RHO and preflight.DEFAULT_RHO is masking.DEFAULT_RHO
    assert settings_from_config(None)["rho"] == masking.DEFAULT_RHO == TrainConfig().truncation_mask_rho
    # verl's m is the paper's (the TRL presets set a shorter one for their short responses).
    assert inspect.signature(reward.compute_score).parameters["repetition_m"].default == masking.PAPER_REPETITION_M


# ---- what verl hands the estimator: padding, several outputs, dtype, denormals ------------------

def with_verls_padding(token_level_rewards, response_mask, uids, count):
    """The batch after verl's v1 `upsample_batch_to_divisible_size` appended `count` rows (its
    template, verl/trainer/ppo/padding_utils.py: a 1-token response with response_mask 0 and
    rm_scores 0, one uid "pad<hex>" for all), at the end, as verl appends them."""
    width = token_level_rewards.shape[1]
    rewards = torch.cat([token_level_rewards, torch.zeros(count, width)])
    mask = torch.cat([response_mask, torch.zeros(count, width, dtype=response_mask.dtype)])
    return rewards, mask, list(uids) + ["pad5f0c3a9e1b7d4e2f8a6c0b9d3e1f7a2c"] * count


def test_verls_padding_rows_get_zero_and_take_no_part(judged):
    """verl pads a batch that does not divide its mini-batches; those rows carry no reward of ours."""
    token_level_rewards, response_mask, uids = coded_batch(judged)
    config = {"microcoder": {"rho": 0.5, "seed": 3}}
    padded_batch = with_verls_padding(token_level_rewards, response_mask, uids, 4)
    reset_mask_generators()
    unpadded, _ = compute_microcoder_grpo_advantage(token_level_rewards, response_mask, uids, config)
    unpadded_next, _ = compute_microcoder_grpo_advantage(token_level_rewards, response_mask, uids, config)
    reset_mask_generators()
    padded, _ = compute_microcoder_grpo_advantage(*padded_batch, config)
    padded_next, _ = compute_microcoder_grpo_advantage(*padded_batch, config)
    assert torch.equal(padded[len(judged):], torch.zeros(4, padded.shape[1]))
    # the same advantages and the same mask draws: padding is in no group and draws nothing.
    # The padding rows come last, so a draw per padding row would leave this step's draws
    # alone and only move the stream on: the next step is what shows it.
    assert torch.equal(padded[: len(judged)], unpadded)
    assert torch.equal(padded_next[: len(judged)], unpadded_next)
    assert not torch.equal(unpadded, unpadded_next)  # the next step's draws do differ


def test_a_session_of_several_outputs_is_refused(judged):
    token_level_rewards, response_mask, uids = coded_batch(judged)
    result = judged[0]["result"]
    token_level_rewards[0, len(judged[0]["ids"]) - 1] = encode_score(result["score"], result["qualifying"],
                                                                     result["unscorable"], several_outputs=True)
    with pytest.raises(ValueError, match="several outputs"):
        compute_microcoder_grpo_advantage(token_level_rewards, response_mask, uids, None)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rewards_cast_to_a_smaller_float_are_refused_by_name(judged, dtype):
    token_level_rewards, response_mask, uids = coded_batch(judged)
    with pytest.raises(ValueError, match=f"float32.*{str(dtype)}"):
        compute_microcoder_grpo_advantage(token_level_rewards.to(dtype), response_mask, uids, None)


def test_a_row_with_several_nonzero_rewards_is_refused(judged):
    token_level_rewards, response_mask, uids = coded_batch(judged)
    token_level_rewards[1, 0] = -0.01  # a per-token penalty on top of the reward
    with pytest.raises(ValueError, match="more than one nonzero"):
        compute_microcoder_grpo_advantage(token_level_rewards, response_mask, uids, None)


def test_the_coded_reward_is_read_whole_when_denormals_flush_to_zero(judged):
    """A coded 0 reward is a float32 denormal (the marker bit alone): an arithmetic read (a row
    sum) under flush-to-zero gives 0.0, whose marker is gone. The estimator reads bits."""
    token_level_rewards, response_mask, uids = coded_batch(judged)  # built before flushing
    reset_mask_generators()
    expected, _ = compute_microcoder_grpo_advantage(token_level_rewards, response_mask, uids, None)
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals")
    try:
        assert token_level_rewards.sum(dim=-1)[1].item() == 0.0  # the wrong answer's coded 0, summed: flushed
        reset_mask_generators()
        advantages, _ = compute_microcoder_grpo_advantage(token_level_rewards, response_mask, uids, None)
    finally:
        torch.set_flush_denormal(False)
    assert torch.equal(advantages, expected)


# ---- the same advantages as our TRL trainer --------------------------------------------------

def trainer_advantages(rows, rho, generator):
    """`MicroCoderTrainer.compute_advantages` itself, on one process, with the facts it reads."""
    pytest.importorskip("trl", reason="the TRL trainer is not installed (verl's environment has no train extra)")
    from microcoder.training.config import TrainConfig
    from microcoder.training.reward import ScoredBatch
    from microcoder.training.trainer import MicroCoderTrainer

    class OneProcess:
        process_index, num_processes, device = 0, 1, "cpu"

        def gather(self, tensor):
            return tensor

    config = TrainConfig(group_size=4, max_new_tokens=LIMIT, repetition_m=REPETITION_M, truncation_mask="conditional",
                         truncation_mask_rho=rho, advantage_mode="group_std", advantage_eps=1e-6)
    stub = SimpleNamespace(config=config, accelerator=OneProcess(), eos_token_ids=[0], mask_generator=generator)
    correct = [math.nan if item["result"]["unscorable"] else item["result"]["score"] for item in rows]
    scored = ScoredBatch([item["result"]["verdict"] for item in rows], correct, list(correct),
                         [item["ids"] for item in rows], 0.0)
    return MicroCoderTrainer.compute_advantages(stub, scored).advantages


@pytest.mark.parametrize("rho, seed", [(1.0, 0), (0.5, 7), (0.0, 0)])
def test_the_estimator_gives_the_trainers_advantages(judged, rho, seed):
    """Two steps in a row (the draws' stream goes on), through verl's estimator signature."""
    token_level_rewards, response_mask, uids = coded_batch(judged)
    reset_mask_generators()
    trainer_generator = torch.Generator().manual_seed(seed)
    config = {"microcoder": {"rho": rho, "seed": seed}}
    for _ in range(2):
        expected = trainer_advantages(judged, rho, trainer_generator)
        advantages, returns = compute_microcoder_grpo_advantage(token_level_rewards, response_mask, uids, config)
        assert torch.equal(advantages, returns)
        torch.testing.assert_close(advantages[:, 0], expected, atol=1e-6, rtol=0)
        assert torch.equal(advantages == 0, (advantages[:, :1] == 0).expand_as(advantages) | (response_mask == 0))
    if rho == 1.0:  # every qualifying response (cut_in_code twice, correct_then_cut) is masked
        masked = [item["name"] for item, value in zip(judged, expected.tolist())
                  if value == 0 and item["result"]["qualifying"]]
        assert sorted(masked) == ["correct_then_cut", "cut_in_code", "cut_in_code"]
