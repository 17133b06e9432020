"""MicroCoder-GRPO inside verl 0.9.1 itself: the plugin's registration, our reward manager loaded
by verl's own loader on evaluator-judged samples, and verl's `compute_advantage` with our
estimator giving the advantages our TRL trainer's pure functions give on the same inputs.
The batches here are built as verl's agent loop and padding build them; the whole v1 step
through verl's own trainer code is tests/test_integrations_verl_v1.py.

Needs verl: `bash scripts/test_verl.sh` builds its environment and runs these; in the main
environment they skip.
"""

import functools
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
from microcoder.integrations.verl.score_bits import decode_scores, encode_score  # noqa: E402
from tests.test_integrations_verl_advantage import GROUPS  # noqa: E402
from tests.test_integrations_verl_reward import (  # noqa: E402
    CORRECT, CUT_IN_CODE, EOS, LIMIT, REPETITION_M, SAMPLES, SUM_PROBLEM, WRONG, CharTokenizer, response_text,
    tokens)

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

def item(problem, *outputs, prompt_length=3):
    """One agent-loop session as verl's agent loop hands it to the reward loop: a row per
    output (token ids), prompt and response right-padded, as its `_compute_score` builds them."""
    width = max(len(ids) for ids in outputs)
    rows = len(outputs)
    responses = torch.tensor([ids + [0] * (width - len(ids)) for ids in outputs])
    attention = torch.tensor([[1] * prompt_length + [1] * len(ids) + [0] * (width - len(ids)) for ids in outputs])
    return DataProto.from_dict(
        tensors={"prompts": torch.ones(rows, prompt_length, dtype=torch.long), "responses": responses,
                 "attention_mask": attention},
        non_tensors={"data_source": np.array(["microcoder/tests"] * rows, dtype=object),
                     "reward_model": np.array([{"style": "rule", "ground_truth": problem.model_dump_json()}] * rows,
                                              dtype=object),
                     "extra_info": np.array([{"split": "train", "index": 0}] * rows, dtype=object),
                     "__num_turns__": np.array([2] * rows)})


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


def verl_batch(rows, order, padding=0):
    """What verl's v1 trainer hands compute_advantage, rows in `order`: each response stored
    as verl's `AgentLoopOutput.as_dict` stores it (rm_scores: zeros and the reward at the last
    response token, float32), then `padding` rows of verl's own padding template
    (`construct_minimal_padding_template`, what `upsample_batch_to_divisible_size` appends,
    one "pad..." uid), right-padded with zeros into (B, L) as the trainer's to_padded_tensor does."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
    from verl.trainer.ppo.padding_utils import construct_minimal_padding_template

    samples = [AgentLoopOutput(prompt_ids=[1, 2, 3], response_ids=rows[index]["ids"],
                               response_mask=[1] * len(rows[index]["ids"]), metrics=AgentLoopMetrics(),
                               reward_score=rows[index]["out"]["reward_score"]).as_dict() for index in order]
    uids = [rows[index]["uid"] for index in order]
    if padding:
        template, tag = construct_minimal_padding_template(samples[0], {"seq_len": 10}, eos_token_id=EOS)
        assert tag["is_padding"] and int(template["response_mask"].sum()) == 0
        samples += [template] * padding
        uids += ["pad0123456789abcdef"] * padding
    pad = torch.nn.utils.rnn.pad_sequence
    return DataProto.from_dict(
        tensors={"token_level_rewards": pad([sample["rm_scores"] for sample in samples], batch_first=True),
                 "response_mask": pad([sample["response_mask"] for sample in samples], batch_first=True)},
        non_tensors={"uid": np.array(uids, dtype=object)})


def trainer_reference(rows, rho, generator):
    """The pure functions our TRL trainer's compute_advantages calls, on the same facts, for
    rows in batch order (each with "uid", "verdict", "ids"): `group_advantages` of each uid's
    rewards, times `truncation_mask`'s keep with one draw per row in that order."""
    correct = torch.tensor([math.nan if row["verdict"] == "judge_error" else float(row["verdict"] == "accepted")
                            for row in rows])
    advantages = torch.zeros(len(rows))
    for uid in {row["uid"] for row in rows}:
        members = torch.tensor([position for position, row in enumerate(rows) if row["uid"] == uid])
        advantages[members] = group_advantages(correct[members], len(members), "group_std", 1e-6)
    mask = truncation_mask(
        "conditional",
        truncated=[len(row["ids"]) >= LIMIT and row["ids"][-1] != 0 for row in rows],
        non_incorrect=[non_incorrect(row["verdict"]) for row in rows],
        repetitive=[is_repetitive(row["ids"], REPETITION_M) for row in rows],
        rho=rho, generator=generator)
    return advantages * mask.keep


