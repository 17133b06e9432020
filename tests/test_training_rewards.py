"""Reward modes, the test budget and the verdict cache on the real training path.

Hand-written responses go through the trainer's own `EvaluatorReward` (the real sandboxed
Evaluator, as `build_trainer` wires it from the config) and `compute_advantages`; the
slow test trains the tiny model with its decoded responses mapped onto a few programs.
Each test here fails when its mechanism is taken out of the reward or the trainer.
"""

import hashlib

import pytest
import torch

from microcoder.evaluator import Evaluator, EvaluatorConfig
from microcoder.policy.model import tiny_model_and_tokenizer
from microcoder.problems import Problem
from microcoder.training.config import load_config
from microcoder.training.run import build_trainer
from tests.test_training_presets import CONFIGS
from tests.training_support import tiny_problems

# tiny/add-0's tests: "1\n2" -> 3, then "0\n5" -> 5.
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
SECOND_ONLY = "```python\ndef add(a, b):\n    return a + b if a == 0 else -1\n```"  # fails test 1, passes test 2
FIRST_ONLY = "```python\ndef add(a, b):\n    return 3\n```"  # passes test 1 only
WRONG = "```python\ndef add(a, b):\n    return a - b - 100\n```"


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(EvaluatorConfig(workers=2)) as judge:
        yield judge


class Counting:
    """The real evaluator, counting the samples it is asked to judge."""

    def __init__(self, evaluator):
        self.evaluator, self.judged = evaluator, 0

    def __getattr__(self, name):
        return getattr(self.evaluator, name)

    def with_options(self, **changes):
        view = Counting(self.evaluator.with_options(**changes))
        view.count = self
        return view

    def evaluate(self, problems, samples, on_result=None):
        getattr(self, "count", self).judged += len(samples)
        return self.evaluator.evaluate(problems, samples, on_result)


def make_trainer(tmp_path, evaluator, *overrides, problems=None):
    config = load_config(CONFIGS / "microcoder-tiny.yaml", [f"run_dir={tmp_path}", "truncation_mask=none", *overrides])
    return build_trainer(config, tmp_path, problems=problems or tiny_problems(), evaluator=evaluator)


def score(trainer, programs, problem_id="tiny/add-0"):
    eos = trainer.processing_class.eos_token_id
    scored = trainer.reward.score(completions=list(programs), completion_ids=[[1, eos]] * len(programs),
                                  problem_id=[problem_id] * len(programs))
    return scored.rewards_for_trl(), scored


@pytest.mark.parametrize("mode, expected", [
    ("reward_mode=binary", [1.0, 0.0, 0.0, 0.0]),
    ("reward_mode=fraction", [1.0, 0.5, 0.5, 0.0]),
    # (1/2) ** 2
    ("reward_mode=fraction_pow", [1.0, 0.25, 0.25, 0.0]),
])
def test_each_reward_mode_reaches_the_rewards(tmp_path, evaluator, mode, expected):
    trainer = make_trainer(tmp_path, evaluator, mode, "reward_pow=2")
    rewards, scored = score(trainer, [RIGHT, SECOND_ONLY, FIRST_ONLY, WRONG])
    # SECOND_ONLY fails the first test: its half only counts because the fraction modes run every test.
    assert rewards == expected and scored.task_rewards == expected
    assert scored.correct == [1.0, 0.0, 0.0, 0.0]  # accuracy stays pass/fail
    assert scored.verdicts == ["accepted", "wrong_answer", "wrong_answer", "wrong_answer"]


def test_dapo_filters_on_the_modes_reward(tmp_path, evaluator):
    # Two groups: [right, wrong x3] is mixed under every mode; [first-only, wrong x3] is
    # all-wrong by accuracy but its fractions differ (0.5 vs 0): under fraction it carries
    # a gradient and DAPO keeps it; under binary its rewards are equal and it is dropped.
    programs = [RIGHT, WRONG, WRONG, WRONG, FIRST_ONLY, WRONG, WRONG, WRONG]
    kept = {}
    for mode in ("binary", "fraction"):
        trainer = make_trainer(tmp_path / mode, evaluator, f"reward_mode={mode}", "dynamic_sampling=true")
        _, scored = score(trainer, programs)
        decided = trainer.compute_advantages(scored)
        kept[mode] = decided.group_keep.tolist()
        assert trainer.mixed_groups(scored) == [index for index in (0, 1) if kept[mode][4 * index]]
    assert kept["binary"] == [1.0] * 4 + [0.0] * 4
    assert kept["fraction"] == [1.0] * 8


