"""A reward function for verl's reward loop (`reward.custom_reward_function`), judged by our evaluator.

verl 0.9.1 loads it in every reward-loop worker (a Ray actor; `reward.num_workers` of
them) with `load_extern_object(path, name)` and its reward manager calls it once per
response as

    compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=..., **reward_kwargs)

`solution_str` is the response decoded with special tokens skipped; `ground_truth` is the
row's `reward_model.ground_truth`; `extra_info` is the row's `extra_info` column plus what
the manager adds: `num_turns`, `rollout_reward_scores` and a tool agent's extra fields
(verl's `naive` manager and ours alike), and `microcoder` (ours, below); `reward_kwargs`
come from `reward.custom_reward_function.reward_kwargs`. A synchronous function like this
one runs in the worker's default thread pool, so several calls overlap: the evaluator
below is thread-safe and shared by them.

What `ground_truth` must hold, either:
- a reference, `{"ref": <problem id>, "sha256": <digest>}` (problem_store.py), which
  `microcoder.integrations.verl.data` writes by default: the problem is read from
  `reward_kwargs.problems_files` (JSONL files every reward worker can read), once per
  worker, and refused if its digest differs from the one the row pins; or
- one problem of ours as JSON (`Problem.model_dump_json()`, the format of docs/formats.md:
  kind, tests, entry_point for call problems, limits, checker): the converter's --inline.

What it returns (every key lands in verl's reward_extra_info, one value per response):
    score         the reward of `reward_mode` (binary: 1.0 if the program passed every test,
                  else 0.0; fraction: tests passed / tests; fraction_pow: that ** reward_pow);
                  0.0 for a judge_error. (The reward verl trains on is this score with the
                  mask's facts in its lowest bits, score_bits.py: a fraction moves by at most
                  15 units in the last place of its float32.)
    acc           1.0 if the program passed every test, else 0.0, whatever the mode: the name
                  verl's metrics and DAPO's filter_groups use. Under a fraction mode give
                  filter_groups `metric: score`, so that it drops the groups whose rewards
                  (not accuracies) are all equal, as our trainer does
    acc_scored    acc, but None for a judge_error: verl's validation metrics leave None
                  out, so `val-aux/<source>/acc_scored/mean@N` is accuracy over scorable
                  responses, as our own summaries count it (`acc` counts a judge_error as 0,
                  and verl's v1 validation counts a None `acc` as 0 too)
    verdict       the evaluator's verdict (accepted, wrong_answer, ..., no_code, judge_error)
    error         why a judge_error is one (the evaluator's detail, or the exception the
                  reward manager caught), else ""
    non_incorrect not judged wrong: accepted or no_code (the mask's condition)
    unscorable    judge_error: a broken problem or a sandbox fault, never the model's doing
and, when `MicroCoderRewardManager` passed the response's tokens in
`extra_info["microcoder"]` ({"response_ids": [...], "truncated": bool}):
    truncated     reached the response length limit without EOS
    repetitive    its last repetition_m tokens repeat the repetition_m before them
    qualifying    truncated and non_incorrect and not repetitive: what the mask may mask

verl's plain `naive` manager passes no tokens, so there is no truncation fact: the score
is then fine for GRPO and DAPO, but the `microcoder_grpo` estimator refuses it.
"""

from __future__ import annotations

import atexit
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from microcoder.algorithms.masking import PAPER_REPETITION_M, UNSCORABLE_VERDICTS, is_repetitive, non_incorrect
from microcoder.algorithms.rewards import needs_all_tests, reward_from_tests
from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from microcoder.evaluator.cache import DEFAULT_CACHE_ENTRIES, VerdictCache, problem_on_budget
from microcoder.integrations.verl.problem_store import ProblemStore, parse_reference
from microcoder.problems import Problem

# Parsed problems kept per process (reward worker): four steps' prompts at the example's
# train_batch_size of 64, enough for a group's G responses, judged within one step, to
# parse their problem once; the bound is on Problems, tests and all, in each worker.
PROBLEM_CACHE_SIZE = 256

_evaluator: Evaluator | None = None
_evaluator_config: EvaluatorConfig | None = None
_evaluator_lock = threading.Lock()
_cache: VerdictCache | None = None
_cache_lock = threading.Lock()


