"""What the verdict cache saves on a late-training-like batch, and what it costs on an early one.

    python benchmarks/reward_cache.py [--data ../shared/data] [--workers 2] [--problems 16] [--group 8]
                                      [--max-tests 20] [--seed 0] [--smoke]

Problems: the first --problems of LeetCodeDataset v0.3.1-test, converted by our loader,
each cut to its first --max-tests tests (as `reward_max_tests` would cut it; 0 keeps all,
a median of 102): the cache saves whole programs' runs, so the fraction it saves does not
depend on the count, and the run stays short. Programs, two real ones per problem: the
record's model `response` and its reference `completion`.

A batch is --group responses per problem, judged by the trainer's reward adapter
(`EvaluatorReward`, binary reward, stop at the first failure) as one rollout's reward call:
- late: each response is one of the problem's two programs (drawn with a seed), each
  wrapped in its own words ("Attempt 3 ...", a different explanation), so a group holds
  at most two distinct programs in eight texts, as a group does late in training when
  diversity has fallen (0.3-0.5 in our runs);
- early: every response's program differs (a comment naming its index), so nothing repeats.
Each batch is judged with the cache off and with a fresh cache (`reward_cache_size`
4096): wall seconds, sandboxed test runs, the hit rate the trainer logs, and whether
every verdict and reward matched.

--smoke: 2 problems cut to 10 tests, groups of 4; runs in seconds. Needs ../shared; not a test.
Prints Markdown.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from microcoder.evaluator import Evaluator, EvaluatorConfig
from microcoder.evaluator.cache import DEFAULT_CACHE_ENTRIES, VerdictCache
from microcoder.problems import Problem
from microcoder.training.reward import EvaluatorReward

REPO = Path(__file__).resolve().parent.parent
SOURCE = "leetcodedataset/LeetCodeDataset-v0.3.1-test.jsonl.gz"


def load(data: Path, count: int, max_tests: int | None) -> list[tuple[Problem, str, str]]:
    """[(problem, model response, reference code)] of the first `count` records."""
    from microcoder.data.loaders import load_problems

    with gzip.open(data / SOURCE, "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle][:count]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "records.jsonl"
        path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
        problems, _ = load_problems(path)
    by_original = {str(problem.metadata["original_id"]): problem for problem in problems}
    rows = []
    for record in records:
        problem = by_original.get(str(record["task_id"]))
        if problem is not None:
            if max_tests is not None:
                problem = problem.model_copy(update={"tests": problem.tests[:max_tests]})
            rows.append((problem, record["response"], record["completion"]))
    return rows


def batch(rows, group: int, seed: int, late: bool) -> tuple[list[str], list[str], float]:
    """(problem ids, response texts, mean distinct programs per group)."""
    generator = random.Random(seed)
    ids, texts, distinct = [], [], []
    for problem, response, reference in rows:
        programs = set()
        for index in range(group):
            if late:
                use_reference = generator.random() < 0.5
                programs.add(use_reference)
                if use_reference:
                    text = f"Attempt {index}: a direct approach.\n```python\n{reference}\n```\nDone ({index})."
                else:
                    text = f"Attempt {index}, thinking again.\n" + response
            else:
                programs.add(index)
                text = f"Attempt {index}.\n```python\n{reference}\n# variant {index}\n```"
            ids.append(problem.id)
            texts.append(text)
        distinct.append(len(programs))
    return ids, texts, sum(distinct) / len(distinct)


class Counting:
    """The evaluator, counting the tests it runs."""

    def __init__(self, evaluator: Evaluator):
        self.evaluator, self.tests_run, self.config = evaluator, 0, evaluator.config

    def evaluate(self, problems, samples, on_result=None):
        results = self.evaluator.evaluate(problems, samples, on_result)
        self.tests_run += sum(result.tests_run for result in results)
        return results

    def close(self):
        pass


def judge(evaluator: Evaluator, problems: list[Problem], ids: list[str], texts: list[str], cached: bool):
    counting = Counting(evaluator)
    reward = EvaluatorReward(counting, problems, max_new_tokens=4096,
                             cache=VerdictCache(DEFAULT_CACHE_ENTRIES) if cached else None)
    start = time.perf_counter()
    scored = reward.score(completions=texts, completion_ids=[[0]] * len(texts), problem_id=ids)
    wall = time.perf_counter() - start
    values = scored.rewards_for_trl()
    return wall, counting.tests_run, sum(scored.cache_hits) / len(texts), scored.verdicts, values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-tests", type=int, default=20, help="tests kept per problem (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="2 problems of 10 tests, groups of 4")
    args = parser.parse_args(argv)
    max_tests = args.max_tests or None
    if args.smoke:
        args.problems, args.group, max_tests = 2, 4, 10
    if not (args.data / SOURCE).is_file():
        print(f"{args.data / SOURCE} not found: this benchmark needs ../shared/data")
        return 0
    rows = load(args.data, args.problems, max_tests)
    problems = [problem for problem, _, _ in rows]
    print(f"## Verdict cache on {SOURCE}\n")
    print(f"{len(problems)} problems ({sum(len(p.tests) for p in problems)} tests), groups of {args.group}; "
          f"{args.workers} workers, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}\n")
    print("| batch | distinct programs per group | cache | wall s | tests run | hit rate | same verdicts and rewards |")
    print("|---|---:|---|---:|---:|---:|---|")
    with Evaluator(EvaluatorConfig(workers=args.workers)) as evaluator:
        for name, late in (("late", True), ("early", False)):
            ids, texts, distinct = batch(rows, args.group, args.seed, late)
            off = judge(evaluator, problems, ids, texts, cached=False)
            on = judge(evaluator, problems, ids, texts, cached=True)
            same = "yes" if (off[3], off[4]) == (on[3], on[4]) else "NO"
            for label, run in (("off", off), ("on", on)):
                print(f"| {name} ({len(texts)} responses) | {distinct:.2f} | {label} | {run[0]:.1f} | {run[1]} "
                      f"| {run[2]:.2f} | {same} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
