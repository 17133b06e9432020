"""Evaluator accuracy: do known-good programs pass and known-bad ones fail, in both modes?

    python benchmarks/evaluator_accuracy.py [--data ../shared/data] [--workers 0] [--limit N]
                                            [--sets NAME ...]

Each public set in `--data` (default `../shared/data` from the repo root; see its
README) is converted by our loaders, then every problem's reference program
(`metadata["reference_solution"]`) is judged against the problem's own tests by the
robust and the strict evaluator:

- HumanEvalPack: the canonical solutions (accepted = true positive, rejected = false
  negative) and the buggy solutions (accepted = false positive, rejected = true negative);
- HumanEval canonical, MBPP references, and each LeetCodeDataset file's `completion`.

A reference is correct by construction, so every rejection is either a broken record
(a test that contradicts the statement, a reference that genuinely fails) or a fault
of ours (loader or evaluator); each one is listed with its verdict and detail so it can
be read and decided. Rows the loader rejected never reach the evaluator; their reasons
are counted separately, because a loader that drops a good problem is a fault too.

References print exactly what the tests recorded, so the two modes hardly disagree on
them. To show where they do, two variants of each reference whose tests expect a bool or
a float are judged too (nothing is expected of them; they feed the disagreement table):
- "bool as int": the entry point's result with every bool turned into 0/1, as a C-minded
  program returns them. Strict (Python ==) accepts; robust rejects by design.
- "float 1e-9 off": every float in the result times (1 + 1e-9), as a different summation
  order gives. Robust (tolerance 1e-5) accepts; strict (no tolerance) rejects.
(LeetCodeDataset's `response` field is not used: its responses are the filtered correct
ones and are judged exactly like the references.)

Hand-labelled cases (tests/fixtures/accuracy/labelled_cases.jsonl, judged with or without
`--data`): small problems with a valid or an invalid program each, labelled by what the
statement and plain `python3` say, for each class of error the evaluator has had: CPU time
near the limit, a call problem's own checker, absolute-only and relative-only tolerances,
stdout and stdin idioms LiveCodeBench's in-process capture misses, nested call values, free
nesting levels. The report gives robust accuracy on them, by class.

Tests stop at a sample's first failure (`all_tests=False`), as in training. Verdicts use
CPU time, so a loaded machine changes the wall time but should not change the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from microcoder.data.loaders import load_problems
from microcoder.data.records import Reject
from microcoder.evaluator import EvaluationResult, Evaluator, EvaluatorConfig, Sample
from microcoder.problems import Problem

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data"
LABELLED_CASES = REPO_ROOT / "tests" / "fixtures" / "accuracy" / "labelled_cases.jsonl"
MODES = ("robust", "strict")
EXAMPLES_PER_DIRECTION = 3


@dataclass
class Workload:
    """One set of programs, each of which should be accepted (`expect_accept`) or not."""

    name: str
    problems: dict[str, Problem]
    samples: list[Sample]
    expect_accept: bool | None
    """None: nothing is expected (model responses)."""
    loader_rejects: list[Reject] = field(default_factory=list)
    results: dict[str, list[EvaluationResult]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def reference_samples(problems: list[Problem], key: str) -> list[Sample]:
    return [Sample(problem.id, code=problem.metadata[key]) for problem in problems if problem.metadata.get(key)]


# Appended to a reference: re-binds its entry point so that results pass through _mutate.
_MUTATE = {
    "bool as int": "def _mutate(v):\n"
                   "    if isinstance(v, bool):\n        return int(v)\n"
                   "    if isinstance(v, (list, tuple)):\n        return [_mutate(x) for x in v]\n"
                   "    return v\n",
    "float 1e-9 off": "def _mutate(v):\n"
                      "    if isinstance(v, float):\n        return v * (1 + 1e-9)\n"
                      "    if isinstance(v, (list, tuple)):\n        return [_mutate(x) for x in v]\n"
                      "    return v\n",
}


def _contains(value: object, kind: type) -> bool:
    if isinstance(value, list):
        return any(_contains(item, kind) for item in value)
    return type(value) is kind


def variant_samples(problems: list[Problem], variant: str) -> list[Sample]:
    """The reference with its results mutated, for problems some test of which expects a
    value of the type the variant changes."""
    kind = bool if variant == "bool as int" else float
    samples = []
    for problem in problems:
        reference = problem.metadata.get("reference_solution")
        if problem.kind != "call" or not reference or not any(
                _contains(json.loads(test.output), kind) for test in problem.tests):
            continue
        owner, _, name = problem.entry_point.rpartition("().")
        if owner:  # a method; the node adapter calls Solution's, so wrap that one
            owner = "Solution" if owner == "_Adapter" else owner
            rebind = (f"_original = {owner}.{name}\n"
                      f"{owner}.{name} = lambda self, *a, **k: _mutate(_original(self, *a, **k))\n")
        else:
            rebind = f"_original = {name}\n{name} = lambda *a, **k: _mutate(_original(*a, **k))\n"
        samples.append(Sample(problem.id, code=reference + "\n\n" + _MUTATE[variant] + rebind))
    return samples


def build_workloads(data: Path, sandbox, limit: int | None, sets: list[str]) -> list[Workload]:
    """Load every set whose name contains one of `sets` (all when empty); `limit` keeps
    the first N problems of each file."""
    sources = [("HumanEvalPack", data / "humanevalpack" / "humanevalpack_python.jsonl"),
               ("HumanEval", data / "humaneval" / "HumanEval.jsonl.gz"),
               ("MBPP", data / "mbpp" / "MBPP.jsonl")]
    sources += [(path.name.split(".jsonl")[0], path) for path in sorted((data / "leetcodedataset").glob("*.jsonl*"))]
    workloads = []
    for name, path in sources:
        if not path.exists():
            print(f"note: {path} not found, skipped", file=sys.stderr)
            continue
        if sets and not any(wanted.lower() in name.lower() for wanted in sets):
            continue
        started = time.perf_counter()
        problems, rejects = load_problems(path, format="auto", sandbox=sandbox)
        problems = problems[:limit] if limit else problems
        print(f"loaded {name}: {len(problems)} problems, {len(rejects)} loader rejects "
              f"({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
        by_id = {problem.id: problem for problem in problems}
        if name == "HumanEvalPack":
            workloads.append(Workload(f"{name} canonical", by_id, reference_samples(problems, "reference_solution"),
                                      True, rejects))
            workloads.append(Workload(f"{name} buggy", by_id, reference_samples(problems, "buggy_solution"), False))
        else:
            workloads.append(Workload(f"{name} reference", by_id, reference_samples(problems, "reference_solution"),
                                      True, rejects))
        for variant in _MUTATE:
            samples = variant_samples(problems, variant)
            if samples:
                workloads.append(Workload(f"{name} reference, {variant}", by_id, samples, None))
    return workloads


def labelled_workloads(path: Path = LABELLED_CASES) -> tuple[list[Workload], dict[str, str]]:
    """The hand-labelled cases as two workloads (valid: accept; invalid: reject), and each
    case's class by problem id."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    classes = {row["id"]: row["class"] for row in rows}
    workloads = []
    for label, accept in (("valid", True), ("invalid", False)):
        chosen = [row for row in rows if row["label"] == label]
        problems = {row["id"]: Problem.model_validate(row["problem"]) for row in chosen}
        samples = [Sample(row["id"], code=row["code"]) for row in chosen]
        workloads.append(Workload(f"labelled {label}", problems, samples, accept))
    return workloads, classes