def shared_evaluator(config: EvaluatorConfig) -> Evaluator:
    """The process's one Evaluator, started on first use and closed at exit.

    Every call in a reward-loop worker shares its pool of sandbox workers, so no call pays
    for starting processes. The first call's config wins; a later call asking for a
    different one is a ValueError (two pools in one worker would oversubscribe its cores).
    """
    global _evaluator, _evaluator_config
    with _evaluator_lock:
        if _evaluator is None:
            _evaluator = Evaluator(config)
            _evaluator_config = config
        elif config != _evaluator_config:
            raise ValueError(f"this process's evaluator was built with {_evaluator_config}; "
                             f"a call asked for {config} (reward_kwargs must be the same for every call)")
        return _evaluator


@atexit.register
def close_shared_evaluator() -> None:
    """Close the shared Evaluator (its sandbox workers) and drop the verdict cache; the next
    call starts new ones."""
    global _evaluator, _evaluator_config, _cache
    with _evaluator_lock:
        evaluator, _evaluator, _evaluator_config = _evaluator, None, None
    with _cache_lock:
        _cache = None
    if evaluator is not None:
        evaluator.close()


_problems: OrderedDict[bytes, Problem] = OrderedDict()  # digest of the ground truth -> Problem, oldest first
_problems_lock = threading.Lock()


_stores: dict[tuple[str, ...], ProblemStore] = {}  # problems_files -> its store, one per process
_stores_lock = threading.Lock()
PROBLEMS_FILES_KEY = "reward.custom_reward_function.reward_kwargs.problems_files"


def problem_store(problems_files: str | Sequence[str] | None) -> ProblemStore:
    """This process's store of `problems_files`, read on first use (one read per reward worker)."""
    if not problems_files:
        raise ValueError(f"the dataset names its problems by reference, but {PROBLEMS_FILES_KEY} is not set: "
                         "list the problems JSONL files the parquet was converted from")
    paths = (problems_files,) if isinstance(problems_files, (str, Path)) else tuple(problems_files)
    resolved = tuple(str(Path(path).resolve()) for path in paths)
    with _stores_lock:
        if resolved not in _stores:
            missing = [path for path in resolved if not Path(path).is_file()]
            if missing:
                raise FileNotFoundError(f"{PROBLEMS_FILES_KEY}: {', '.join(missing)} not found (this process's "
                                        f"working directory: {Path.cwd()}; give absolute paths every node can read)")
            _stores[resolved] = ProblemStore(resolved)
        return _stores[resolved]


def parse_ground_truth(ground_truth: str, problems_files: str | Sequence[str] | None = None) -> Problem:
    """The Problem a `ground_truth` string holds or names (a reference: see problem_store.py).

    The last PROBLEM_CACHE_SIZE problems are kept, keyed by a digest of the string (not the
    string itself, which can be megabytes of tests): a prompt's G responses share one.
    """
    if not isinstance(ground_truth, str):
        raise TypeError(f"ground_truth must be a Problem as a JSON string, got {type(ground_truth).__name__}")
    key = hashlib.blake2b(ground_truth.encode(), digest_size=16).digest()
    with _problems_lock:
        if key in _problems:
            _problems.move_to_end(key)
            return _problems[key]
    reference = parse_reference(ground_truth)
    if reference is not None:
        problem = problem_store(problems_files).get(*reference)
    else:
        problem = Problem.model_validate_json(ground_truth)
    with _problems_lock:
        _problems[key] = problem
        _problems.move_to_end(key)
        while len(_problems) > PROBLEM_CACHE_SIZE:
            _problems.popitem(last=False)
    return problem


def mask_facts(verdict: str, response_ids: list[int], truncated: bool, repetition_m: int) -> dict[str, bool]:
    """The conditional truncation mask's facts for one response, as our TRL trainer decides them."""
    repetitive = is_repetitive(response_ids, repetition_m)
    qualifying = truncated and non_incorrect(verdict) and not repetitive
    return {"truncated": truncated, "repetitive": repetitive, "qualifying": qualifying}


def judged(verdict: str, reward: float, error: str = "") -> dict[str, Any]:
    """The returned keys that follow from the verdict and the mode's reward (see the module docstring)."""
    unscorable = verdict in UNSCORABLE_VERDICTS
    score = 0.0 if unscorable else float(reward)
    acc = 0.0 if unscorable else float(verdict == "accepted")
    return {"score": score, "acc": acc, "acc_scored": None if unscorable else acc, "verdict": verdict,
            "error": error if unscorable else "", "non_incorrect": non_incorrect(verdict), "unscorable": unscorable}


