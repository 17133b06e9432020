"""The conditional truncation mask and the DAPO group filter, through the trainer's own
code path: hand-written responses go through `EvaluatorReward` (the real sandboxed
Evaluator) and `MicroCoderTrainer.compute_advantages`, exactly as a rollout does."""

import math

import pytest
import torch

from microcoder.evaluator import Evaluator, EvaluatorConfig
from microcoder.policy.generation import eos_token_ids
from microcoder.policy.model import tiny_model_and_tokenizer
from microcoder.training.config import load_config
from microcoder.training.reward import ScoredBatch
from microcoder.training.run import build_trainer
from tests.training_support import add_problem, tiny_problems

from tests.test_training_presets import CONFIGS

L = 40  # max_new_tokens of these tests
GOOD = "```python\ndef add(a, b):\n    return a + b\n```"


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(EvaluatorConfig(workers=2)) as judge:
        yield judge


def make_trainer(tmp_path, evaluator, *overrides, model=None, tokenizer=None):
    config = load_config(CONFIGS / "microcoder-tiny.yaml",
                         [f"run_dir={tmp_path}", f"max_new_tokens={L}", "repetition_m=4", *overrides])
    return build_trainer(config, tmp_path, model, tokenizer, problems=tiny_problems(), evaluator=evaluator)


def responses(tokenizer):
    """(text, token ids, expected verdict, expected truncated, expected keep at rho=1) per response.

    Two groups of G=4 (problems tiny/add-0 and tiny/add-1)."""
    eos = tokenizer.eos_token_id

    def finished(text):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]
        assert len(ids) < L
        return tokenizer.decode(ids, skip_special_tokens=True), ids

    def cut(text):
        ids = tokenizer(text + " and then some more words" * 20, add_special_tokens=False)["input_ids"][:L]
        assert len(ids) == L and eos not in ids
        return tokenizer.decode(ids), ids

    loop_prefix = tokenizer("```python\ndef add(a, b):\n", add_special_tokens=False)["input_ids"]
    loop = loop_prefix + tokenizer(" x", add_special_tokens=False)["input_ids"] * (L - len(loop_prefix))
    cases = [
        # group 1
        (*finished(GOOD), "accepted", False, 1.0),
        (*cut("```python\ndef add(a, b):\n    # think"), "no_code", True, 0.0),       # cut mid-answer: masked
        (*cut("```python\ndef add(a, b):\n    return a - b\n```\nExplanation:"), "wrong_answer", True, 1.0),
        (tokenizer.decode(loop), loop, "no_code", True, 1.0),                           # a loop keeps its penalty
        # group 2
        (*cut(GOOD + "\nExplanation:"), "accepted", True, 0.0),                        # correct but cut: masked
        (*cut("```python\ndef add(a, b):\n    return a + c\n```\nNote:"), "runtime_error", True, 1.0),
        (*finished("I do not know."), "no_code", False, 1.0),                          # finished: never masked
        (*cut("```python\ndef add(a, b):\n    return a +\n```\nNote:"), "syntax_error", True, 1.0),
    ]
    return cases


def score(trainer, cases):
    ids = [case[1] for case in cases]
    problem_ids = ["tiny/add-0"] * 4 + ["tiny/add-1"] * 4
    scored = trainer.reward.score(completions=[case[0] for case in cases], completion_ids=ids, problem_id=problem_ids)
    return scored.rewards_for_trl(), scored


def test_rho_one_masks_exactly_the_truncated_non_incorrect_non_repetitive(tmp_path, evaluator):
    trainer = make_trainer(tmp_path, evaluator, "truncation_mask_rho=1.0")
    cases = responses(trainer.processing_class)
    rewards, scored = score(trainer, cases)
    assert scored.verdicts == [case[2] for case in cases]
    assert rewards == [1.0, 0, 0, 0, 1.0, 0, 0, 0]

    decided = trainer.compute_advantages(scored)
    advantages = decided.advantages
    assert decided.mask.keep.tolist() == [case[4] for case in cases]
    assert decided.truncated.tolist() == [case[3] for case in cases]
    assert decided.mask.truncated_fraction == 6 / 8 and decided.mask.masked_fraction == 2 / 8
    assert decided.group_keep is None and decided.loss_keep is None
    # Each group: one correct of four, mean 0.25, unbiased std 0.5 -> +1.5 and -0.5, normalised over
    # all four (masked ones included), then multiplied by keep.
    expected = torch.tensor([1.5, 0.0, -0.5, -0.5, 0.0, -0.5, -0.5, -0.5])
    torch.testing.assert_close(advantages, expected, atol=1e-5, rtol=0)