def print_labelled_accuracy(workloads: list[Workload], classes: dict[str, str]) -> None:
    """Robust (and strict) accuracy on the labelled cases, by class."""
    right: dict[str, Counter] = {mode: Counter() for mode in MODES}
    total: Counter = Counter()
    for load in workloads:
        for mode in MODES:
            for result in load.results[mode]:
                right[mode][classes[result.problem_id]] += (result.verdict == "accepted") == load.expect_accept
        for sample in load.samples:
            total[classes[sample.problem_id]] += 1
    print("\n### Accuracy on the hand-labelled cases\n")
    print("| class | cases | robust right | strict right |")
    print("|---|---|---|---|")
    for name in sorted(total):
        print(f"| {name} | {total[name]} | {right['robust'][name]} | {right['strict'][name]} |")
    cases = sum(total.values())
    robust, strict = sum(right["robust"].values()), sum(right["strict"].values())
    print(f"| all | {cases} | {robust} | {strict} |")
    print(f"\nrobust accuracy on labelled cases: {robust}/{cases} ({100 * robust / max(cases, 1):.1f}%)")


def accepted_ids(results: list[EvaluationResult]) -> set[str]:
    return {result.problem_id for result in results if result.verdict == "accepted"}


def one_line(text: str, width: int = 160) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 3] + "..."


