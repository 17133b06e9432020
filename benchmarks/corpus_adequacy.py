"""The corpus's quality figure: how often its tests let a provably wrong program through,
and how often a program that only prints the statement's outputs earns full reward.

    python benchmarks/corpus_adequacy.py [--config configs/data/shared.yaml] [--problems 300]
                                         [--mutants 8] [--heldout 50] [--seed 0] [--workers 2]
                                         [--write-datasheet] [--smoke]

Reads a finished build (`microcoder data build --config ...`: the export's `<name>.jsonl`).

1. Mutants. A seeded sample of --problems `call` problems with a reference and generated
   tests; each reference is mutated by this script's own mutator (one change each: + and -
   swapped, * and //, a comparison loosened or tightened, == and !=, and and or, an int
   constant +-1, a range() bound +-1, min and max swapped, True and False), up to
   --mutants per problem, drawn with the seed.
2. Provably wrong. --heldout inputs per problem are generated afresh (`generate_inputs`
   with another seed than the build's, so none is a corpus test), inside the same input
   space, and answered by the reference in the sandbox. A mutant that fails one of them
   differs from the reference on a valid input: it is provably wrong. Mutants that pass
   them all are left out (equivalent, or wrong only where nothing here looks).
3. Each provably wrong mutant is judged, as the training reward judges (robust judge,
   every test), on the problem's stored tests alone and on the corpus's tests (stored and
   generated). Per source: mutants killed, and problems that accept at least one provably
   wrong mutant, on each.
4. Shown outputs. For every problem of the corpus, a program that returns (prints) the
   output of the shown test whose input it is given, else the first shown output, is judged
   on the corpus's tests: the problems where it earns full reward.

Targets on the default build: at most 2% of problems accept a provably wrong mutant on the
corpus's tests; at most 1% reward the shown-outputs program. --write-datasheet stores the
figures as `export/adequacy.json` and writes the datasheet again with them.
--smoke: two hand-made problems through steps 1-4, in seconds. Not a test; prints Markdown.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from microcoder.data.amplify import generate_inputs, input_space
from microcoder.data.config import AmplifyConfig, load_build_config
from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from microcoder.problems import Problem, TestCase, read_problems

REPO = Path(__file__).resolve().parent.parent
HELDOUT_SEED_OFFSET = 1_000_003
"""Added to --seed for the held-out inputs: never the build's own seed."""

# ---------------------------------------------------------------- the mutator

_BINARY_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult,
                 ast.Mod: ast.FloorDiv}
_COMPARE_SWAPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                  ast.NotEq: ast.Eq}


