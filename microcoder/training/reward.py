"""The reward of a rollout: each response's program judged by the Evaluator, as a TRL reward function.

`EvaluatorReward` is what TRL calls; it keeps what it saw and decided (`ScoredBatch`) for
the trainer's advantage step, and with `reward_overlap` judges each chunk of a rollout
in the background as soon as it is sampled (`chunk_bounds` gives the chunks).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from microcoder.algorithms import overlong_penalty
from microcoder.evaluator import EvaluationResult, Evaluator, EvaluatorConfig, Sample
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
    """The evaluator's 0/1 reward (accepted or not); NaN for an unscorable response (judge_error)."""
    rewards: list[float]
    """correct plus the overlong penalty when enabled: what the advantages are computed from; NaN when unscorable."""
    completion_ids: list[list[int]]
    seconds: float
    """The Evaluator's judging time, summed over the chunks (with reward_overlap, partly while sampling went on)."""
    seconds_visible: float = 0.0
    """What the rollout waited for the rewards: the reward call, from TRL's asking to the last verdict."""

    def take(self, rows: Sequence[int]) -> ScoredBatch:
        """The rows `rows` of this batch, in that order (seconds: the whole batch's)."""
        return ScoredBatch([self.verdicts[i] for i in rows], [self.correct[i] for i in rows],
                           [self.rewards[i] for i in rows], [self.completion_ids[i] for i in rows], self.seconds,
                           self.seconds_visible)


def concat_scored(parts: Sequence[ScoredBatch], seconds: float, seconds_visible: float) -> ScoredBatch:
    """One ScoredBatch of several, rows in order; `seconds` / `seconds_visible`: the judging / waiting time of all."""
    return ScoredBatch([v for part in parts for v in part.verdicts], [v for part in parts for v in part.correct],
                       [v for part in parts for v in part.rewards],
                       [v for part in parts for v in part.completion_ids], seconds, seconds_visible)


def chunk_bounds(rows: int, chunks: int) -> list[tuple[int, int]]:
    """[start, end) of `chunks` near-equal consecutive slices of `rows` rows (empty ones left out)."""
    bounds = [(index * rows // chunks, (index + 1) * rows // chunks) for index in range(chunks)]
    return [(start, end) for start, end in bounds if end > start]


class EvaluatorReward:
    """TRL reward function: judge each response's program with the Evaluator.

    Called by TRL as reward(prompts=, completions=, completion_ids=, problem_id=, ...) with
    the process-local samples; returns one float per sample and keeps the verdicts in
    `last` for the advantage step. A judge_error (a broken problem or a sandbox fault,
    never the model's doing) is unscorable: None, which TRL leaves out of the group
    baseline with advantage 0, as `group_advantages` does with the NaN kept in `last`.

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
                 overlong_cache_length: int = 0, overlong_penalty_factor: float = 1.0, overlap: bool = False):
        self.evaluator = evaluator
        self.problems = {problem.id: problem for problem in problems}
        self.max_new_tokens = max_new_tokens
        self.overlong_cache_length = overlong_cache_length
        self.overlong_penalty_factor = overlong_penalty_factor
        self.overlap = overlap
        self.last: ScoredBatch | None = None
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

    def _judge(self, samples: list[Sample]) -> tuple[list[EvaluationResult], float]:
        start = time.perf_counter()
        results = self.evaluator.evaluate(self.problems, samples)
        return results, time.perf_counter() - start

    def close(self) -> None:
        """Stop the judging thread (after waiting for it) and close the Evaluator."""
        if self._judge_thread is not None:
            self._judge_thread.shutdown(wait=True)
            self._judge_thread = None
        self.evaluator.close()

    def __call__(self, prompts, completions, completion_ids, problem_id, **_) -> list[float | None]:
        start = time.perf_counter()
        results: list[EvaluationResult | None] = [None] * len(completions)
        judging = 0.0
        early, self._early, self._round_problem_ids = self._early, [], None
        for first_row, texts, future in early:
            chunk, seconds = future.result()
            judging += seconds
            for row, text, result in zip(range(first_row, first_row + len(texts)), texts, chunk):
                if row < len(completions) and completions[row] == text and problem_id[row] == result.problem_id:
                    results[row] = result
        late = [row for row, result in enumerate(results) if result is None]  # all of them without overlap
        if late:
            judged, seconds = self._judge([Sample(problem_id[row], response=completions[row]) for row in late])
            judging += seconds
            for row, result in zip(late, judged, strict=True):
                results[row] = result
        verdicts = [result.verdict for result in results]
        correct = [math.nan if verdict == "judge_error" else float(result.reward)
                   for verdict, result in zip(verdicts, results)]
        rewards = list(correct)
        if self.overlong_cache_length:
            lengths = torch.tensor([len(ids) for ids in completion_ids])
            penalty = overlong_penalty(lengths, self.max_new_tokens, self.overlong_cache_length,
                                       self.overlong_penalty_factor)
            rewards = [r + float(p) for r, p in zip(rewards, penalty)]  # NaN stays NaN
        self.last = ScoredBatch(verdicts, correct, rewards, [list(ids) for ids in completion_ids], judging,
                                time.perf_counter() - start)
        return [None if math.isnan(reward) else reward for reward in rewards]


def reward_evaluator_config(config: TrainConfig) -> EvaluatorConfig:
    """The reward's evaluator settings (a problem's own time limit still wins over
    reward_time_limit_s; the scale multiplies whichever applies)."""
    return EvaluatorConfig(workers=config.reward_workers, time_limit_s=config.reward_time_limit_s,
                           time_limit_scale=config.reward_time_limit_scale, mode=config.reward_judge_mode)
