"""How many verdicts a test budget (`reward_max_tests`) changes, and what judging time it saves.

    python benchmarks/reward_test_budget.py [--data ../shared/data] [--sets leetcode humanevalpack]
                                            [--workers 2] [--budgets 5 10 15] [--seeds 5] [--limit N]
                                            [--timed 60] [--smoke]

Two sets, each converted by our loader, two real programs per problem:
- leetcode: LeetCodeDataset v0.3.1-test (228 problems, median 103 tests each); the
  record's `response` (an unlabelled model's answer, prose and a code block, as the
  trainer would see a sampled response; empty in 109 records) and its `completion` (the
  reference solution);
- humanevalpack: HumanEvalPack Python (164 problems, its check() asserts as tests, median
  7); each problem's `buggy_solution` (a human-made bug: every one fails a test) and its
  canonical solution.

Step 1, the outcome of every test: each program runs on each test of its problem alone
(one single-test problem per test), default limits, so the verdict of any subset of tests
can be read off without judging again: the first failing test of the subset, in test
order, decides it, as the evaluator's stop-at-first-failure does. The CPU time of each
run is kept too: judging a subset costs the CPU of its tests up to the first failure.

Step 2, verdict changes, against judging on every test: for N in --budgets and three rules
of choosing N tests (`select_tests`): ours (ceil(N/2) longest inputs, then a seeded sample
of the rest), "longest" (the N longest inputs, DeepCoder's), "sample" (a seeded sample,
Prime's). A seeded rule is averaged over --seeds seeds (test_seed 0..seeds-1). Counted:
rewards that change (a program that fails some test accepted on the budget: the only way
a reward can change, since a budget only removes tests) and verdict labels that change
(wrong_answer judged as accepted, or as runtime_error when the subset's first failure
differs).

Step 2 also gives the CPU seconds judging would cost (the runs' CPU, from step 1, up to
each program's first failure in its subset), which a loaded host does not distort much.

Step 3, time measured: the programs of the first --timed problems judged as training
judges them (binary reward, stop at the first failure) on every test and on each budget
under our rule, seed 0: wall seconds and the runs' CPU seconds.

--smoke: 3 problems cut to 20 tests each, budgets 2 and 5, one seed; runs in seconds.
Needs ../shared; not a test. Prints Markdown.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path

from microcoder.algorithms.rewards import problem_seed, select_tests
from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from microcoder.evaluator.cache import problem_on_budget
from microcoder.problems import Problem

REPO = Path(__file__).resolve().parent.parent
SOURCE = "leetcodedataset/LeetCodeDataset-v0.3.1-test.jsonl.gz"
RULES = ("ours", "longest", "sample")


SETS = {"leetcode": (SOURCE, ("response", "reference")),
        "humanevalpack": ("humanevalpack/humanevalpack_python.jsonl", ("buggy", "canonical"))}


def load(data: Path, name: str, limit: int | None,
         max_tests: int | None) -> tuple[list[Problem], list[tuple[str, str, Sample]]]:
    """(problems, [(problem id, kind, sample)]) of set `name`: the first `limit` records
    (None: all), each problem cut to its first `max_tests` tests (None: all)."""
    import tempfile

    from microcoder.data.loaders import load_problems

    source = data / SETS[name][0]
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()][:limit]
    with tempfile.TemporaryDirectory() as folder:  # the loader reads files: the chosen records
        path = Path(folder) / source.name.removesuffix(".gz")
        path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
        problems, rejects = load_problems(path)
    if rejects:
        print(f"# {len(rejects)} rows rejected by the loader", file=sys.stderr)
    if max_tests is not None:
        problems = [problem.model_copy(update={"tests": problem.tests[:max_tests]}) for problem in problems]
    programs = []
    if name == "leetcode":
        by_original = {str(problem.metadata["original_id"]): problem for problem in problems}
        for record in records:
            problem = by_original.get(str(record["task_id"]))
            if problem is not None:
                programs.append((problem.id, "response", Sample(problem.id, response=record["response"])))
                programs.append((problem.id, "reference", Sample(problem.id, code=record["completion"])))
    else:
        for problem in problems:
            programs.append((problem.id, "buggy", Sample(problem.id, code=problem.metadata["buggy_solution"])))
            programs.append((problem.id, "canonical", Sample(problem.id, code=problem.metadata["reference_solution"])))
    return problems, programs


def test_outcomes(evaluator: Evaluator, problems: dict[str, Problem],
                  programs: list[tuple[str, str, Sample]]) -> list[list[tuple[str, float]]]:
    """Per program, (verdict, CPU s) of each test of its problem run alone."""
    singles: dict[str, Problem] = {}
    samples: list[Sample] = []
    for problem_id, _, sample in programs:
        problem = problems[problem_id]
        for index, test in enumerate(problem.tests):
            single_id = f"{problem_id}#{index}"
            if single_id not in singles:
                singles[single_id] = problem.model_copy(update={"id": single_id, "tests": [test]})
            samples.append(Sample(single_id, response=sample.response, code=sample.code))
    results = evaluator.evaluate(singles, samples)
    outcomes, position = [], 0
    for problem_id, _, _ in programs:
        count = len(problems[problem_id].tests)
        outcomes.append([(result.verdict, result.cpu_seconds) for result in results[position:position + count]])
        position += count
    return outcomes


def subset_verdict(outcomes: list[tuple[str, float]], keep: list[int]) -> tuple[str, float]:
    """(verdict, CPU s) of judging only the tests `keep` (in order), stopping at the first failure."""
    cpu = 0.0
    for index in keep:
        verdict, seconds = outcomes[index]
        cpu += seconds
        if verdict != "accepted":
            return verdict, cpu
    return "accepted", cpu


def chosen(problem: Problem, budget: int, rule: str, seed: int) -> list[int]:
    lengths = [len(test.input) for test in problem.tests]
    longest = {"ours": None, "longest": budget, "sample": 0}[rule]
    return select_tests(lengths, budget, problem_seed(seed, problem.id), longest=longest)


def timed(evaluator: Evaluator, problems: dict[str, Problem], samples: list[Sample]) -> tuple[float, float, int]:
    """(wall s, CPU s of the runs, tests run) of judging as training does."""
    start = time.perf_counter()
    results = evaluator.evaluate(problems, samples)
    return time.perf_counter() - start, sum(r.cpu_seconds for r in results), sum(r.tests_run for r in results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--sets", nargs="+", choices=sorted(SETS), default=list(SETS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--budgets", type=int, nargs="+", default=[5, 10, 15])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--limit", type=int, default=None, help="the first N problems only")
    parser.add_argument("--timed", type=int, default=60, help="problems whose programs step 3 judges")
    parser.add_argument("--smoke", action="store_true", help="3 problems of 20 tests, budgets 2 and 5, one seed")
    args = parser.parse_args(argv)
    max_tests = None
    if args.smoke:
        args.limit, args.budgets, args.seeds, max_tests = 3, [2, 5], 1, 20
    missing = [str(args.data / SETS[name][0]) for name in args.sets if not (args.data / SETS[name][0]).is_file()]
    if missing:
        print(f"{', '.join(missing)} not found: this benchmark needs ../shared/data")
        return 0
    with Evaluator(EvaluatorConfig(workers=args.workers)) as evaluator:
        for name in args.sets:
            measure(evaluator, args, name, *load(args.data, name, args.limit, max_tests))
    return 0


def measure(evaluator: Evaluator, args, name: str, problems_list: list[Problem],
            programs: list[tuple[str, str, Sample]]) -> None:
    """Print the three steps' tables for one set."""
    problems = {problem.id: problem for problem in problems_list}
    tests = [len(problem.tests) for problem in problems_list]
    first, second = SETS[name][1]
    print(f"## Test budget on {SETS[name][0]}\n")
    print(f"{len(problems)} problems, {sum(tests)} tests (median {sorted(tests)[len(tests) // 2]}, "
          f"max {max(tests)}); {len(programs)} programs (a {first} and a {second} per problem); "
          f"{args.workers} workers, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}\n")
    start = time.perf_counter()
    outcomes = test_outcomes(evaluator, problems, programs)
    print(f"Step 1: {sum(len(o) for o in outcomes)} single-test runs in {time.perf_counter() - start:.0f} s\n")

    full = [subset_verdict(tests, list(range(len(tests)))) for tests in outcomes]
    for kind in (first, second):
        counts = Counter(verdict for (_, which, _), (verdict, _) in zip(programs, full) if which == kind)
        print(f"- {kind}s on every test: " + ", ".join(f"{v} {c}" for v, c in counts.most_common()))
    failing = sum(verdict != "accepted" for verdict, _ in full)
    full_cpu = sum(cpu for _, cpu in full)
    print(f"\nStep 2: changes against every test, of {len(programs)} programs ({failing} fail some test); "
          f"seeded rules: mean over {args.seeds} seeds (min-max). CPU: the runs' CPU seconds judging "
          f"would take, stopping at each program's first failure (every test: {full_cpu:.1f} s)\n")
    print(f"| N | rule | problems cut | rewards changed | of them {first} | verdict labels changed "
          "| CPU s | CPU vs every test |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for budget in args.budgets:
        cut = sum(len(problem.tests) > budget for problem in problems_list)
        for rule in RULES:
            seeds = [0] if rule == "longest" else list(range(args.seeds))
            rewards, responses, labels, cpus = [], [], [], []
            for seed in seeds:
                changed_reward = changed_response = changed_label = 0
                cpu_total = 0.0
                for (problem_id, which, _), tests, (verdict, _) in zip(programs, outcomes, full):
                    now, cpu = subset_verdict(tests, chosen(problems[problem_id], budget, rule, seed))
                    cpu_total += cpu
                    changed_label += now != verdict
                    flipped = (now == "accepted") != (verdict == "accepted")
                    changed_reward += flipped
                    changed_response += flipped and which == first
                rewards.append(changed_reward)
                responses.append(changed_response)
                labels.append(changed_label)
                cpus.append(cpu_total)
            cpu = sum(cpus) / len(cpus)
            print(f"| {budget} | {rule} | {cut} | {spread(rewards)} | {spread(responses)} | {spread(labels)} "
                  f"| {cpu:.1f} | {cpu / full_cpu if full_cpu else math.nan:.2f} |")

    timed_ids = {problem.id for problem in problems_list[:args.timed]}
    samples = [sample for problem_id, _, sample in programs if problem_id in timed_ids]
    print(f"\nStep 3: the {len(samples)} programs of the first {len(timed_ids)} problems judged as training "
          "does (binary, stop at the first failure), our rule, seed 0\n")
    print("| tests | wall s | CPU s of runs | tests run | wall vs every test |")
    print("|---|---:|---:|---:|---:|")
    subset = {pid: problem for pid, problem in problems.items() if pid in timed_ids}
    rows = [("every", subset)] + [(str(budget), {pid: problem_on_budget(p, budget, 0) for pid, p in subset.items()})
                                  for budget in args.budgets]
    base = None
    for label, judged in rows:
        wall, cpu, runs = timed(evaluator, judged, samples)
        base = base or wall
        print(f"| {label} | {wall:.1f} | {cpu:.1f} | {runs} | {wall / base:.2f} |")
    print()


def spread(values: list[int]) -> str:
    if len(values) == 1:
        return str(values[0])
    return f"{sum(values) / len(values):.1f} ({min(values)}-{max(values)})"


if __name__ == "__main__":
    sys.exit(main())
