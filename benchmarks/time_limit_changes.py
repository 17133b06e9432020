"""Which verdicts change on the shared corpus when its limits come from the references.

    microcoder data build --config configs/data/shared.yaml
    python benchmarks/time_limit_changes.py [--old-limit 2.0] [--workers 2] [--only references responses] [--out F.md]

Two sets of programs are judged twice on the exported corpus
(`build/data/shared/export/microcoder-shared.jsonl`):
- every problem's reference solution (`metadata.reference_solution`), and
- LeetCodeDataset's model-written `response` for each of its problems (an unlabelled
  model's answer, read from the source file the problem came from): real model samples,
  right and wrong.
Old: no problem sets a limit (the corpus before limits came from references), so every
test gets the evaluator's default, `--old-limit` (2 s, as `microcoder evaluate` and
training's `reward_time_limit_s` default to). New: the problems as exported, the
reference-derived `time_limit_s` where they have one (problems without a reference keep
the default either way, so they are not judged). Each changed verdict is classified by
why it changed, from the CPU time of each test in both runs.

Needs ../shared (through the build); not a test. Prints Markdown.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
from collections import Counter, defaultdict
from pathlib import Path

from microcoder.data.config import load_build_config
from microcoder.evaluator import EvaluationResult, Evaluator, EvaluatorConfig, Sample
from microcoder.problems import Problem, read_problems

try:
    from reference_cpu_variation import ADD, smoke_problems  # run as a script: benchmarks/ is on the path
except ImportError:
    from benchmarks.reference_cpu_variation import ADD, smoke_problems

REPO = Path(__file__).resolve().parent.parent
TLE = "time_limit_exceeded"



def leetcode_responses(problems: list[Problem], config) -> dict[str, str]:
    """problem id -> the LeetCodeDataset record's model `response`, from its source file."""
    wanted: dict[tuple[str, str], str] = {}
    files = set()
    for problem in problems:
        if problem.source == "leetcodedataset":
            path = problem.metadata.get("source_path", "")
            wanted[(path, str(problem.metadata["original_id"]))] = problem.id
            files.add(path)
    found: dict[str, str] = {}
    for path in sorted(files):
        with gzip.open(config.resolve(path), "rt", encoding="utf-8") as handle:
            for line in handle:
                record = json.loads(line)
                pid = wanted.get((path, str(record.get("task_id"))))
                if pid and isinstance(record.get("response"), str):
                    found[pid] = record["response"]
    return found


def quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return (f"median {pick(0.5):.3g}, 90th percentile {pick(0.9):.3g}, 99th {pick(0.99):.3g}, "
            f"99.9th {pick(0.999):.3g}, max {ordered[-1]:.3g}")


def failing_test(result: EvaluationResult) -> int | None:
    if result.verdict == "accepted" or not result.detail.startswith("test "):
        return None
    return int(result.detail.split(":")[0].split()[1])