def test_the_truncation_mask_reads_verdicts_under_every_mode(tmp_path, evaluator):
    # A truncated program that passes half the tests is still judged wrong: it keeps its
    # penalty under fraction as under binary; a truncated response without code qualifies.
    qualifying = {}
    for mode in ("binary", "fraction"):
        trainer = make_trainer(tmp_path / mode, evaluator, f"reward_mode={mode}", "truncation_mask=conditional",
                               "truncation_mask_rho=1.0", "max_new_tokens=8")
        cut = list(range(5, 13))  # 8 tokens, no EOS at the limit: truncated, and not a loop
        eos = trainer.processing_class.eos_token_id
        scored = trainer.reward.score(completions=[FIRST_ONLY, "```python\ndef add(a, b):", RIGHT, WRONG],
                                      completion_ids=[cut, cut, [1, eos], [1, eos]], problem_id=["tiny/add-0"] * 4)
        decided = trainer.compute_advantages(scored)
        qualifying[mode] = decided.mask.qualifying.tolist()
    assert qualifying["binary"] == qualifying["fraction"] == [False, True, False, False]


def budget_problem() -> Problem:
    # Inputs of different lengths: with reward_max_tests=1 only the longest (index 2) is judged.
    return Problem(id="tiny/budget", kind="call", entry_point="add", prompt="Return a + b.",
                   tests=[{"input": "1\n2", "output": "3"}, {"input": "10\n20", "output": "30"},
                          {"input": "1000000\n2000000", "output": "3000000"}, {"input": "7\n8", "output": "15"}])


def test_the_test_budget_judges_the_chosen_tests_only(tmp_path, evaluator):
    code = "def add(a, b):\n    return a + b if a > 999 else 0"  # right on the longest input only
    big_only = f"```python\n{code}\n```"
    train, heldout = tiny_problems()
    problems = (train + [budget_problem()], heldout)
    full = make_trainer(tmp_path / "full", evaluator, problems=problems)
    budget = make_trainer(tmp_path / "budget", evaluator, "reward_max_tests=1", problems=problems)
    assert score(full, [big_only], "tiny/budget")[0] == [0.0]
    rewards, scored = score(budget, [big_only], "tiny/budget")
    assert rewards == [1.0] and scored.verdicts == ["accepted"]
    # The budget is the reward's only: held-out accuracy judges with the evaluator on every test.
    assert len(budget.reward.problems["tiny/budget"].tests) == 1
    assert budget.reward.evaluator.evaluate_code(budget_problem(), code).verdict == "wrong_answer"


def test_the_budget_judges_hidden_tests_before_shown_ones(tmp_path, evaluator):
    # The longest input is the statement's example (shown): the length rule alone would
    # spend a budget of 1 on it, and a program that returns the shown answer would earn 1.
    problem = budget_problem().model_copy(update={"id": "tiny/shown", "prompt": "Return a + b: 1000000, 2000000 -> 3000000."})
    problem.tests[2].shown = True
    shown_answer = "```python\ndef add(a, b):\n    return 3000000\n```"
    train, heldout = tiny_problems()
    budget = make_trainer(tmp_path, evaluator, "reward_max_tests=1", problems=(train + [problem], heldout))
    chosen = budget.reward.problems["tiny/shown"].tests
    assert len(chosen) == 1 and not chosen[0].shown
    rewards, scored = score(budget, [shown_answer, RIGHT], "tiny/shown")
    assert rewards == [0.0, 1.0] and scored.verdicts[0] == "wrong_answer"
    assert scored.tests_hidden == [1.0, 1.0]  # what the step logs as reward_tests_hidden
    full = make_trainer(tmp_path / "full", evaluator, problems=(train + [problem], heldout))
    assert score(full, [RIGHT], "tiny/shown")[1].tests_hidden == [0.75]  # every test: 3 hidden of 4