@pytest.mark.parametrize("rho, seed", [(1.0, 0), (0.5, 3), (0.0, 0)])
def test_verls_compute_advantage_gives_our_trainers_advantages(scored, rho, seed):
    order = [5, 0, 7, 2, 4, 1, 6, 3]  # verl's balance_batch reorders rows: groups are not contiguous
    algorithm = example_config(f"algorithm.microcoder.rho={rho}", f"algorithm.microcoder.seed={seed}").algorithm
    reset_mask_generators()
    generator = torch.Generator().manual_seed(seed)
    for _ in range(2):  # two steps: both streams of draws go on
        data = compute_advantage(verl_batch(scored, order), adv_estimator=algorithm.adv_estimator,
                                 norm_adv_by_std_in_grpo=True, config=algorithm)
        expected = trainer_reference([scored[index] for index in order], rho, generator)
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


# ---- verl's padding rows, the EOS ids, sessions of several outputs, the reward function --------

def test_verls_own_padding_rows_get_zero_and_take_no_part(scored):
    """8 responses padded to 12 with verl's own template, as for a multiple of 12."""
    order = [5, 0, 7, 2, 4, 1, 6, 3]
    algorithm = example_config("algorithm.microcoder.rho=0.5", "algorithm.microcoder.seed=3").algorithm
    reset_mask_generators()
    data = compute_advantage(verl_batch(scored, order, padding=4), adv_estimator=ESTIMATOR_NAME, config=algorithm)
    advantages, mask = data.batch["advantages"], data.batch["response_mask"]
    assert advantages.shape[0] == 12 and torch.equal(advantages[8:], torch.zeros_like(advantages[8:]))
    # the real rows as without padding: padding is in no group and draws no mask number
    expected = trainer_reference([scored[index] for index in order], 0.5, torch.Generator().manual_seed(3))
    torch.testing.assert_close(advantages[:8], expected.unsqueeze(-1) * mask[:8], atol=1e-6, rtol=0)


def manager_for(*overrides, compute_score=None):
    config = example_config(f"data.max_response_length={LIMIT}", *overrides)
    return MicroCoderRewardManager(config, CharTokenizer(), compute_score=compute_score)


EXTRA_EOS = ord("\x01")  # a second EOS id, as Qwen3 ends on <|im_end|> or <|endoftext|>


def test_every_eos_id_of_the_checkpoint_ends_a_response(tmp_path):
    """Our TRL trainer stops at the model's generation_config EOS ids and the tokenizer's: a
    response that ends on any of them exactly at the limit is finished, not truncated."""
    (tmp_path / "generation_config.json").write_text(f'{{"eos_token_id": [{EXTRA_EOS}, {EOS}]}}')
    at_limit = tokens(CUT_IN_CODE, True)[: LIMIT - 1] + [EXTRA_EOS]
    checkpoint = manager_for(f"actor_rollout_ref.model.path={tmp_path}")
    assert checkpoint.eos_token_ids == {EOS, EXTRA_EOS}
    assert not checkpoint.truncated(at_limit)
    assert checkpoint.truncated(at_limit[:-1] + [ord("x")])
    assert not checkpoint.truncated(at_limit[:-1] + [EOS])
    # no generation_config at the path: the tokenizer's EOS alone, so the same response is cut
    assert manager_for("actor_rollout_ref.model.path=/nonexistent/Qwen3-1.7B").truncated(at_limit)