def why(kind: str, problem: Problem, old: EvaluationResult, new: EvaluationResult, old_limit: float) -> str:
    """A short reason for a changed verdict, from the limits and the runs' CPU times."""
    limit = problem.time_limit_s if problem.time_limit_s is not None else old_limit
    if new.verdict == TLE and old.verdict != TLE:
        index = failing_test(new)
        took = old.test_cpu_seconds[index] if index is not None and old.test_cpu_seconds[index] is not None else None
        reference = (problem.metadata.get("reference_cpu_s") or [None] * (index + 1))[index] if index is not None else None
        if kind == "reference":
            return (f"reference near its own limit: its rerun went over {limit:g} s "
                    f"(recorded {reference:.3f} s on that test)" if reference is not None else "reference over its limit")
        if took is not None and took > limit:
            times = f" ({took / reference:.0f}x the reference)" if reference else ""
            what = "accepted" if old.verdict == "accepted" else f"{old.verdict} (later)"
            return f"{what} under {old_limit:g} s, slower than the new {limit:g} s limit{times}"
        return f"{old.verdict} at {old_limit:g} s; run-to-run: its run {index} took {took} s against {limit:g} s"
    if old.verdict == TLE and new.verdict != TLE:
        if limit > old_limit:
            return f"needs more than {old_limit:g} s; its reference-derived limit is {limit:g} s"
        return f"timed out at {old_limit:g} s only on that run (the new limit {limit:g} s is lower)"
    return "not the limit: the program's verdict differs between two runs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(REPO / "configs/data/shared.yaml"))
    parser.add_argument("--old-limit", type=float, default=EvaluatorConfig().time_limit_s)
    parser.add_argument("--workers", type=int, default=0, help="0: the config's workers")
    parser.add_argument("--only", nargs="*", default=["references", "responses"])
    parser.add_argument("--out", type=Path, default=None, help="also write the report here")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: two hand-made problems in place of the build's output (tests/test_benchmarks_smoke.py)")
    args = parser.parse_args()

    config = load_build_config(args.config)
    corpus_path = config.stage_dir("export") / f"{config.export.name}.jsonl"
    if args.smoke:
        corpus_path, corpus = REPO / "(--smoke)", smoke_problems()
    else:
        corpus = [p for p in read_problems(corpus_path) if p.metadata.get("time_limit_from") == "reference"]
    by_id = {p.id: p for p in corpus}
    samples: list[tuple[str, Sample]] = []
    if "references" in args.only:
        samples += [("reference", Sample(p.id, code=p.metadata["reference_solution"])) for p in corpus]
    if "responses" in args.only:
        responses = ({p.id: f"```python\n{ADD}```" for p in corpus} if args.smoke
                     else leetcode_responses(corpus, config))
        samples += [("model response", Sample(pid, response=text)) for pid, text in responses.items()]
    old_problems = [p.model_copy(update={"time_limit_s": None}) for p in corpus]

    report = [f"# Verdicts under reference-derived limits vs a fixed {args.old_limit:g} s", "",
              f"Corpus: `{corpus_path.relative_to(REPO) if corpus_path.is_relative_to(REPO) else corpus_path}`, "
              f"{len(corpus)} problems with a limit from their reference. Command: `python "
              f"benchmarks/time_limit_changes.py`.", ""]
    results: dict[str, dict[str, list[EvaluationResult]]] = {}
    timing: dict[str, float] = {}
    loads = [os.getloadavg()[0]]
    with Evaluator(EvaluatorConfig(workers=args.workers or config.workers, time_limit_s=args.old_limit,
                                   record_test_cpu=True)) as evaluator:
        for name, problems in (("old", old_problems), ("new", corpus)):
            started = time.monotonic()
            results[name] = evaluator.evaluate(problems, [sample for _, sample in samples])
            timing[name] = time.monotonic() - started
            loads.append(os.getloadavg()[0])
            print(f"{name} limits judged in {timing[name]:.0f} s", flush=True)

    kinds = sorted({kind for kind, _ in samples})
    report += ["| programs | samples | limits | accepted | time_limit_exceeded | other | CPU s judging | of it in timeouts |",
               "|---|---:|---|---:|---:|---:|---:|---:|"]
    for kind in kinds:
        for name in ("old", "new"):
            rows = [r for (k, _), r in zip(samples, results[name]) if k == kind]
            verdicts = Counter(r.verdict for r in rows)
            cpu = sum(r.cpu_seconds for r in rows)
            in_timeouts = sum(r.cpu_seconds for r in rows if r.verdict == TLE)
            label = f"fixed {args.old_limit:g} s" if name == "old" else "from the reference"
            report.append(f"| {kind}s | {len(rows)} | {label} | {verdicts['accepted']} | {verdicts[TLE]} | "
                          f"{len(rows) - verdicts['accepted'] - verdicts[TLE]} | {cpu:.1f} | {in_timeouts:.1f} |")
    report += ["", f"Wall time, both sets together: {timing['old']:.0f} s with the fixed limit, {timing['new']:.0f} s "
               f"with reference-derived limits (2 workers; load average {min(loads):.1f}-{max(loads):.1f}).", ""]

    # What the floor has to leave room for: how slow accepted model programs are, on their
    # slowest test, in CPU seconds and against the reference on the same test.
    slowest, against = [], []
    for (kind, sample), old in zip(samples, results["old"]):
        if kind == "model response" and old.verdict == "accepted":
            times = old.test_cpu_seconds
            index = max(range(len(times)), key=lambda i: times[i])
            slowest.append(times[index])
            reference = by_id[sample.problem_id].metadata["reference_cpu_s"][index]
            against.append(times[index] / max(reference, 1e-4))
    if slowest:
        report += [f"Model responses accepted at {args.old_limit:g} s ({len(slowest)}), their slowest test: "
                   f"{quantiles(slowest)} CPU s; that test's time / the reference's on it: {quantiles(against)}. "
                   f"Over 0.5 s: {sum(t > 0.5 for t in slowest)}, over 1 s: {sum(t > 1 for t in slowest)}.", ""]

    # How close each program came to its new limit: its slowest test / the limit.
    for kind in kinds:
        closest = sorted(((max(t for t in new.test_cpu_seconds if t is not None) / by_id[sample.problem_id].time_limit_s,
                           sample.problem_id) for (k, sample), new in zip(samples, results["new"])
                          if k == kind and new.verdict == "accepted"), reverse=True)
        if closest:
            shown = ", ".join(f"`{pid}` {share:.2f}" for share, pid in closest[:3])
            report += [f"Accepted {kind}s under the new limits, slowest test / limit: median "
                       f"{closest[len(closest) // 2][0]:.3f}, max {closest[0][0]:.2f}; over half the limit: "
                       f"{sum(share > 0.5 for share, _ in closest)} of {len(closest)} (closest: {shown}).", ""]

    changes: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
    for (kind, sample), old, new in zip(samples, results["old"], results["new"]):
        if old.verdict != new.verdict:
            reason = why(kind, by_id[sample.problem_id], old, new, args.old_limit)
            changes[(kind, old.verdict, new.verdict, reason.split(" (")[0] if "x the reference" in reason else reason)].append(
                f"`{sample.problem_id}` ({reason})" if "x the reference" in reason else f"`{sample.problem_id}`")
    total = sum(len(v) for v in changes.values())
    report += [f"{total} of {len(samples)} verdicts change.", ""]
    if changes:
        report += ["| programs | old verdict | new verdict | samples | why | examples |", "|---|---|---|---:|---|---|"]
        for (kind, old_verdict, new_verdict, reason), ids in sorted(changes.items(), key=lambda kv: -len(kv[1])):
            report.append(f"| {kind}s | {old_verdict} | {new_verdict} | {len(ids)} | {reason} | {'; '.join(ids[:3])} |")
    text = "\n".join(report) + "\n"
    print("\n" + text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
