"""Rooms import downward, and no file imports itself back through others (docs/architecture.md).

Every module under microcoder/ and benchmarks/ is read with `ast`: its imports at module
level, inside functions and under TYPE_CHECKING alike, as written. An edge goes to the
module named (`from microcoder.policy import model` names microcoder/policy/model.py); a
package's __init__ that a submodule import runs on the way is not an edge of the importing
file. A benchmark run as a script imports its neighbours by bare name (`from workloads
import CORRECT`), which names benchmarks/workloads.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "microcoder"
BENCHMARKS = REPO / "benchmarks"

ROOM_LEVELS = {
    "root": 0,           # microcoder/__init__.py: the version
    "problems": 0,       # the canonical problem format
    "config_files": 0,   # reading a YAML config file into a mapping
    "pins": 0,           # the refusal of a library release our hooks were not read against
    "problem_sets": 1,   # the generated problem sets (problems only)
    "algorithms": 1,     # pure math (nothing of ours)
    "evaluator": 2,      # the judge: problems, pass@k
    "policy": 3,         # the model: loading, prompts, sampling, eval-model
    "data": 4,           # the corpus pipeline; the difficulty stage samples the policy
    "training": 4,       # the trainer and its run
    "experiments": 5,    # grids of training runs
    "integrations": 5,   # adapters for other frameworks (verl)
    "service": 5,        # the evaluator over HTTP
    "cli": 6,            # the command line: wiring only
    "benchmarks": 7,     # measurements of the product: may use any room, none uses them
}
"""A module may import its own room and rooms of a lower level; rooms of one level never
import each other (data and training are siblings, not above one another)."""

APART = {
    ("integrations", "training"): "an adapter runs our method inside another framework's trainer, not ours; "
                                  "what both need (prompts, EOS ids, the math) is in policy and algorithms",
}
"""(room, room above it) pairs that must stay apart all the same, and why."""

KEPT = {}
"""(importer, imported) -> why an import against the order is kept. None at present."""

SELF_CONTAINED = tuple(f"microcoder.evaluator.{name}" for name in (
    "_zygote", "_zygote_confinement", "_zygote_program", "_zygote_child", "_zygote_serve", "_wire", "_livecodebench"))
"""Modules that import nothing of ours: the sandbox worker and the files it loads by path,
which run beside untrusted code."""


def module_files(*packages: Path) -> dict[str, Path]:
    """{dotted module name: file} for every .py under each of `packages`."""
    modules = {}
    for package in packages:
        for path in sorted(package.rglob("*.py")):
            parts = list(path.relative_to(package.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ours that `path` (module `name`) imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                       for alias in node.names]
        else:
            continue
        for target in targets:
            if name.startswith("benchmarks.") and f"benchmarks.{target}" in modules:  # a script's neighbour
                target = f"benchmarks.{target}"
            while target and target not in modules:  # `import microcoder.a.b.name` -> microcoder.a.b
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(package: Path = PACKAGE, benchmarks: Path = BENCHMARKS) -> dict[str, set[str]]:
    modules = module_files(package, benchmarks)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def room_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "benchmarks":
        return "benchmarks"
    return "root" if len(parts) == 1 else parts[1]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a room at or above the importer's level (other than its own room), or of a room kept APART."""
    wrong = []
    for importer, imported in sorted(graph.items()):
        for target in sorted(imported):
            low, high = room_of(importer), room_of(target)
            against_order = low != high and (ROOM_LEVELS[high] >= ROOM_LEVELS[low] or (low, high) in APART)
            if against_order and (importer, target) not in KEPT:
                wrong.append(f"{importer} ({low}, level {ROOM_LEVELS[low]}) imports {target} "
                             f"({high}, level {ROOM_LEVELS[high]})")
    return wrong


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each set of files that import one another (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        index[node] = lowest[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                lowest[node] = min(lowest[node], lowest[target])
            elif target in stack:
                lowest[node] = min(lowest[node], index[target])
        if lowest[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_every_module_is_in_a_room_with_a_level():
    assert sorted({room_of(name) for name in import_graph()} - set(ROOM_LEVELS)) == []


def test_no_room_imports_a_room_above_or_beside_it():
    assert upward_imports(import_graph()) == []


def test_no_files_import_each_other():
    assert import_cycles(import_graph()) == []


def test_the_sandbox_worker_imports_nothing_of_ours():
    graph = import_graph()
    assert {name: sorted(graph[name]) for name in SELF_CONTAINED} == {name: [] for name in SELF_CONTAINED}


def test_the_sandbox_worker_loads_only_its_own_files_by_path():
    # The worker puts its folder on the path and imports its rooms by bare name; any other
    # file of the evaluator's folder it named so would bring in the package's code.
    evaluator = PACKAGE / "evaluator"
    siblings = {path.stem for path in evaluator.glob("*.py")}
    worker_files = {name.rpartition(".")[2] for name in SELF_CONTAINED}
    loaded = {}
    for name in worker_files:
        tree = ast.parse((evaluator / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level else [])
            loaded.setdefault(name, set()).update(target for target in names if target in siblings)
    assert {name: sorted(found - worker_files) for name, found in loaded.items()} == {name: [] for name in worker_files}
    assert {"_zygote_confinement", "_zygote_program", "_zygote_child", "_zygote_serve"} <= loaded["_zygote"]


def test_benchmarks_are_read_and_nothing_of_ours_imports_them():
    graph = import_graph()
    assert {"benchmarks.evaluator_speed", "benchmarks.fork_floor", "benchmarks.workloads"} <= set(graph)
    # the script-style import `from workloads import ...` is an edge like the package-style one
    assert "benchmarks.workloads" in graph["benchmarks.evaluator_speed"]
    assert not [(importer, target) for importer, targets in graph.items() for target in targets
                if room_of(target) == "benchmarks" and room_of(importer) != "benchmarks"]


def test_the_checks_catch_an_upward_import_and_a_loop(tmp_path):
    # A made-up package: the evaluator imports training, and two data files import each other.
    package = tmp_path / "microcoder"
    for folder in ("evaluator", "training", "data"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "training" / "trainer.py").write_text("")
    (package / "evaluator" / "judge.py").write_text("def f():\n    from microcoder.training import trainer\n")
    (package / "data" / "a.py").write_text("from microcoder.data.b import x\n")
    (package / "data" / "b.py").write_text("from . import a\nx = 1\n")
    # Two benchmarks that import each other, one as a script does, and the judge importing a benchmark.
    benchmarks = tmp_path / "benchmarks"
    benchmarks.mkdir()
    (benchmarks / "speed.py").write_text("try:\n    from floor import f\nexcept ImportError:\n"
                                         "    from benchmarks.floor import f\n")
    (benchmarks / "floor.py").write_text("def f():\n    from benchmarks.speed import g\n")
    (package / "evaluator" / "timing.py").write_text("from benchmarks import floor\n")
    graph = import_graph(package, benchmarks)
    assert upward_imports(graph) == ["microcoder.evaluator.judge (evaluator, level 2) imports "
                                     "microcoder.training.trainer (training, level 4)",
                                     "microcoder.evaluator.timing (evaluator, level 2) imports "
                                     "benchmarks.floor (benchmarks, level 7)"]
    assert import_cycles(graph) == [["benchmarks.floor", "benchmarks.speed"], ["microcoder.data.a", "microcoder.data.b"]]