def print_report(workloads: list[Workload], workers: int, wall_s: float) -> int:
    """Markdown tables and lists; returns the number of unexpected robust verdicts."""
    print(f"\n## Evaluator accuracy ({workers} workers on {os.cpu_count()} cores, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}, {wall_s:.0f} s in all)\n")
    print("| programs | expected | problems | loader rejects | robust accepted | robust rejected "
          "| strict accepted | strict rejected | robust s | strict s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    unexpected = 0
    for load in workloads:
        cells = []
        for mode in MODES:
            accepted = len(accepted_ids(load.results[mode]))
            cells += [str(accepted), str(len(load.samples) - accepted)]
        robust_accepted = len(accepted_ids(load.results["robust"]))
        if load.expect_accept is not None:
            unexpected += (len(load.samples) - robust_accepted) if load.expect_accept else robust_accepted
        rejects = str(len(load.loader_rejects)) if load.loader_rejects or load.expect_accept else "-"
        expected = {True: "accept", False: "reject", None: "unknown"}[load.expect_accept]
        print(f"| {load.name} | {expected} | {len(load.samples)} | {rejects} | "
              + " | ".join(cells) + f" | {load.seconds['robust']:.1f} | {load.seconds['strict']:.1f} |")

    print("\n### Programs robust mode judged against expectation\n")
    print("| programs | problem | verdict | detail |")
    print("|---|---|---|---|")
    for load in workloads:
        for result in load.results["robust"]:
            if load.expect_accept is not None and (result.verdict == "accepted") != load.expect_accept:
                print(f"| {load.name} | {result.problem_id} | {result.verdict} | {one_line(result.detail)} |")

    print("\n### Loader rejects (rows that never reached the evaluator), by reason\n")
    for load in workloads:
        if load.loader_rejects:
            reasons = Counter(reject.reason for reject in load.loader_rejects)
            listing = "; ".join(f"{reason}: {count}" for reason, count in reasons.most_common())
            print(f"- {load.name}: {listing}")
            for reject in load.loader_rejects:
                if "JSON-representable" not in reject.reason:
                    print(f"  - row {reject.row} (id {reject.id}): {reject.reason}: {one_line(reject.message)}")

    print("\n### Strict and robust disagree\n")
    print("| programs | robust accepts, strict rejects | strict accepts, robust rejects |")
    print("|---|---|---|")
    examples: dict[str, list[tuple[str, EvaluationResult, EvaluationResult]]] = {"robust": [], "strict": []}
    for load in workloads:
        robust = {result.problem_id: result for result in load.results["robust"]}
        strict = {result.problem_id: result for result in load.results["strict"]}
        counts = Counter()
        for problem_id, robust_result in robust.items():
            strict_result = strict[problem_id]
            if (robust_result.verdict == "accepted") != (strict_result.verdict == "accepted"):
                winner = "robust" if robust_result.verdict == "accepted" else "strict"
                counts[winner] += 1
                examples[winner].append((load.name, robust_result, strict_result))
        print(f"| {load.name} | {counts['robust']} | {counts['strict']} |")
    for winner, loser in (("robust", "strict"), ("strict", "robust")):
        print(f"\n{winner} accepts, {loser} rejects ({len(examples[winner])} in all; "
              f"first {EXAMPLES_PER_DIRECTION}):\n")
        for name, robust_result, strict_result in examples[winner][:EXAMPLES_PER_DIRECTION]:
            rejected = strict_result if winner == "robust" else robust_result
            print(f"- {name} `{rejected.problem_id}`: {loser} says {rejected.verdict}: {one_line(rejected.detail)}")
        if not examples[winner]:
            print("- none")
    return unexpected


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--workers", type=int, default=0, help="parallel runs; 0 = one per core")
    parser.add_argument("--limit", type=int, default=None, help="judge only the first N problems of each file")
    parser.add_argument("--sets", nargs="*", default=[], help="only files whose name contains one of these")
    parser.add_argument("--labelled-only", action="store_true", help="only the hand-labelled cases (seconds)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: that the script runs (tests/test_benchmarks_smoke.py)")
    args = parser.parse_args()
    if args.smoke:  # two problems of HumanEvalPack, the quickest set to load
        args.limit, args.sets = 2, args.sets or ["Pack"]
    if not args.data.is_dir():
        print(f"{args.data} not found: only the labelled cases (a fresh clone has no ../shared/data; pass --data DIR)")

    started = time.perf_counter()
    evaluators = {mode: Evaluator(EvaluatorConfig(workers=args.workers, mode=mode)) for mode in MODES}
    try:
        labelled, classes = labelled_workloads()
        workloads = labelled + (build_workloads(args.data, evaluators["robust"].sandbox, args.limit, args.sets)
                                if args.data.is_dir() and not args.labelled_only else [])
        for load in workloads:
            for mode, evaluator in evaluators.items():
                mode_started = time.perf_counter()
                load.results[mode] = evaluator.evaluate(load.problems, load.samples)
                load.seconds[mode] = time.perf_counter() - mode_started
                print(f"judged {load.name} ({mode}): {len(accepted_ids(load.results[mode]))}/{len(load.samples)} "
                      f"accepted in {load.seconds[mode]:.1f} s", file=sys.stderr, flush=True)
        workers = evaluators["robust"].sandbox.size
    finally:
        for evaluator in evaluators.values():
            evaluator.close()
    unexpected = print_report(workloads, workers, time.perf_counter() - started)
    print_labelled_accuracy(labelled, classes)
    print(f"\n{unexpected} programs judged against expectation in robust mode (see the list above).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