def test_the_judged_facts_follow_the_checkpoints_eos_ids(tmp_path):
    """The same response judged: finished at the extra EOS, so it does not qualify for the mask."""
    (tmp_path / "generation_config.json").write_text(f'{{"eos_token_id": {EXTRA_EOS}}}')
    manager = manager_for(f"actor_rollout_ref.model.path={tmp_path}",
                          compute_score=functools.partial(reward.compute_score, evaluator_workers=1,
                                                          repetition_m=REPETITION_M))
    at_limit = tokens(CUT_IN_CODE, True)[: LIMIT - 1] + [EXTRA_EOS]
    try:
        out = manager.loop.run_until_complete(manager.run_single(item(SUM_PROBLEM, at_limit)))
    finally:
        reward.close_shared_evaluator()
    facts = out["reward_extra_info"]
    assert (facts["verdict"], facts["truncated"], facts["qualifying"]) == ("no_code", False, False)


def recording_score(calls):
    def compute_score(**kwargs):
        calls.append(kwargs)
        return {"score": 1.0, "acc": 1.0, "verdict": "accepted", "qualifying": False, "unscorable": False}
    return compute_score


def test_extra_info_holds_what_verls_naive_manager_adds():
    calls = []
    manager = manager_for(compute_score=recording_score(calls))
    session = item(SUM_PROBLEM, tokens(CORRECT, False))
    session.non_tensor_batch["tool_extra_fields"] = np.array([{"tool_calls": 0}], dtype=object)
    session.non_tensor_batch["reward_scores"] = np.array([{"rollout": 0.5}], dtype=object)
    manager.loop.run_until_complete(manager.run_single(session))
    extra_info = calls[0]["extra_info"]
    assert extra_info["num_turns"] == 2 and extra_info["rollout_reward_scores"] == {"rollout": 0.5}
    assert extra_info["tool_calls"] == 0 and extra_info["split"] == "train"
    assert extra_info["microcoder"]["truncated"] is False
    assert session.non_tensor_batch["extra_info"][0] == {"split": "train", "index": 0}  # the row's own dict untouched


def test_a_session_of_several_outputs_is_marked_in_the_reward():
    """verl's agent loop hands the manager all of a session's outputs; verl copies the reward to
    each of them, and the estimator must know (advantage.py)."""
    calls = []
    manager = manager_for(compute_score=recording_score(calls))
    first_turn, last_turn = tokens(WRONG, False), tokens(CORRECT, False)
    out = manager.loop.run_until_complete(manager.run_single(item(SUM_PROBLEM, first_turn, last_turn)))
    assert calls[0]["solution_str"] == response_text(CORRECT, False)  # the last output is judged
    rewards, _, _, several_outputs = decode_scores(torch.tensor([out["reward_score"]]))
    assert rewards.item() == 1.0 and bool(several_outputs[0])
    single = manager.loop.run_until_complete(manager.run_single(item(SUM_PROBLEM, last_turn)))
    assert not bool(decode_scores(torch.tensor([single["reward_score"]]))[3][0])


def test_verls_default_reward_function_is_refused_with_ours_named():
    """Without custom_reward_function verl's loader passes its default_compute_score."""
    config = example_config(f"data.max_response_length={LIMIT}", "reward.custom_reward_function.path=null")
    with pytest.raises(ValueError, match="custom_reward_function.path=pkg://microcoder.integrations.verl.reward"):
        load_reward_manager(config, CharTokenizer())


# ---- settings that would corrupt the estimator's input, flush-to-zero, validation metrics ------