def test_rho_zero_masks_nothing(tmp_path, evaluator):
    trainer = make_trainer(tmp_path, evaluator, "truncation_mask_rho=0.0")
    _, scored = score(trainer, responses(trainer.processing_class))
    decided = trainer.compute_advantages(scored)
    assert decided.mask.keep.tolist() == [1.0] * 8 and decided.mask.masked_fraction == 0.0
    torch.testing.assert_close(decided.advantages, torch.tensor([1.5, -0.5, -0.5, -0.5] * 2), atol=1e-5, rtol=0)


def test_dynamic_sampling_drops_groups_with_equal_correctness(tmp_path, evaluator):
    trainer = make_trainer(tmp_path, evaluator, "truncation_mask_rho=0.0", "dynamic_sampling=true",
                           "overlong_cache_length=8")
    finished = [[1, 2, trainer.processing_class.eos_token_id]] * 4
    truncated = [[5] * (L - 1) + [6]] * 2 + [[7] * 10 + [trainer.processing_class.eos_token_id]] * 2
    # Group 1: one correct -> kept. Group 2: all wrong but the overlong penalty makes the shaped
    # rewards differ; DAPO filters on correctness, so the group is dropped anyway.
    scored = ScoredBatch(verdicts=["accepted"] + ["wrong_answer"] * 7, correct=[1.0] + [0.0] * 7,
                         rewards=[1.0, 0, 0, 0, -1.0, -1.0, 0, 0], completion_ids=finished + truncated, seconds=0.0)
    decided = trainer.compute_advantages(scored)
    advantages, group_keep = decided.advantages, decided.group_keep
    assert group_keep.tolist() == [1.0] * 4 + [0.0] * 4
    assert advantages[4:].abs().max() == 0 and advantages[0] > 0


def test_mask_all_masks_every_truncated_response_and_drops_its_tokens(tmp_path, evaluator):
    trainer = make_trainer(tmp_path, evaluator, "truncation_mask=all")
    cases = responses(trainer.processing_class)
    _, scored = score(trainer, cases)
    decided = trainer.compute_advantages(scored)
    not_truncated = [0.0 if case[3] else 1.0 for case in cases]
    assert decided.mask.keep.tolist() == not_truncated
    assert decided.loss_keep.tolist() == not_truncated  # tokens leave the loss and its normaliser
    assert decided.mask.masked_fraction == decided.mask.truncated_fraction == 6 / 8
    assert decided.mask.qualifying_fraction == 2 / 8  # what the conditional mask could mask


def test_every_end_token_of_the_generation_config_finishes_a_response(tmp_path, evaluator):
    """A response that reaches the limit on an end token the model's generation config names
    (besides the tokenizer's EOS) is finished, not truncated. The trainer's end tokens are
    `generation.eos_token_ids`, the set `from_vllm` marks vLLM's samples with (eval-model and
    held-out on vLLM), and the ids vLLM stops on (tests/test_vllm_generation.py)."""
    model, tokenizer = tiny_model_and_tokenizer(0)
    other = 7
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, other]
    trainer = make_trainer(tmp_path, evaluator, "truncation_mask_rho=1.0", model=model, tokenizer=tokenizer)
    assert sorted(trainer.eos_token_ids) == sorted(eos_token_ids(model, tokenizer))
    rows = [list(range(100, 100 + L - 1)) + [other],                 # L tokens, the last the config's end token
            list(range(200, 200 + L - 1)) + [tokenizer.eos_token_id],  # L tokens, the last the tokenizer's EOS
            list(range(300, 300 + L)),                                # cut at the limit
            [1, 2, other]]                                            # ended early
    scored = ScoredBatch(verdicts=["accepted", "wrong_answer", "accepted", "wrong_answer"],
                         correct=[1.0, 0.0, 1.0, 0.0], rewards=[1.0, 0.0, 1.0, 0.0], completion_ids=rows, seconds=0.0)
    decided = trainer.compute_advantages(scored)
    assert decided.truncated.tolist() == [False, False, True, False]
    assert decided.mask.keep.tolist() == [1.0, 1.0, 0.0, 1.0]  # only the cut, correct response is masked