def test_the_cache_judges_repeats_once_and_changes_no_reward(tmp_path, evaluator):
    programs = [RIGHT, FIRST_ONLY, RIGHT, "no code at all", FIRST_ONLY, WRONG, RIGHT, RIGHT]
    counted = {}
    for size in (0, 64):
        counting = Counting(evaluator)
        trainer = make_trainer(tmp_path / str(size), counting, f"reward_cache_size={size}", "reward_mode=fraction")
        first, scored = score(trainer, programs)
        second, again = score(trainer, programs)
        counted[size] = (first, second, scored.cache_hits, again.cache_hits, counting.judged)
    off, on = counted[0], counted[64]
    assert on[0] == on[1] == off[0] == off[1] == [1.0, 0.5, 1.0, 0.0, 0.5, 0.0, 1.0, 1.0]
    assert off[4] == 16 and off[2] == off[3] == [False] * 8
    # first call: 3 programs and the no-code response judged; second: only the no-code one
    assert on[4] == 4 + 1
    assert on[2] == [False, False, True, False, True, False, True, True]
    assert on[3] == [True, True, True, False, True, True, True, True]


# ---- training the tiny model ----------------------------------------------------------------

POOL = [RIGHT, FIRST_ONLY, WRONG]


def programs_for(tokenizer):
    """Decode each response as one of POOL, picked by a digest of its tokens (deterministic)."""
    decode = tokenizer.batch_decode

    def batch_decode(sequences, **kwargs):
        texts = decode(sequences, **kwargs)
        return [POOL[hashlib.sha256(text.encode()).digest()[0] % len(POOL)] for text in texts]

    return batch_decode


def train(run_dir, evaluator, *overrides):
    """Two rollout steps of the tiny preset; (verdicts and rewards per step, metrics records, final weights)."""
    config = load_config(CONFIGS / "microcoder-tiny.yaml", [f"run_dir={run_dir}", "heldout_size=0", "save_every=0",
                                                            "reward_mode=fraction", *overrides])
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    trainer = build_trainer(config, run_dir, model, tokenizer, problems=(tiny_problems()[0], []), evaluator=evaluator)
    trainer.processing_class.batch_decode = programs_for(tokenizer)
    scored, records = [], []
    advantages, finish = trainer.compute_advantages, trainer._finish_step

    def recording(batch):
        scored.append((list(batch.verdicts), list(batch.rewards), list(batch.cache_hits)))
        return advantages(batch)

    def finishing():
        records.append(finish())
        return records[-1]

    trainer.compute_advantages, trainer._finish_step = recording, finishing
    trainer.train()
    weights = {name: value.detach().clone() for name, value in trainer.model.named_parameters()}
    return scored, records, weights


@pytest.mark.slow
def test_training_with_the_cache_gives_the_same_rewards_and_weights(tmp_path, evaluator):
    with_cache, without = Counting(evaluator), Counting(evaluator)
    on = train(tmp_path / "on", with_cache)
    off = train(tmp_path / "off", without, "reward_cache_size=0")
    (scored_on, records_on, weights_on), (scored_off, records_off, weights_off) = on, off
    assert [s[:2] for s in scored_on] == [s[:2] for s in scored_off]
    rewards = [reward for _, step, _ in scored_on for reward in step]
    assert 0.5 in rewards and 1.0 in rewards  # the fraction mode on the training path
    assert all(torch.equal(weights_on[name], weights_off[name]) for name in weights_off)
    # The hit rate is logged per step, as the fraction of the step's responses served from the cache.
    hits = [sum(step_hits) for _, _, step_hits in scored_on]
    assert [record["reward_cache_hit_rate"] for record in records_on] == [count / 8 for count in hits]
    assert sum(hits) > 0 and "reward_cache_hit_rate" not in records_off[0]
    assert with_cache.judged == without.judged - sum(hits) and without.judged == 16
