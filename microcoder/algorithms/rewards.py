"""What a judged program earns, and which tests judge a training reward: pure functions.

Reward modes (`reward_mode`), from the tests a program passed:

    binary        1 if it passed every test, else 0 (the paper's reward)
    fraction      passed / total (verl's sandbox reward, open-r1's "partial")
    fraction_pow  (passed / total) ** power (Skywork-OR1 used power 4: a program must
                  pass most tests to earn much, so partial credit cannot be farmed)

The fraction modes need the number of tests passed out of all of them, so the evaluator
runs every test of such a problem instead of stopping at the first failure.

Test budget (`reward_max_tests`): a problem with more than N tests is judged for its
training reward on N of them, chosen by `select_tests`: the ceil(N/2) tests with the
longest inputs (DeepCoder rewards on the 15 longest: large inputs are where slow and
overflowing programs fail), then N - ceil(N/2) drawn uniformly from the rest with a seed
of the problem's own (Prime's environments sample with a seed: small inputs hold the edge
cases, n = 0 or 1, an empty list). The choice is fixed for a problem within a run, so its
rewards are comparable from step to step and the verdict cache stays valid.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence

REWARD_MODES = ("binary", "fraction", "fraction_pow")


def needs_all_tests(mode: str) -> bool:
    """Whether `mode` needs the count of tests passed out of all (every test run)."""
    check_reward_mode(mode)
    return mode != "binary"


def check_reward_mode(mode: str) -> None:
    if mode not in REWARD_MODES:
        raise ValueError(f"unknown reward mode {mode!r}; valid: {', '.join(REWARD_MODES)}")


def reward_from_tests(mode: str, passed: int, total: int, power: float = 4.0) -> float:
    """The reward of a program that passed `passed` of `total` tests under `mode`.

    binary: 1.0 when passed == total > 0, else 0.0; fraction: passed / total;
    fraction_pow: (passed / total) ** power. A problem without tests earns nothing (the
    evaluator calls it a judge_error, which the trainer leaves unscored anyway).
    """
    check_reward_mode(mode)
    if not 0 <= passed <= total:
        raise ValueError(f"need 0 <= passed <= total, got passed={passed}, total={total}")
    if total == 0:
        return 0.0
    if mode == "binary":
        return 1.0 if passed == total else 0.0
    fraction = passed / total
    return fraction if mode == "fraction" else fraction ** power


def problem_seed(seed: int, problem_id: str) -> int:
    """A problem's own seed for `select_tests`: stable across processes and Python runs
    (a digest, not `hash`, which Python salts per process)."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{problem_id}".encode(), digest_size=8).digest(), "big")


def select_tests(input_lengths: Sequence[int], max_tests: int | None, seed: int,
                 longest: int | None = None, shown: Sequence[bool] | None = None) -> list[int]:
    """Indices of the tests a budget of `max_tests` keeps, in their original order.

    Args:
        input_lengths: (T,) length of each test's input (characters).
        max_tests: N, the budget; None (or N >= T) keeps every test.
        seed: the draw's seed (`problem_seed` for a problem's own).
        longest: how many of the N go to the longest inputs; None: ceil(N / 2). The
            benchmarks pass N (DeepCoder's rule) and 0 (a plain seeded sample) to compare.
        shown: (T,) whether each test appears in the statement (`TestCase.shown`). Hidden
            tests are chosen first, by the rule below, and shown ones only fill what the
            hidden leave of the budget: a program that prints the statement's outputs
            must not earn a reward on a budget of shown tests.

    Ties in length go to the earlier test. The rest are drawn without replacement by
    `random.Random(seed)`, so the same arguments give the same tests everywhere.
    """
    total = len(input_lengths)
    if max_tests is None or max_tests >= total:
        return list(range(total))
    if max_tests < 1:
        raise ValueError(f"max_tests must be >= 1 or None, got {max_tests}")
    longest = math.ceil(max_tests / 2) if longest is None else longest
    if not 0 <= longest <= max_tests:
        raise ValueError(f"longest must be in [0, max_tests={max_tests}], got {longest}")
    if shown is not None and len(shown) != total:
        raise ValueError(f"shown has {len(shown)} entries for {total} tests")
    hidden = [index for index in range(total) if shown is None or not shown[index]]
    if len(hidden) >= max_tests:
        return _longest_then_sample(hidden, input_lengths, max_tests, longest, seed)
    hidden_set = set(hidden)
    rest = [index for index in range(total) if index not in hidden_set]
    fill = max_tests - len(hidden)
    return sorted(hidden + _longest_then_sample(rest, input_lengths, fill, min(longest, fill), seed))


def _longest_then_sample(candidates: list[int], input_lengths: Sequence[int], count: int, longest: int,
                         seed: int) -> list[int]:
    """`count` of `candidates` (indices): the `longest` with the longest inputs, then a
    seeded sample of the others; sorted."""
    by_length = sorted(candidates, key=lambda index: (-input_lengths[index], index))
    chosen = by_length[:longest]
    rest = sorted(by_length[longest:])
    chosen += random.Random(seed).sample(rest, count - longest)
    return sorted(chosen)
