"""The reward of a rollout: each response's program judged by the Evaluator, as a TRL reward function.

`EvaluatorReward` is what TRL calls; it keeps what it saw and decided (`ScoredBatch`) for
the trainer's advantage step, and with `reward_overlap` judges each chunk of a rollout
in the background as soon as it is sampled (`chunk_bounds` gives the chunks).

The reward of a judged response follows `reward_mode` (binary, fraction, fraction_pow:
`microcoder.algorithms.rewards`), on at most `reward_max_tests` tests of its problem, with
identical programs judged once (`VerdictCache`); see docs/training.md, "Reward modes, test
budget, verdict cache".
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from microcoder.algorithms import needs_all_tests, overlong_penalty, reward_from_tests
from microcoder.evaluator import EvaluationResult, Evaluator, EvaluatorConfig, Sample
from microcoder.evaluator.cache import VerdictCache, problem_on_budget
from microcoder.problems import Problem
from microcoder.training.config import TrainConfig


@dataclass
class ScoredBatch:
    """What the reward saw and decided for the process-local responses of one rollout.

    TRL calls the reward on the process-local samples, in the same order as the local slice
    of the advantages, so index i here is row i of the local batch.
    """

    verdicts: list[str]
    correct: list[float]
    """0/1: accepted or not (the accuracy); NaN for an unscorable response (judge_error)."""
    rewards: list[float]
    """task_rewards plus the overlong penalty when enabled: what the advantages are computed from; NaN when unscorable."""
    completion_ids: list[list[int]]
    seconds: float
    """The Evaluator's judging time, summed over the chunks (with reward_overlap, partly while sampling went on)."""
    seconds_visible: float = 0.0
    """What the rollout waited for the rewards: the reward call, from TRL's asking to the last verdict."""
    task_rewards: list[float] | None = None
    """The reward mode's reward (binary: equal to correct; fraction: tests passed / tests), before
    the overlong penalty: what DAPO's group filter compares. None when built: a copy of correct."""
    cache_hits: list[bool] | None = None
    """Whether each verdict came from the verdict cache instead of being judged. None when built: none did."""
    tests_hidden: list[float] | None = None
    """The share of hidden tests (not shown in the statement) among the tests each row's
    reward judges. None when built: all hidden."""

    def __post_init__(self) -> None:
        if self.task_rewards is None:
            self.task_rewards = list(self.correct)
        if self.cache_hits is None:
            self.cache_hits = [False] * len(self.verdicts)
        if self.tests_hidden is None:
            self.tests_hidden = [1.0] * len(self.verdicts)

    def take(self, rows: Sequence[int]) -> ScoredBatch:
        """The rows `rows` of this batch, in that order (seconds: the whole batch's)."""
        return ScoredBatch([self.verdicts[i] for i in rows], [self.correct[i] for i in rows],
                           [self.rewards[i] for i in rows], [self.completion_ids[i] for i in rows], self.seconds,
                           self.seconds_visible, [self.task_rewards[i] for i in rows],
                           [self.cache_hits[i] for i in rows], [self.tests_hidden[i] for i in rows])

    def rewards_for_trl(self) -> list[float | None]:
        """The rewards as TRL takes them from a reward function: None for an unscorable response."""
        return [None if math.isnan(reward) else reward for reward in self.rewards]


def concat_scored(parts: Sequence[ScoredBatch], seconds: float, seconds_visible: float) -> ScoredBatch:
    """One ScoredBatch of several, rows in order; `seconds` / `seconds_visible`: the judging / waiting time of all."""
    return ScoredBatch([v for part in parts for v in part.verdicts], [v for part in parts for v in part.correct],
                       [v for part in parts for v in part.rewards],
                       [v for part in parts for v in part.completion_ids], seconds, seconds_visible,
                       [v for part in parts for v in part.task_rewards], [v for part in parts for v in part.cache_hits],
                       [v for part in parts for v in part.tests_hidden])


