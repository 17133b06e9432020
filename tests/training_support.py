"""Shared pieces of the training tests: tiny problems and a scripted evaluator.

A random-init tiny model never writes a program that passes, so every reward would be 0,
every advantage 0, and no parameter would move. The preset tests therefore judge with
`ScriptedEvaluator`, whose verdict is a fixed function of the response text: varied
rewards within a group, reproducible run to run. The real Evaluator is exercised by the
mask test, on hand-written responses.
"""

from __future__ import annotations

import hashlib

from microcoder.evaluator import EvaluationResult
from microcoder.problems import Problem


def add_problem(index: int) -> Problem:
    return Problem(
        id=f"tiny/add-{index}", kind="call", entry_point="add", starter_code="def add(a, b):\n    pass",
        prompt=f"Return the sum of a and b (variant {index}).",
        tests=[{"input": "1\n2", "output": "3"}, {"input": f"{index}\n5", "output": str(index + 5)}])


def tiny_problems(train: int = 6, heldout: int = 2) -> tuple[list[Problem], list[Problem]]:
    problems = [add_problem(index) for index in range(train + heldout)]
    return problems[:train], problems[train:]


SCRIPTED_VERDICTS = ("accepted", "wrong_answer", "no_code", "accepted", "runtime_error")


class ScriptedEvaluator:
    """Evaluator stand-in: verdict = verdicts[sha256(response) mod len(verdicts)].

    `always_wrong`: problem ids every response to which is a wrong_answer (groups that
    DAPO's filter drops). `verdicts`: the cycle to draw from (SCRIPTED_VERDICTS).
    """

    def __init__(self, always_wrong=(), verdicts=SCRIPTED_VERDICTS):
        self.always_wrong = set(always_wrong)
        self.verdicts = tuple(verdicts)

    def evaluate(self, problems, samples, on_result=None):
        results = []
        for index, sample in enumerate(samples):
            digest = hashlib.sha256((sample.response or "").encode()).digest()
            verdict = self.verdicts[digest[0] % len(self.verdicts)]
            if sample.problem_id in self.always_wrong:
                verdict = "wrong_answer"
            results.append(EvaluationResult(
                problem_id=sample.problem_id, sample_index=index, verdict=verdict,
                reward=1.0 if verdict == "accepted" else 0.0, tests_passed=0, tests_run=0, tests_total=2,
                seconds=0.0))
        return results

    def judging(self, mode):
        return self  # one scripted judge whatever the mode

    def close(self):
        pass
