"""The corpus's quality figure: how often its tests let a provably wrong program through,
and how often a program that only prints the statement's outputs earns full reward.

    python benchmarks/corpus_adequacy.py [--config configs/data/shared.yaml] [--problems 300]
                                         [--mutants 10] [--heldout 50] [--neighbours 100]
                                         [--seed 0] [--workers 2] [--write-datasheet] [--smoke]

Reads a finished build (`microcoder data build --config ...`: the export's `<name>.jsonl`);
with --sample-before-amplify, the build's first four stages only: the sampled problems are
amplified here with the config's settings (each gets the tests a full build gives it), and
the shown-outputs figure covers the sample.

1. Mutants. A seeded sample of --problems `call` problems with a reference and generated
   tests; each reference is mutated by this script's own mutator, one change per mutant,
   up to --mutants per problem, the operators taken in turn (`OPERATORS`): + and - swapped,
   * and //, a comparison loosened or tightened (`<=` for `<`), == and !=, and and or, a
   dropped operand of and/or, a negated condition, an index off by one, `len(x) - 1`, a
   reversed sort, an int constant +-1, a range() bound +-1, min and max swapped, True and
   False, a dropped early return.
2. Provably wrong, by two oracles. A mutant that fails an input the reference answered
   differs from the reference on a valid input: it is provably wrong. Mutants that pass
   every input of an oracle are left out of its figures (equivalent, or wrong only where
   it does not look).
   - *own generator*: --heldout inputs from the build's generator (`generate_inputs`) with
     another seed than the build's, inside the same input space;
   - *independent oracle*: --neighbours inputs from a second, differently built generator
     (`neighbour_inputs`: one or two local edits of the corpus's own test inputs, an item
     dropped, repeated, swapped, a number nudged, a character changed, a list sorted or
     reversed ...), plus the boundary set drawn with another seed (boundaries.py), each
     kept only inside the stated constraints and the stored inputs' domains. It finds what
     the build's generator never looks at.
   Inputs that are corpus tests are left out of both.
3. Each provably wrong mutant is judged, as the training reward judges (robust judge,
   every test), on the problem's stored tests alone and on the corpus's tests (stored and
   generated). Per source and per oracle: mutants killed, and problems that accept at least
   one provably wrong mutant; the survivors are listed with their operator.
4. Shown outputs. For every problem of the corpus, a program that returns (prints) the
   output of the stored test whose input the statement shows, else the first such output, is
   judged on the corpus's tests: the problems where it earns full reward. "Shown" is
   decided here, not by the build's flags: each test value is written out in the ways a
   statement prints it (Python or JSON, lists or tuples, either quote) and looked for in
   the statement without whitespace (`shown_here`).

Targets on the default build: at most 1% of problems accept a mutant the independent oracle
proves wrong (2% under the own generator); at most 1% reward the shown-outputs program.
--write-datasheet stores the figures as `export/adequacy.json` and writes the datasheet
again with them. --smoke: two hand-made problems through steps 1-4, in seconds. Not a
test; prints Markdown.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import html
import json
import math
import random
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from microcoder.data.amplify import generate_inputs, input_space, stored_arguments
from microcoder.data.boundaries import boundary_inputs, fits
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
OPERATORS = ("binary", "compare", "boolean", "drop-operand", "negate", "index+1", "index-1", "len-1",
             "reverse-sort", "constant+1", "constant-1", "bool", "range+1", "range-1", "minmax", "drop-return")
"""The mutation operators, each one change at one site (`mutation_sites`)."""


def _early_returns(tree: ast.AST) -> set[int]:
    """ids of the `if ...: ... return` statements with more statements after them."""
    found = set()
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            statements = getattr(node, field, None)
            if isinstance(statements, list):
                for statement in statements[:-1]:
                    if isinstance(statement, ast.If) and not statement.orelse and isinstance(statement.body[-1],
                                                                                             ast.Return):
                        found.add(id(statement))
    return found


def _an_index(node: ast.AST) -> bool:
    """A subscript that may be an int index: not a slice, a tuple, or a constant other than an int."""
    if isinstance(node, (ast.Slice, ast.Tuple)):
        return False
    return not (isinstance(node, ast.Constant) and type(node.value) is not int)


def _is_sort(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (isinstance(node.func, ast.Name) and node.func.id == "sorted"
                                           or isinstance(node.func, ast.Attribute) and node.func.attr == "sort")


def mutation_sites(tree: ast.AST) -> list[tuple[int, str]]:
    """(node index in ast.walk order, operator name) for every place one mutation applies."""
    sites = []
    early = _early_returns(tree)
    for index, node in enumerate(ast.walk(tree)):
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_SWAPS:
            sites.append((index, "binary"))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE_SWAPS:
            sites.append((index, "compare"))
        elif isinstance(node, ast.BoolOp):
            sites.append((index, "boolean"))
            sites += [(index, f"drop-operand:{position}") for position in range(len(node.values))]
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            sites += [(index, "constant+1"), (index, "constant-1")]
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            sites.append((index, "bool"))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _an_index(node.slice):
            sites += [(index, "index+1"), (index, "index-1")]
        elif _is_sort(node):
            sites.append((index, "reverse-sort"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "range" and node.args:
                sites += [(index, "range+1"), (index, "range-1")]
            elif node.func.id in ("min", "max"):
                sites.append((index, "minmax"))
            elif node.func.id == "len" and len(node.args) == 1:
                sites.append((index, "len-1"))
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            sites.append((index, "negate"))
        if id(node) in early:
            sites.append((index, "drop-return"))
    return sites


def _mutated(node: ast.AST, kind: str) -> ast.AST | None:
    """The node with one change (changed in place, or a new node to put in its place)."""
    if kind == "binary":
        node.op = _BINARY_SWAPS[type(node.op)]()
    elif kind == "compare":
        node.ops = [_COMPARE_SWAPS[type(node.ops[0])]()]
    elif kind == "boolean":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind.startswith("drop-operand:"):
        rest = [value for position, value in enumerate(node.values) if position != int(kind.split(":")[1])]
        return rest[0] if len(rest) == 1 else ast.BoolOp(node.op, rest)
    elif kind == "negate":
        node.test = ast.UnaryOp(ast.Not(), node.test)
    elif kind in ("index+1", "index-1"):
        node.slice = ast.BinOp(node.slice, ast.Add() if kind == "index+1" else ast.Sub(), ast.Constant(1))
    elif kind == "len-1":
        return ast.BinOp(node, ast.Sub(), ast.Constant(1))
    elif kind == "reverse-sort":
        given = [keyword for keyword in node.keywords if keyword.arg == "reverse"]
        if given:
            given[0].value = ast.UnaryOp(ast.Not(), given[0].value)
        else:
            node.keywords.append(ast.keyword("reverse", ast.Constant(True)))
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
    elif kind == "drop-return":
        return ast.Pass()
    else:
        return None
    return node


class _Replace(ast.NodeTransformer):
    def __init__(self, target: ast.AST, replacement: ast.AST) -> None:
        self.target, self.replacement = target, replacement

    def visit(self, node: ast.AST) -> ast.AST:
        return self.replacement if node is self.target else self.generic_visit(node)


def mutate(source: str, site: tuple[int, str]) -> str | None:
    """`source` with the one mutation `site` names; None when it changes nothing."""
    tree = ast.parse(source)
    target_index, kind = site
    target = next((node for index, node in enumerate(ast.walk(tree)) if index == target_index), None)
    if target is None:
        return None
    replacement = _mutated(target, kind)
    if replacement is None:
        return None
    if replacement is not target:
        tree = _Replace(target, replacement).visit(tree)
    mutated = ast.unparse(ast.fix_missing_locations(tree))
    return None if mutated == ast.unparse(ast.parse(source)) else mutated


def operator_of(kind: str) -> str:
    return kind.split(":")[0]


def mutants(source: str, count: int, rng: random.Random) -> list[tuple[str, str]]:
    """Up to `count` distinct one-change mutants of `source` as (operator, code), drawn with
    `rng`: the operators present taken in turn (in a shuffled order), a random site of each,
    so that no operator with many sites (constants, indices) crowds out the rest."""
    try:
        sites = mutation_sites(ast.parse(source))
    except SyntaxError:
        return []
    by_operator: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for site in sites:
        by_operator[operator_of(site[1])].append(site)
    queues = [rng.sample(found, len(found)) for _, found in sorted(by_operator.items())]
    rng.shuffle(queues)
    chosen, seen = [], set()
    while len(chosen) < count and any(queues):
        for queue in queues:
            if not queue or len(chosen) == count:
                continue
            site = queue.pop()
            mutated = mutate(source, site)
            if mutated is not None and mutated not in seen:
                seen.add(mutated)
                chosen.append((operator_of(site[1]), mutated))
    return chosen


# ---------------------------------------------------------------- the independent oracle's generator


def _reordered(value: Any, rng: random.Random) -> Any:
    """`value` with its items (a string's characters) swapped, reversed or rotated: what a
    promise about a multiset ("exactly one answer exists") survives."""
    items = list(value) if isinstance(value, (str, list)) else None
    if not items or len(items) < 2:
        return value
    edit = rng.randrange(3)
    if edit == 0:
        first, second = rng.sample(range(len(items)), 2)
        items[first], items[second] = items[second], items[first]
    elif edit == 1:
        items.reverse()
    else:
        items = items[1:] + items[:1]
    return "".join(items) if isinstance(value, str) else json.loads(json.dumps(items))


def _nudged(value: Any, others: list[Any], rng: random.Random) -> Any:
    """`value` with one local edit: a number +-1 or +-2 or another test's value; an item of a
    list dropped, repeated, swapped with another, made equal to its neighbour, or edited
    itself; a list sorted, reversed or rotated; a character of a string dropped, repeated,
    swapped or changed; or the value another test gives this argument."""
    roll = rng.random()
    if others and roll < 0.1:
        return json.loads(json.dumps(rng.choice(others)))
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.choice([-2, -1, 1, 2]) if roll < 0.8 else rng.choice([0, -value, value * 2])
    if isinstance(value, float):
        return round(value + rng.choice([-1.0, -0.5, 0.5, 1.0]), 6)
    if isinstance(value, str):
        letters = list(value)
        alphabet = sorted(set(value + "".join(str(other) for other in others[:20])))
        if not letters:
            return rng.choice(alphabet) if alphabet else value
        position = rng.randrange(len(letters))
        edit = rng.randrange(5)
        if edit == 0:
            del letters[position]
        elif edit == 1:
            letters.insert(position, letters[position])
        elif edit == 2 and len(letters) >= 2:
            other = rng.randrange(len(letters))
            letters[position], letters[other] = letters[other], letters[position]
        elif edit == 3 and alphabet:
            letters[position] = rng.choice(alphabet)
        else:
            letters.reverse()
        return "".join(letters)
    if isinstance(value, list):
        items = json.loads(json.dumps(value))
        if not items:
            return json.loads(json.dumps(rng.choice(others))) if others else items
        position = rng.randrange(len(items))
        edit = rng.randrange(9)
        if edit == 0:
            del items[position]
        elif edit == 1:
            items.insert(position, json.loads(json.dumps(items[position])))
        elif edit == 2:
            other = rng.randrange(len(items))
            items[position], items[other] = items[other], items[position]
        elif edit == 3 and position + 1 < len(items):
            items[position + 1] = json.loads(json.dumps(items[position]))
        elif edit == 4 and all(isinstance(item, (int, float, str)) and not isinstance(item, bool) for item in items) \
                and len({type(item) for item in items}) == 1:
            items.sort(reverse=rng.random() < 0.5)
        elif edit == 5:
            items.reverse()
        elif edit == 6:
            items = items[1:] + items[:1]
        else:
            peers = [item for other in others if isinstance(other, list) for item in other][:200]
            items[position] = _nudged(items[position], peers, rng)
        return items
    return value


def neighbour_inputs(problem: Problem, count: int, seed: int, max_input_chars: int = 4000) -> list[list[Any]]:
    """Up to `count` new inputs, each a test input of the corpus (stored or generated) with
    one or two of its arguments edited (`_nudged`; only reordered, `_reordered`, where the
    statement promises in words what no bound says), kept only where every argument stays
    in its domain and the input inside the stated bounds and observed relations (the input
    space the build reads from the problem's stored tests). Pure given the seed."""
    stored = problem.model_copy(update={"tests": [test for test in problem.tests if not test.generated]})
    space = input_space(stored, AmplifyConfig())
    if space is None:
        return []
    pool = [arguments for arguments in ([json.loads(line) for line in test.input.split("\n") if line.strip()]
                                        for test in problem.tests) if len(arguments) == len(space.domains)]
    if not pool:
        return []
    rng = random.Random(int(hashlib.sha256(f"neighbours:{seed}:{problem.id}".encode()).hexdigest()[:16], 16))
    at_position = [[arguments[position] for arguments in pool] for position in range(len(space.domains))]
    seen = {json.dumps(arguments) for arguments in pool}
    found: list[list[Any]] = []
    for _ in range(count * 30):
        if len(found) == count:
            break
        arguments = json.loads(json.dumps(rng.choice(pool)))
        for _ in range(rng.choice([1, 1, 2])):
            position = rng.randrange(len(arguments))
            arguments[position] = _reordered(arguments[position], rng) if space.promises \
                else _nudged(arguments[position], at_position[position], rng)
        key = json.dumps(arguments)
        if key in seen or len(key) > max_input_chars or not space.admits(arguments) \
                or not all(fits(domain, value) for domain, value in zip(space.domains, arguments)):
            continue
        seen.add(key)
        found.append(arguments)
    return found


# ---------------------------------------------------------------- the shown-outputs program


def _render(value: Any, tuples: str, quote: str, python_names: bool, outer: bool = True) -> str:
    """`value` written as a statement may print it, without spaces: lists as lists or tuples
    (`tuples`: "none", "all", or "outer" for the outermost only), strings in `quote`,
    None/True/False or null/true/false."""
    if value is None:
        return "None" if python_names else "null"
    if isinstance(value, bool):
        return str(value) if python_names else str(value).lower()
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return quote + value.replace("\\", "\\\\").replace(quote, "\\" + quote) + quote
    if isinstance(value, list):
        inner = ",".join(_render(item, tuples, quote, python_names, False) for item in value)
        if tuples == "all" or (tuples == "outer" and outer):
            return "(" + inner + ("," if len(value) == 1 else "") + ")"
        return "[" + inner + "]"
    if isinstance(value, dict):
        return "{" + ",".join(_render(key, tuples, quote, python_names, False) + ":"
                              + _render(item, tuples, quote, python_names, False) for key, item in value.items()) + "}"
    return json.dumps(value)


def renderings(value: Any) -> set[str]:
    """Every spelling of `value` `_render` gives, whitespace removed."""
    return {"".join(_render(value, tuples, quote, names).split())
            for tuples in ("none", "all", "outer") for quote in ("'", '"') for names in (True, False)}


def shown_here(problem: Problem, test: TestCase) -> bool:
    """This script's own reading of "the statement shows this test", apart from the build's:
    a `call` test when some spelling of each argument and of the output (`renderings`) is
    in the statement with its whitespace removed; a `stdin` test when its input and output,
    whitespace runs made one space, are in the statement read the same way."""
    text = html.unescape(problem.prompt)
    if problem.kind == "stdin":
        statement = " ".join(text.split())
        return all(" ".join(part.split()) in statement for part in (test.input, test.output) if part.strip())
    statement = "".join(text.split())
    try:
        values = [json.loads(line) for line in test.input.split("\n") if line.strip()] + [json.loads(test.output)]
    except json.JSONDecodeError:
        return False
    return all(any(form in statement for form in renderings(value)) for value in values)


def shown_outputs_program(problem: Problem) -> str | None:
    """A program that answers the inputs of the stored tests the statement shows (`shown_here`)
    with their outputs and anything else with the first such output; None when it shows none.
    Generated tests are the reference's answers to new inputs: that each of a generated
    input's arguments and its output appear somewhere in the statement (a tree of an example,
    `x = 4`, `true`) does not show that answer for that input."""
    shown = [test for test in problem.tests if not test.generated and shown_here(problem, test)]
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


def answered(problem: Problem, inputs: list[list[Any]], evaluator: Evaluator, workers: int) -> Problem | None:
    """The problem with the inputs that are not corpus tests as its tests, each answered by
    the reference in the sandbox (an input it crashes on, times out on, or answers None
    where no corpus answer is None is dropped); None when none is left."""
    corpus_inputs = {test.input for test in problem.tests}
    texts = list(dict.fromkeys(text for text in ("\n".join(json.dumps(value) for value in arguments)
                                                 for arguments in inputs) if text not in corpus_inputs))
    null_expected = any(test.output.strip() == "null" for test in problem.tests)
    limit = evaluator.time_limit_s(problem)

    def run(text: str):
        return evaluator.sandbox.run(problem.metadata["reference_solution"], kind="call",
                                     entry_point=problem.entry_point, prelude=problem.call_prelude(),
                                     arguments=[line for line in text.split("\n") if line.strip()],
                                     time_limit_s=limit, memory_limit_mb=problem.memory_limit_mb or 1024)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        runs = list(pool.map(run, texts))
    tests = []
    for text, result in zip(texts, runs):
        if result.machine_fault:
            raise SystemExit(f"corpus_adequacy: the sandbox could not run {problem.id}'s reference: {result.detail}")
        if result.status != "ok" or result.return_json is None or (result.return_json == "null" and not null_expected):
            continue
        tests.append(TestCase(input=text, output=json.dumps(json.loads(result.return_json))))
    return problem.model_copy(update={"tests": tests}) if tests else None


def own_oracle_inputs(problem: Problem, count: int, seed: int) -> list[list[Any]]:
    """`count` inputs from the build's own generator with another seed."""
    stored = problem.model_copy(update={"tests": [test for test in problem.tests if not test.generated]})
    settings = AmplifyConfig()
    space = input_space(stored, settings)
    return [] if space is None else generate_inputs(stored, space, count, seed, settings.max_input_chars)


def independent_oracle_inputs(problem: Problem, count: int, seed: int) -> list[list[Any]]:
    """`count` neighbours of the corpus's inputs and the boundary set, both with `seed`."""
    stored = problem.model_copy(update={"tests": [test for test in problem.tests if not test.generated]})
    settings = AmplifyConfig()
    space = input_space(stored, settings)
    if space is None:
        return []
    edges = boundary_inputs(space.domains, space.admits, stored_arguments(stored), problem.prompt,
                            bool(space.promises), settings.boundary_inputs, seed, problem.id, settings.max_input_chars)
    return neighbour_inputs(problem, count, seed) + [arguments for _, arguments in edges]


def judge(evaluator: Evaluator, problems: list[Problem], programs: list[tuple[str, str]]) -> list[bool]:
    """Whether each (problem id, program) is accepted on its problem's tests."""
    if not programs:
        return []
    samples = [Sample(problem_id, code=code) for problem_id, code in programs]
    return [result.verdict == "accepted" for result in evaluator.evaluate(problems, samples)]


COLUMNS = ("problems", "mutants", "provably_wrong", "killed_stored", "killed_corpus", "problems_with_wrong_mutants",
           "accepting_stored", "accepting_corpus", "provably_wrong_independent", "killed_corpus_independent",
           "problems_with_wrong_independent", "accepting_stored_independent", "accepting_corpus_independent",
           "shown_outputs_judged", "shown_outputs_rewarded")
"""Per source: the own generator's figures (no suffix) and the independent oracle's (`_independent`)."""


def measure(problems: list[Problem], sample_size: int, mutants_per_problem: int, heldout: int, neighbours: int,
            seed: int, workers: int, log=print) -> dict:
    started = time.monotonic()
    per_source: dict[str, Counter] = defaultdict(Counter)
    survivors: list[dict] = []
    with Evaluator(EvaluatorConfig(workers=workers)) as evaluator:
        chosen = sample_problems(problems, sample_size, seed)
        log(f"mutants: {len(chosen)} problems sampled")
        for number, problem in enumerate(chosen, start=1):
            tally = per_source[source_of(problem)]
            rng = random.Random(int(hashlib.sha256(f"{seed}:{problem.id}".encode()).hexdigest()[:16], 16))
            candidates = mutants(problem.metadata["reference_solution"], mutants_per_problem, rng)
            tally["problems"] += 1
            tally["mutants"] += len(candidates)
            if not candidates:
                continue
            oracles = {"own": answered(problem, own_oracle_inputs(problem, heldout, seed + HELDOUT_SEED_OFFSET),
                                       evaluator, workers),
                       "independent": answered(problem, independent_oracle_inputs(
                           problem, neighbours, seed + HELDOUT_SEED_OFFSET), evaluator, workers)}
            wrong_by = {name: ([] if held is None else
                               [index for index, accepted in enumerate(judge(
                                   evaluator, [held], [(problem.id, code) for _, code in candidates])) if not accepted])
                        for name, held in oracles.items()}
            wrong = sorted(set(wrong_by["own"]) | set(wrong_by["independent"]))
            stored = problem.model_copy(update={"tests": [t for t in problem.tests if not t.generated]})
            on_stored = dict(zip(wrong, judge(evaluator, [stored], [(problem.id, candidates[i][1]) for i in wrong])))
            on_corpus = dict(zip(wrong, judge(evaluator, [problem], [(problem.id, candidates[i][1]) for i in wrong])))
            for name, suffix in (("own", ""), ("independent", "_independent")):
                proven = wrong_by[name]
                tally["provably_wrong" + suffix] += len(proven)
                tally["killed_corpus" + suffix] += sum(not on_corpus[i] for i in proven)
                tally[("problems_with_wrong_mutants" if name == "own" else "problems_with_wrong_independent")] += \
                    bool(proven)
                tally["accepting_stored" + suffix] += any(on_stored[i] for i in proven)
                tally["accepting_corpus" + suffix] += any(on_corpus[i] for i in proven)
                if name == "own":
                    tally["killed_stored"] += sum(not on_stored[i] for i in proven)
                for i in proven:
                    if on_corpus[i]:
                        survivors.append({"id": problem.id, "source": source_of(problem), "oracle": name,
                                          "operator": candidates[i][0]})
                        log(f"  {problem.id}: a mutant ({candidates[i][0]}) the {name} oracle proves wrong "
                            "passes the corpus's tests")
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
            if accepted:
                log(f"  {problem.id}: the shown-outputs program earns full reward")
    rows = {source: {key: tally.get(key, 0) for key in COLUMNS} for source, tally in sorted(per_source.items())}
    return {"per_source": rows, "survivors": survivors, "seconds": round(time.monotonic() - started, 1)}


def _share(successes: int, total: int) -> str:
    low, high = wilson(successes, total)
    return (f"{successes}/{total} ({100 * successes / total:.1f}%, 95% CI {100 * low:.1f}-{100 * high:.1f}%)"
            if total else "0/0")


def summarise(report: dict) -> str:
    rows = list(report["per_source"].values())
    total = {key: sum(row.get(key, 0) for row in rows) for key in COLUMNS}
    return (f"Problems accepting a provably wrong mutant, independent oracle: corpus tests "
            f"{_share(total['accepting_corpus_independent'], total['problems_with_wrong_independent'])} (target <= 1%),"
            f" stored tests {_share(total['accepting_stored_independent'], total['problems_with_wrong_independent'])}"
            f"; own generator: corpus tests {_share(total['accepting_corpus'], total['problems_with_wrong_mutants'])} "
            f"(target <= 2%), stored tests {_share(total['accepting_stored'], total['problems_with_wrong_mutants'])}. "
            f"Shown-outputs program rewarded: {_share(total['shown_outputs_rewarded'], total['shown_outputs_judged'])} "
            f"(target <= 1%). Mutants: {total['mutants']}, provably wrong {total['provably_wrong']} (own) and "
            f"{total['provably_wrong_independent']} (independent), killed by corpus tests {total['killed_corpus']} and "
            f"{total['killed_corpus_independent']}.")


def markdown(report: dict) -> str:
    lines = ["| source | problems | mutants | provably wrong: own / independent | accepting wrong, stored tests: own "
             "/ independent | accepting wrong, corpus tests: own | independent | shown-outputs rewarded |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    rows = dict(report["per_source"])
    rows["all"] = {key: sum(row.get(key, 0) for row in report["per_source"].values()) for key in COLUMNS}
    for source, row in rows.items():
        lines.append(f"| {source} | {row['problems']} | {row['mutants']} | {row['provably_wrong']} / "
                     f"{row['provably_wrong_independent']} | {row['accepting_stored']} / "
                     f"{row['problems_with_wrong_mutants']}; {row['accepting_stored_independent']} / "
                     f"{row['problems_with_wrong_independent']} | {row['accepting_corpus']} / "
                     f"{row['problems_with_wrong_mutants']} | {row['accepting_corpus_independent']} / "
                     f"{row['problems_with_wrong_independent']} | {row['shown_outputs_rewarded']} / "
                     f"{row['shown_outputs_judged']} |")
    by_operator = Counter((survivor["oracle"], survivor["operator"]) for survivor in report.get("survivors", []))
    if by_operator:
        lines += ["", "Surviving provably wrong mutants by oracle and operator: "
                  + ", ".join(f"{oracle} {operator} {count}"
                              for (oracle, operator), count in sorted(by_operator.items()))
                  + "; problems: " + ", ".join(sorted({f"`{s['id']}`" for s in report["survivors"]})) + "."]
    return "\n".join(lines)


def smoke_problems() -> list[Problem]:
    """Two hand-made problems as the build leaves them: shown tests, generated ones."""
    from microcoder.data.shown import mark_shown

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


def amplified_sample(config, count: int, seed: int, log=print) -> list[Problem]:
    """The problems `sample_problems` would draw from a finished build, made without one: the
    call problems with a reference of the build's decontaminate output, in the sample's
    order, amplified (`amplify_problems`, the config's settings) until `count` have generated
    tests. A problem's generated tests depend on it alone (seeded by its id, answered by its
    reference), so each is the one a full build makes; the answers go to the build's cache."""
    from microcoder.data.amplify import amplify_problems
    from microcoder.data.stages import StageContext

    source = config.stage_dir("decontaminate") / "problems.jsonl"
    if not source.exists():
        raise SystemExit(f"{source}: no decontaminate output; run the build's first four stages first")
    eligible = [p for p in read_problems(source) if p.kind == "call"
                and isinstance(p.metadata.get("reference_solution"), str)]
    eligible.sort(key=lambda p: hashlib.sha256(f"{seed}:{p.id}".encode()).hexdigest())
    kept: list[Problem] = []
    config = config.model_copy(update={"progress": False})
    start, context = 0, StageContext(config)
    try:
        while start < len(eligible) and len(sample_problems(kept, count, seed)) < count:
            batch = eligible[start : start + max(10, count - len(kept) + count // 5)]
            start += len(batch)
            kept += amplify_problems(batch, config, context).problems
            log(f"amplified {start} sampled problems, {len(kept)} kept")
    finally:
        context.close()
    return sample_problems(kept, count, seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(REPO / "configs/data/shared.yaml"))
    parser.add_argument("--problems", type=int, default=300)
    parser.add_argument("--mutants", type=int, default=10)
    parser.add_argument("--heldout", type=int, default=50)
    parser.add_argument("--neighbours", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sample-before-amplify", action="store_true",
                        help="amplify only the sampled problems (from the build's decontaminate output, with the "
                             "config's amplify settings) instead of reading the export")
    parser.add_argument("--write-datasheet", action="store_true")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        report = measure(smoke_problems(), 2, 4, 10, 10, args.seed, min(args.workers, 2))
    elif args.sample_before_amplify:
        config = load_build_config(args.config)
        report = measure(amplified_sample(config, args.problems, args.seed), args.problems, args.mutants, args.heldout,
                         args.neighbours, args.seed, args.workers)
        report["shown_outputs_scope"] = "the sampled problems only"
    else:
        config = load_build_config(args.config)
        corpus = config.stage_dir("export") / f"{config.export.name}.jsonl"
        if not corpus.exists():
            print(f"{corpus}: no built corpus; run `microcoder data build --config {args.config}` first")
            return 0
        report = measure(read_problems(corpus), args.problems, args.mutants, args.heldout, args.neighbours, args.seed,
                         args.workers)
    report["summary"] = summarise(report)
    report["command"] = "python benchmarks/corpus_adequacy.py " + " ".join(argv if argv is not None else sys.argv[1:])
    print(markdown(report))
    print()
    print(report["summary"])
    print(f"({report['seconds']} s)")
    if args.write_datasheet and not args.smoke and not args.sample_before_amplify:
        from microcoder.data.datasheet import ADEQUACY_FILE, write_datasheet

        out_dir = config.stage_dir("export")
        (out_dir / ADEQUACY_FILE).write_text(json.dumps(report, indent=1) + "\n")
        write_datasheet(config, read_problems(corpus), out_dir)
        print(f"wrote {out_dir / ADEQUACY_FILE} and {out_dir / 'datasheet.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