def shared_cache(max_entries: int) -> VerdictCache | None:
    """The process's verdict cache (None when max_entries is 0); the first call's size wins,
    as the evaluator's config does. One reward worker judges for the whole run, so a
    program repeated within a group or across steps is judged once per worker."""
    global _cache
    if max_entries == 0:
        return None
    with _cache_lock:
        if _cache is None:
            _cache = VerdictCache(max_entries)
        elif _cache.max_entries != max_entries:
            raise ValueError(f"this process's verdict cache holds {_cache.max_entries} entries; a call asked for "
                             f"{max_entries} (reward_kwargs must be the same for every call)")
        return _cache


_budgeted: OrderedDict[tuple[int, int, int], tuple[Problem, Problem]] = OrderedDict()  # (id, N, seed) -> (it, on budget)
_budgeted_lock = threading.Lock()


def budgeted_problem(problem: Problem, max_tests: int | None, seed: int) -> Problem:
    """`problem_on_budget`, made once per parsed problem (the same object for a group's
    responses, so the verdict cache digests it once)."""
    if max_tests is None or len(problem.tests) <= max_tests:
        return problem
    key = (id(problem), max_tests, seed)
    with _budgeted_lock:
        held = _budgeted.get(key)
        if held is not None and held[0] is problem:
            _budgeted.move_to_end(key)
            return held[1]
    on_budget = problem_on_budget(problem, max_tests, seed)
    with _budgeted_lock:
        _budgeted[key] = (problem, on_budget)  # the original held too, so its id() is not reused meanwhile
        while len(_budgeted) > PROBLEM_CACHE_SIZE:
            _budgeted.popitem(last=False)
    return on_budget


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None, *,
                  evaluator_workers: int = 0, mode: str = "robust", time_limit_scale: float = 1.0,
                  repetition_m: int = PAPER_REPETITION_M, problems_files: str | Sequence[str] | None = None,
                  reward_mode: str = "binary", reward_pow: float = 4.0, max_tests: int | None = None,
                  test_seed: int = 0, cache_size: int = DEFAULT_CACHE_ENTRIES, **_: Any) -> dict[str, Any]:
    """Judge one response; see the module docstring for the arguments and the returned keys.

    Keyword settings (from `reward.custom_reward_function.reward_kwargs`):
        evaluator_workers: sandbox workers of this process's evaluator (0: one per usable
            core; with several reward-loop workers on one machine, give each its share).
        mode: "robust" (our comparison rules) or "strict" (LiveCodeBench's).
        time_limit_scale: multiplies every test's CPU limit (> 1 on slower machines).
        repetition_m: the repetition window m in tokens (default: the paper's, PAPER_REPETITION_M).
        problems_files: the JSONL files that referenced problems are read from (absolute
            paths, or relative to the reward worker's working directory).
        reward_mode, reward_pow: "binary", "fraction" or "fraction_pow" and its power, as
            TrainConfig's (microcoder.algorithms.rewards); the fraction modes run every test.
        max_tests, test_seed: judge on at most max_tests tests per problem, chosen as
            TrainConfig's reward_max_tests with seed test_seed; None: every test.
        cache_size: programs whose results this worker keeps (VerdictCache); 0: none.
    Other keyword arguments verl may pass (reward_router_address, ...) are ignored.
    """
    problem = budgeted_problem(parse_ground_truth(ground_truth, problems_files), max_tests, test_seed)
    evaluator = shared_evaluator(EvaluatorConfig(workers=evaluator_workers, mode=mode,
                                                 time_limit_scale=time_limit_scale, all_tests=needs_all_tests(reward_mode)))
    samples = [Sample(problem.id, response=solution_str)]
    cache = shared_cache(cache_size)
    if cache is None:
        result = evaluator.evaluate({problem.id: problem}, samples)[0]
    else:
        result = cache.evaluate(evaluator, {problem.id: problem}, samples)[0][0]
    reward = 1.0 if result.verdict == "accepted" else reward_from_tests(reward_mode, result.tests_passed,
                                                                      result.tests_total, reward_pow)
    out = judged(result.verdict, reward, result.detail)
    verdict = result.verdict
    tokens = (extra_info or {}).get("microcoder")
    if tokens is not None:
        out.update(mask_facts(verdict, list(tokens["response_ids"]), bool(tokens["truncated"]), repetition_m))
    return out