def test_a_program_before_a_cut_off_example_is_judged(tmp_path, evaluator):
    # The commonest cut-off of the default model: a complete program, then a usage example
    # cut at the limit. The program is judged: a right one scores 1, a wrong one is wrong
    # and so keeps its penalty under the conditional mask (rho=1 masks every qualifying one).
    trainer = make_trainer(tmp_path, evaluator, "truncation_mask_rho=1.0")
    tokenizer = trainer.processing_class

    def cut(text):
        ids = tokenizer(text + "\nExample:\n```python\nprint(add(1, 2))" + "\nprint(add(3, 4))" * 20,
                        add_special_tokens=False)["input_ids"][:L]
        assert len(ids) == L
        return tokenizer.decode(ids), ids

    right, wrong = cut(GOOD), cut(GOOD.replace("a + b", "a * b"))
    assert right[0].count("```") == 3  # two complete fences and one left open
    cases = [right, wrong, right, wrong]
    scored = trainer.reward.score(completions=[text for text, _ in cases], completion_ids=[ids for _, ids in cases],
                                  problem_id=["tiny/add-0"] * 4)
    assert scored.verdicts == ["accepted", "wrong_answer"] * 2 and scored.rewards == [1.0, 0.0] * 2
    decided = trainer.compute_advantages(scored)
    assert decided.mask.keep.tolist() == [0.0, 1.0, 0.0, 1.0]  # the right ones masked, the wrong keep -1
    assert (decided.advantages[[1, 3]] < 0).all()


def test_a_judge_error_is_unscorable_and_out_of_its_groups_baseline(tmp_path, evaluator):
    # A problem whose call prelude does not compile: the real evaluator says judge_error,
    # the reward gives TRL None (no reward), and the advantage step leaves it out.
    broken = add_problem(99).model_copy(update={"id": "tiny/broken", "prelude": "def (:"})
    config = load_config(CONFIGS / "microcoder-tiny.yaml", [f"run_dir={tmp_path}", "truncation_mask=none"])
    train, heldout = tiny_problems()
    trainer = build_trainer(config, tmp_path, problems=(train + [broken], heldout), evaluator=evaluator)
    eos = trainer.processing_class.eos_token_id
    problem_ids = ["tiny/add-0", "tiny/add-0", "tiny/add-0", "tiny/broken"]
    scored = trainer.reward.score(completions=[GOOD] * 4, completion_ids=[[1, eos]] * 4, problem_id=problem_ids)
    assert scored.verdicts == ["accepted"] * 3 + ["judge_error"]
    # as TRL calls a reward function (its own evaluation loop): None for the unscorable response
    rewards = trainer.reward(prompts=[""] * 4, completions=[GOOD] * 4, completion_ids=[[1, eos]] * 4,
                             problem_id=problem_ids)
    assert rewards == [1.0] * 3 + [None]
    # Group [1, 0, 0, judge error]: the baseline of [1, 0, 0] (hand-derived in
    # tests/test_algorithms_advantages.py: +1.1547, -0.5774, -0.5774) and 0 for the judge error.
    scored = ScoredBatch(verdicts=["accepted", "wrong_answer", "wrong_answer", "judge_error"],
                         correct=[1.0, 0.0, 0.0, math.nan], rewards=[1.0, 0.0, 0.0, math.nan],
                         completion_ids=[[1, eos]] * 4, seconds=0.0)
    decided = trainer.compute_advantages(scored)
    torch.testing.assert_close(decided.advantages, torch.tensor([1.1547, -0.5774, -0.5774, 0.0]), atol=1e-4, rtol=0)