def two_responses(first, second):
    """Coded rewards of one group of two responses, as verl's agent loop stores them."""
    rewards = torch.zeros(2, 3)
    rewards[:, -1] = torch.tensor([first, second], dtype=torch.float32)
    return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": torch.ones(2, 3)},
                               non_tensors={"uid": np.array(["a", "a"], dtype=object)})


def test_dapo_filtering_on_the_coded_reward_would_keep_groups_without_signal():
    """Why metric "reward" is refused: verl drops a group when np.std of its stored rewards is
    exactly 0; three wrong answers, coded, are not equal (their flags differ), but their acc is."""
    coded = [encode_score(0.0, qualifying) for qualifying in (False, True, False)]
    stored = torch.tensor(coded, dtype=torch.float32).tolist()  # as rm_scores.sum() reads them back
    assert float(np.std(stored)) != 0.0 and float(np.std([0.0, 0.0, 0.0])) == 0.0


@pytest.mark.parametrize("refused, accepted, message", [
    (["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=reward"],
     ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"],
     "algorithm.filter_groups.metric=reward is refused"),
    (["algorithm.rollout_correction.rollout_rs=seq_mean_k1"],  # rejection in the actor's loss instead:
     ["algorithm.rollout_correction.rollout_rs=seq_mean_k1", "algorithm.rollout_correction.bypass_mode=true"],
     "algorithm.rollout_correction.rollout_rs=seq_mean_k1 is refused"),
])
def test_verls_compute_advantage_refuses_settings_that_corrupt_the_input(refused, accepted, message):
    batch = two_responses(encode_score(1.0, False), encode_score(0.0, False))
    with pytest.raises(ValueError, match=message):
        compute_advantage(batch, adv_estimator=ESTIMATOR_NAME, config=example_config(*refused).algorithm)
    data = compute_advantage(batch, adv_estimator=ESTIMATOR_NAME, config=example_config(*accepted).algorithm)
    assert data.batch["advantages"][0, -1] > 0 > data.batch["advantages"][1, -1]


def test_a_reward_flushed_to_zero_is_refused_naming_flush_to_zero():
    """With FTZ/DAZ on where verl turns the reward into float32 (AgentLoopOutput.as_dict), a
    coded 0 is stored as 0: the estimator's error says so rather than blaming the manager alone."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    rewards = [encode_score(1.0, False), encode_score(0.0, True)]
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals to zero")
    try:
        rows = [AgentLoopOutput(prompt_ids=[1], response_ids=[5, 6], response_mask=[1, 1], metrics=AgentLoopMetrics(),
                                reward_score=value).as_dict()["rm_scores"] for value in rewards]
    finally:
        torch.set_flush_denormal(False)
    batch = DataProto.from_dict(tensors={"token_level_rewards": torch.stack(rows), "response_mask": torch.ones(2, 2)},
                                non_tensors={"uid": np.array(["a", "a"], dtype=object)})
    with pytest.raises(ValueError, match=r"1 of them are exactly 0.*flush-to-zero"):
        compute_advantage(batch, adv_estimator=ESTIMATOR_NAME, config=example_config().algorithm)


def test_validation_accuracy_over_scorable_responses(scored):
    """verl's own process_validation_metrics on our reward_extra_info: `acc` counts a
    judge_error as 0 (verl's convention), `acc_scored` leaves it out, as our summaries do."""
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    by_name = {row["name"]: row for row in scored}
    rows = [by_name[name] for name in ("correct", "wrong", "broken_problem")]  # one prompt's responses, say
    infos = {key: [row["out"]["reward_extra_info"][key] for row in rows] for key in ("acc", "acc_scored", "verdict")}
    assert infos["verdict"] == ["accepted", "wrong_answer", "judge_error"]
    metrics = process_validation_metrics(["microcoder/tests"] * 3, ["u"] * 3, infos)["microcoder/tests"]
    assert metrics["acc"]["mean@3"] == pytest.approx(1 / 3)
    assert metrics["acc_scored"]["mean@2"] == pytest.approx(1 / 2)