def chunk_bounds(rows: int, chunks: int) -> list[tuple[int, int]]:
    """[start, end) of `chunks` near-equal consecutive slices of `rows` rows (empty ones left out)."""
    bounds = [(index * rows // chunks, (index + 1) * rows // chunks) for index in range(chunks)]
    return [(start, end) for start, end in bounds if end > start]


class EvaluatorReward:
    """TRL reward function: judge each response's program with the Evaluator.

    `score(completions, completion_ids, problem_id)` judges the process-local responses of
    a rollout and returns their `ScoredBatch`, which the trainer takes from the reward
    through its TRL hook (`TRLHooks.score`) and computes the advantages from. Called as
    TRL calls a reward function, reward(prompts=, completions=, completion_ids=,
    problem_id=, ...) (TRL's own evaluation loop), it gives one float per response. A
    judge_error (a broken problem or a sandbox fault, never the model's doing) is
    unscorable: NaN in the scored batch, which `group_advantages` leaves out of the group
    baseline with advantage 0, and None to TRL, which does the same.

    Early judging (`overlap`): the trainer calls `begin_round` with the rows' problems
    before sampling and `judge_early` with each chunk of responses as soon as it is
    sampled; the chunk is judged in one background thread (the programs run in the
    sandbox's worker processes) while the trainer samples the next chunk and computes
    the log-probs. The reward call then only waits for what is left. A row whose text
    TRL hands over differs from the one judged early is judged again in the call, so
    the verdicts are those of judging after, whatever the timing.
    """

    __name__ = "evaluator"  # TRL names reward functions by __name__

    def __init__(self, evaluator: Evaluator, problems: Sequence[Problem], max_new_tokens: int,
                 overlong_cache_length: int = 0, overlong_penalty_factor: float = 1.0, overlap: bool = False,
                 reward_mode: str = "binary", reward_pow: float = 4.0, max_tests: int | None = None,
                 test_seed: int = 0, cache: VerdictCache | None = None):
        self.evaluator = evaluator  # as given: held-out accuracy judges with it, on every test
        self.reward_mode = reward_mode
        self.reward_pow = reward_pow
        # A fraction mode counts the tests passed out of all: every test runs.
        self.judge = evaluator.with_options(all_tests=True) if needs_all_tests(reward_mode) else evaluator
        # The reward's view of each problem: at most max_tests of its tests.
        self.problems = {problem.id: problem_on_budget(problem, max_tests, test_seed) for problem in problems}
        self.cache = cache
        self.max_new_tokens = max_new_tokens
        self.overlong_cache_length = overlong_cache_length
        self.overlong_penalty_factor = overlong_penalty_factor
        self.overlap = overlap
        self._round_problem_ids: list[str] | None = None
        self._early: list[tuple[int, list[str], Future]] = []  # (first row, texts, future of (results, seconds))
        self._judge_thread: ThreadPoolExecutor | None = None

    def begin_round(self, problem_ids: Sequence[str]) -> None:
        """A rollout round is about to be sampled; `problem_ids`: its rows', in TRL's row order."""
        self._round_problem_ids = list(problem_ids)
        self._early = []

    def judge_early(self, first_row: int, texts: list[str]) -> None:
        """Start judging rows first_row.. of the round (decoded responses) in the background; no-op without overlap."""
        if not self.overlap or self._round_problem_ids is None:
            return
        problem_ids = self._round_problem_ids[first_row:first_row + len(texts)]
        if len(problem_ids) != len(texts):  # rows that do not line up with the round's: judged in the call
            return
        samples = [Sample(pid, response=text) for pid, text in zip(problem_ids, texts)]
        if self._judge_thread is None:  # one thread: chunks are judged in order, one Evaluator call at a time
            self._judge_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="microcoder-judge")
        self._early.append((first_row, texts, self._judge_thread.submit(self._judge, samples)))

    def _judge(self, samples: list[Sample]) -> tuple[list[EvaluationResult], list[bool], float]:
        """(results, whether each came from the cache, seconds)."""
        start = time.perf_counter()
        if self.cache is not None:
            results, hits = self.cache.evaluate(self.judge, self.problems, samples)
        else:
            results, hits = self.judge.evaluate(self.problems, samples), [False] * len(samples)
        return results, hits, time.perf_counter() - start

    def task_reward(self, result: EvaluationResult) -> float:
        """The reward mode's reward of a judged response; NaN when unscorable (judge_error)."""
        if result.verdict == "judge_error":
            return math.nan
        if result.verdict == "accepted":  # every test passed, whatever the mode
            return 1.0
        return reward_from_tests(self.reward_mode, result.tests_passed, result.tests_total, self.reward_pow)

    def hidden_share(self, problem_id: str) -> float:
        """The share of hidden tests among those a reward of `problem_id` judges (after the budget)."""
        problem = self.problems.get(problem_id)
        if problem is None or not problem.tests:
            return math.nan
        return sum(not test.shown for test in problem.tests) / len(problem.tests)

    def close(self) -> None:
        """Stop the judging thread (after waiting for it) and close the Evaluator."""
        if self._judge_thread is not None:
            self._judge_thread.shutdown(wait=True)
            self._judge_thread = None
        self.evaluator.close()

    def __call__(self, prompts, completions, completion_ids, problem_id, **_) -> list[float | None]:
        return self.score(completions, completion_ids, problem_id).rewards_for_trl()

    def score(self, completions: Sequence[str], completion_ids: Sequence[Sequence[int]],
              problem_id: Sequence[str]) -> ScoredBatch:
        """Judge the round's decoded responses (rows in TRL's order; those judged early
        whose text is unchanged are not judged again) and score them."""
        start = time.perf_counter()
        results: list[EvaluationResult | None] = [None] * len(completions)
        hits = [False] * len(completions)
        judging = 0.0
        early, self._early, self._round_problem_ids = self._early, [], None
        for first_row, texts, future in early:
            chunk, chunk_hits, seconds = future.result()
            judging += seconds
            for row, text, result, hit in zip(range(first_row, first_row + len(texts)), texts, chunk, chunk_hits):
                if row < len(completions) and completions[row] == text and problem_id[row] == result.problem_id:
                    results[row], hits[row] = result, hit
        late = [row for row, result in enumerate(results) if result is None]  # all of them without overlap
        if late:
            judged, late_hits, seconds = self._judge([Sample(problem_id[row], response=completions[row])
                                                      for row in late])
            judging += seconds
            for row, result, hit in zip(late, judged, late_hits, strict=True):
                results[row], hits[row] = result, hit
        verdicts = [result.verdict for result in results]
        correct = [math.nan if verdict == "judge_error" else float(verdict == "accepted") for verdict in verdicts]
        task_rewards = [self.task_reward(result) for result in results]
        rewards = list(task_rewards)
        if self.overlong_cache_length:
            lengths = torch.tensor([len(ids) for ids in completion_ids])
            penalty = overlong_penalty(lengths, self.max_new_tokens, self.overlong_cache_length,
                                       self.overlong_penalty_factor)
            rewards = [r + float(p) for r, p in zip(rewards, penalty)]  # NaN stays NaN
        return ScoredBatch(verdicts, correct, rewards, [list(ids) for ids in completion_ids], judging,
                           time.perf_counter() - start, task_rewards, hits,
                           [self.hidden_share(problem) for problem in problem_id])


def reward_of_config(evaluator: Evaluator, problems: Sequence[Problem], config: TrainConfig) -> EvaluatorReward:
    """The training reward a config asks for, judging with `evaluator` (closed with it)."""
    return EvaluatorReward(evaluator, problems, config.max_new_tokens, config.overlong_cache_length,
                           config.overlong_penalty_factor, overlap=config.reward_overlap,
                           reward_mode=config.reward_mode, reward_pow=config.reward_pow,
                           max_tests=config.reward_max_tests, test_seed=config.seed,
                           cache=VerdictCache(config.reward_cache_size) if config.reward_cache_size else None)


def reward_evaluator_config(config: TrainConfig) -> EvaluatorConfig:
    """The reward's evaluator settings (a problem's own time limit still wins over
    reward_time_limit_s; the scale multiplies whichever applies)."""
    return EvaluatorConfig(workers=config.reward_workers, time_limit_s=config.reward_time_limit_s,
                           time_limit_scale=config.reward_time_limit_scale, mode=config.reward_judge_mode)