def mutation_sites(tree: ast.AST) -> list[tuple[int, str]]:
    """(node index in ast.walk order, operator name) for every place one mutation applies."""
    sites = []
    for index, node in enumerate(ast.walk(tree)):
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_SWAPS:
            sites.append((index, "binary"))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE_SWAPS:
            sites.append((index, "compare"))
        elif isinstance(node, ast.BoolOp):
            sites.append((index, "boolean"))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            sites += [(index, "constant+1"), (index, "constant-1")]
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            sites.append((index, "bool"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "range" and node.args:
                sites += [(index, "range+1"), (index, "range-1")]
            elif node.func.id in ("min", "max"):
                sites.append((index, "minmax"))
    return sites


def mutate(source: str, site: tuple[int, str]) -> str | None:
    """`source` with the one mutation `site` names; None when it changes nothing."""
    tree = ast.parse(source)
    target, kind = site
    for index, node in enumerate(ast.walk(tree)):
        if index != target:
            continue
        if kind == "binary":
            node.op = _BINARY_SWAPS[type(node.op)]()
        elif kind == "compare":
            node.ops = [_COMPARE_SWAPS[type(node.ops[0])]()]
        elif kind == "boolean":
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        elif kind in ("constant+1", "constant-1"):
            node.value += 1 if kind.endswith("+1") else -1
        elif kind == "bool":
            node.value = not node.value
        elif kind in ("range+1", "range-1"):
            bound = node.args[1] if len(node.args) >= 2 else node.args[0]
            shifted = ast.BinOp(bound, ast.Add() if kind.endswith("+1") else ast.Sub(), ast.Constant(1))
            node.args[1 if len(node.args) >= 2 else 0] = shifted
        elif kind == "minmax":
            node.func.id = "max" if node.func.id == "min" else "min"
        break
    mutated = ast.unparse(tree)
    return None if mutated == ast.unparse(ast.parse(source)) else mutated


def mutants(source: str, count: int, rng: random.Random) -> list[str]:
    """Up to `count` distinct one-change mutants of `source`, drawn with `rng`."""
    try:
        sites = mutation_sites(ast.parse(source))
    except SyntaxError:
        return []
    chosen, seen = [], set()
    for site in rng.sample(sites, len(sites)):
        mutated = mutate(source, site)
        if mutated is not None and mutated not in seen:
            seen.add(mutated)
            chosen.append(mutated)
        if len(chosen) == count:
            break
    return chosen


# ---------------------------------------------------------------- the shown-outputs program


def shown_outputs_program(problem: Problem) -> str | None:
    """A program that answers the shown tests' inputs with their outputs and anything else
    with the first shown output; None when the problem shows no test."""
    shown = [test for test in problem.tests if test.shown]
    if not shown:
        return None
    if problem.kind == "stdin":
        table = {" ".join(test.input.split()): test.output for test in shown}
        return (f"import sys\nTABLE = {table!r}\nFIRST = {shown[0].output!r}\n"
                "text = ' '.join(sys.stdin.read().split())\nsys.stdout.write(TABLE.get(text, FIRST))\n")
    table = {json.dumps([json.loads(line) for line in test.input.split("\n") if line.strip()]): test.output
             for test in shown}
    function = (problem.entry_point or "").rsplit(".", 1)[-1]
    body = ("    key = json.dumps([*args])\n"
            "    return json.loads(TABLE.get(key, FIRST))\n")
    header = f"import json\nTABLE = {table!r}\nFIRST = {shown[0].output!r}\n"
    if "()." in (problem.entry_point or ""):
        owner = problem.entry_point.split("().", 1)[0]
        return header + f"class {owner}:\n    def {function}(self, *args):\n    " + body.replace("\n    ", "\n        ")
    return header + f"def {function}(*args):\n" + body


# ---------------------------------------------------------------- measuring


def wilson(successes: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson 95% interval of a proportion."""
    if total == 0:
        return 0.0, 0.0
    p = successes / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return max(0.0, centre - half), min(1.0, centre + half)


def source_of(problem: Problem) -> str:
    return str(problem.metadata.get("pipeline_source") or problem.source)


def sample_problems(problems: list[Problem], count: int, seed: int) -> list[Problem]:
    """A seeded sample of the call problems with a reference and generated tests (by a
    sha256 of the seed and the id: the same sample under any hash seed)."""
    eligible = [p for p in problems if p.kind == "call" and isinstance(p.metadata.get("reference_solution"), str)
                and any(test.generated for test in p.tests)]
    eligible.sort(key=lambda p: hashlib.sha256(f"{seed}:{p.id}".encode()).hexdigest())
    return eligible[:count]


def heldout_problem(problem: Problem, count: int, seed: int, evaluator: Evaluator) -> Problem | None:
    """The problem with `count` fresh generated inputs as its tests, answered by the reference
    (None when none could be made)."""
    stored = problem.model_copy(update={"tests": [test for test in problem.tests if not test.generated]})
    settings = AmplifyConfig()
    space = input_space(stored, settings)
    if space is None:
        return None
    corpus_inputs = {test.input for test in problem.tests}
    texts = ["\n".join(json.dumps(value) for value in arguments)
             for arguments in generate_inputs(stored, space, count, seed, settings.max_input_chars)]
    texts = [text for text in texts if text not in corpus_inputs]
    null_expected = any(test.output.strip() == "null" for test in problem.tests)
    limit = evaluator.time_limit_s(problem)
    tests = []
    for text in texts:
        run = evaluator.sandbox.run(problem.metadata["reference_solution"], kind="call",
                                    entry_point=problem.entry_point, prelude=problem.call_prelude(),
                                    arguments=[line for line in text.split("\n") if line.strip()],
                                    time_limit_s=limit, memory_limit_mb=problem.memory_limit_mb or 1024)
        if run.status != "ok" or run.return_json is None or (run.return_json == "null" and not null_expected):
            continue
        tests.append(TestCase(input=text, output=json.dumps(json.loads(run.return_json))))
    if not tests:
        return None
    return problem.model_copy(update={"tests": tests})


def judge(evaluator: Evaluator, problems: list[Problem], programs: list[tuple[str, str]]) -> list[bool]:
    """Whether each (problem id, program) is accepted on its problem's tests."""
    if not programs:
        return []
    samples = [Sample(problem_id, code=code) for problem_id, code in programs]
    return [result.verdict == "accepted" for result in evaluator.evaluate(problems, samples)]


def measure(problems: list[Problem], sample_size: int, mutants_per_problem: int, heldout: int, seed: int,
            workers: int, log=print) -> dict:
    started = time.monotonic()
    per_source: dict[str, Counter] = defaultdict(Counter)
    with Evaluator(EvaluatorConfig(workers=workers)) as evaluator:
        chosen = sample_problems(problems, sample_size, seed)
        log(f"mutants: {len(chosen)} problems sampled")
        for number, problem in enumerate(chosen, start=1):
            tally = per_source[source_of(problem)]
            rng = random.Random(int(hashlib.sha256(f"{seed}:{problem.id}".encode()).hexdigest()[:16], 16))
            candidates = mutants(problem.metadata["reference_solution"], mutants_per_problem, rng)
            held = heldout_problem(problem, heldout, seed + HELDOUT_SEED_OFFSET, evaluator)
            tally["problems"] += 1
            tally["mutants"] += len(candidates)
            if held is None or not candidates:
                tally["no held-out inputs" if held is None else "no mutants"] += 1
                continue
            wrong = [code for code, accepted in zip(candidates, judge(evaluator, [held],
                                                                       [(problem.id, c) for c in candidates]))
                     if not accepted]
            tally["provably_wrong"] += len(wrong)
            stored = problem.model_copy(update={"tests": [t for t in problem.tests if not t.generated]})
            on_stored = judge(evaluator, [stored], [(problem.id, code) for code in wrong])
            on_corpus = judge(evaluator, [problem], [(problem.id, code) for code in wrong])
            tally["killed_stored"] += on_stored.count(False)
            tally["killed_corpus"] += on_corpus.count(False)
            tally["problems_with_wrong_mutants"] += bool(wrong)
            tally["accepting_stored"] += any(on_stored)
            tally["accepting_corpus"] += any(on_corpus)
            if any(on_corpus):
                log(f"  {problem.id}: a provably wrong mutant passes the corpus's tests")
            if number % 25 == 0:
                log(f"  {number}/{len(chosen)} problems, {time.monotonic() - started:.0f} s")
        log(f"shown outputs: {len(problems)} problems")
        programs = [(problem, shown_outputs_program(problem)) for problem in problems]
        judged = [(problem, code) for problem, code in programs if code is not None]
        verdicts = judge(evaluator, problems, [(problem.id, code) for problem, code in judged])
        for problem, _ in programs:
            per_source[source_of(problem)]["shown_outputs_judged"] += 1
        for (problem, _), accepted in zip(judged, verdicts):
            per_source[source_of(problem)]["shown_outputs_rewarded"] += accepted
    rows = {source: {key: tally.get(key, 0) for key in (
        "problems", "mutants", "provably_wrong", "killed_stored", "killed_corpus", "problems_with_wrong_mutants",
        "accepting_stored", "accepting_corpus", "shown_outputs_judged", "shown_outputs_rewarded")}
        for source, tally in sorted(per_source.items())}
    return {"per_source": rows, "seconds": round(time.monotonic() - started, 1)}


def summarise(report: dict) -> str:
    rows = report["per_source"].values()
    total = {key: sum(row[key] for row in rows) for key in next(iter(rows)).keys()} if rows else {}
    scored = total.get("problems_with_wrong_mutants", 0)
    shown = total.get("shown_outputs_judged", 0)
    low_s, high_s = wilson(total.get("accepting_stored", 0), scored)
    low_c, high_c = wilson(total.get("accepting_corpus", 0), scored)
    low_o, high_o = wilson(total.get("shown_outputs_rewarded", 0), shown)
    share = lambda a, b: f"{a}/{b} ({100 * a / b:.1f}%)" if b else "0/0"  # noqa: E731
    return (f"Problems accepting a provably wrong mutant: stored tests {share(total.get('accepting_stored', 0), scored)}"
            f" (95% CI {100 * low_s:.1f}-{100 * high_s:.1f}%), corpus tests "
            f"{share(total.get('accepting_corpus', 0), scored)} (95% CI {100 * low_c:.1f}-{100 * high_c:.1f}%; "
            f"target <= 2%). Shown-outputs program rewarded: {share(total.get('shown_outputs_rewarded', 0), shown)} "
            f"(95% CI {100 * low_o:.1f}-{100 * high_o:.1f}%; target <= 1%). Mutants: {total.get('mutants', 0)}, "
            f"provably wrong {total.get('provably_wrong', 0)}, killed by stored tests {total.get('killed_stored', 0)}, "
            f"by corpus tests {total.get('killed_corpus', 0)}.")


def markdown(report: dict) -> str:
    lines = ["| source | problems | mutants | provably wrong | killed (stored) | killed (corpus) | "
             "accepting wrong (stored) | accepting wrong (corpus) | shown-outputs rewarded |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for source, row in report["per_source"].items():
        lines.append(f"| {source} | {row['problems']} | {row['mutants']} | {row['provably_wrong']} | "
                     f"{row['killed_stored']} | {row['killed_corpus']} | {row['accepting_stored']} / "
                     f"{row['problems_with_wrong_mutants']} | {row['accepting_corpus']} / "
                     f"{row['problems_with_wrong_mutants']} | {row['shown_outputs_rewarded']} / "
                     f"{row['shown_outputs_judged']} |")
    return "\n".join(lines)


def smoke_problems() -> list[Problem]:
    """Two hand-made problems as the build leaves them: shown tests, generated ones."""
    from microcoder.data.amplify import mark_shown

    reference = "class Solution:\n    def total(self, nums: List[int], k: int) -> int:\n        return sum(nums) + k\n"
    first = Problem(id="smoke/total", kind="call", entry_point="Solution().total", source="smoke",
                    starter_code="class Solution:\n    def total(self, nums: List[int], k: int) -> int:\n",
                    prompt="Return sum(nums) + k.\nInput: nums = [1,2], k = 3\nOutput: 6\nConstraints:\n"
                           "1 <= nums.length <= 10\n0 <= nums[i] <= 100\n0 <= k <= 5",
                    tests=[TestCase(input="[1, 2]\n3", output="6"), TestCase(input="[5]\n0", output="5")],
                    metadata={"reference_solution": reference})
    first = mark_shown(first)
    extra = [TestCase(input=f"{json.dumps(nums)}\n{k}", output=str(sum(nums) + k), generated=True)
             for nums, k in (([7, 8, 9], 2), ([0], 5), ([100, 1], 1))]
    first = first.model_copy(update={"tests": first.tests + extra})
    second = mark_shown(Problem(id="smoke/echo", kind="stdin", source="smoke", prompt="Print n.\nInput\n4\nOutput\n4",
                                tests=[TestCase(input="4\n", output="4\n")]))
    return [first, second]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(REPO / "configs/data/shared.yaml"))
    parser.add_argument("--problems", type=int, default=300)
    parser.add_argument("--mutants", type=int, default=8)
    parser.add_argument("--heldout", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--write-datasheet", action="store_true")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        report = measure(smoke_problems(), 2, 4, 10, args.seed, min(args.workers, 2))
    else:
        config = load_build_config(args.config)
        corpus = config.stage_dir("export") / f"{config.export.name}.jsonl"
        if not corpus.exists():
            print(f"{corpus}: no built corpus; run `microcoder data build --config {args.config}` first")
            return 0
        report = measure(read_problems(corpus), args.problems, args.mutants, args.heldout, args.seed, args.workers)
    report["summary"] = summarise(report)
    report["command"] = "python benchmarks/corpus_adequacy.py " + " ".join(argv if argv is not None else sys.argv[1:])
    print(markdown(report))
    print()
    print(report["summary"])
    print(f"({report['seconds']} s)")
    if args.write_datasheet and not args.smoke:
        from microcoder.data.datasheet import ADEQUACY_FILE, write_datasheet

        out_dir = config.stage_dir("export")
        (out_dir / ADEQUACY_FILE).write_text(json.dumps(report, indent=1) + "\n")
        write_datasheet(config, read_problems(corpus), out_dir)
        print(f"wrote {out_dir / ADEQUACY_FILE} and {out_dir / 'datasheet.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
