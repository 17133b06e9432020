"""Another library's private parts are touched in one room each (the style guide's principle 14).

Every override of a dependency's internals sits in its hooks module, which states the
release it was read against and refuses another: TRL's in microcoder/training/trl_hooks.py,
uvicorn's in microcoder/service/uvicorn_hooks.py, vLLM's in the policy room's vllm_hooks.py.
Every other file of the product, its benchmarks and scripts is read with `ast` (code only:
comments and docstrings may name what the hooks do) for the dependency's private names: an
underscore attribute of its classes we meet, a name we know to be internal, an import from
one of its internal modules, or a class of ours built on one of its classes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
READ = [path for folder in ("microcoder", "benchmarks", "scripts") for path in sorted((REPO / folder).rglob("*.py"))]


def underscore_names(*classes) -> set[str]:
    """The single-underscore methods and properties the classes (and their bases of the same
    library) define (plain class attributes such as a `_name` string are left out: a name
    that generic is ours as often as theirs)."""
    library = {cls.__module__.split(".")[0] for cls in classes}
    return {name for cls in classes for base in cls.__mro__ if base.__module__.split(".")[0] in library
            for name, value in vars(base).items() if name.startswith("_") and not name.startswith("__")
            and (callable(value) or isinstance(value, (property, staticmethod, classmethod)))}


def trl_names() -> set[str]:
    trl = pytest.importorskip("trl")
    from trl.generation.vllm_generation import VLLMGeneration

    # instance attributes TRL sets in __init__, and its internal classes and helpers
    return underscore_names(trl.GRPOTrainer, VLLMGeneration) | {
        "_metrics", "_last_loaded_step", "VLLMGeneration", "add_fused_lm_head"}


def uvicorn_names() -> set[str]:
    uvicorn = pytest.importorskip("uvicorn")
    from uvicorn.protocols.http.h11_impl import H11Protocol

    return underscore_names(uvicorn.Server, H11Protocol) | {
        "H11Protocol", "h11_impl", "capture_signals", "handle_exit", "send_400_response"}


VLLM_NAMES = {"model_runner", "process_weights_after_loading", "quant_method", "UnquantizedEmbeddingMethod",
              "reload_weights", "driver_worker", "model_executor"}
"""vLLM's internals (its worker's model runner, the layers' weight processing, the
worker's reload RPC): not classes we can read without vLLM installed, so named here."""

DEPENDENCIES = {
    "trl": ("microcoder/training/trl_hooks.py", trl_names),
    "uvicorn": ("microcoder/service/uvicorn_hooks.py", uvicorn_names),
    "vllm": ("microcoder/policy/vllm_hooks.py", lambda: VLLM_NAMES),
}


def private_uses(path: Path, library: str, names: set[str]) -> list[str]:
    """'file:line name' for each use of `library`'s private parts in the code of `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    imported = set()  # names bound to the library's objects by an import
    hooks_module = Path(DEPENDENCIES[library][0]).stem
    found = []
    for node in ast.walk(tree):
        used = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == library:
            imported |= {alias.asname or alias.name for alias in node.names}
            if "." in node.module:  # one of its modules below the top: internal
                used.append(node.module)
            used += [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            used += [alias.name for alias in node.names if alias.name.startswith(library + ".")]
        elif isinstance(node, ast.Attribute):
            if not (isinstance(node.value, ast.Name) and node.value.id == hooks_module):
                used.append(node.attr)  # `vllm_hooks.reload_weights` is a call into the room, not past it
        elif isinstance(node, ast.Name):
            used.append(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            used.append(node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            used.append(node.value)  # a method called by name (an RPC)
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                root = base
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and (root.id == library or root.id in imported):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} class {node.name} on {ast.unparse(base)}")
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            continue  # a variable of ours: the library's underscore names are its attributes
        for name in used:
            if name in names or (name.startswith(library + ".") and name != library):
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {name}")
    return sorted(set(found))


def uses_outside_hooks(library: str) -> list[str]:
    hooks, names = DEPENDENCIES[library]
    names = names()
    return [use for path in READ if path.relative_to(REPO).as_posix() != hooks
            for use in private_uses(path, library, names)]


def test_trls_private_names_appear_only_in_its_hooks_module():
    assert uses_outside_hooks("trl") == []


def test_uvicorns_private_names_appear_only_in_its_hooks_module():
    assert uses_outside_hooks("uvicorn") == []


def test_vllms_private_names_appear_only_in_its_hooks_module():
    assert uses_outside_hooks("vllm") == []


def test_each_hooks_module_states_and_checks_its_release():
    for library, (hooks, _) in DEPENDENCIES.items():
        text = (REPO / hooks).read_text(encoding="utf-8")
        assert f"{library.upper()}_VERSION = " in text and "__version__" in text, hooks


def test_the_check_finds_each_kind_of_private_use(tmp_path):
    # A made-up file with one of each: it must be found five times, and a public use not at all.
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import uvicorn\n"
        "from uvicorn.protocols.http.h11_impl import H11Protocol\n"   # an internal module, an internal class
        "class Ours(uvicorn.Server):\n"                               # built on its class
        "    def handle_exit(self, sig, frame):\n"                    # overriding an internal
        "        self._serve()\n"                                     # an underscore method
        "config = uvicorn.Config(app=None)\n")                        # public: not found
    global REPO
    real, REPO = REPO, tmp_path
    try:
        found = private_uses(sample, "uvicorn", uvicorn_names())
    finally:
        REPO = real
    assert found == ["sample.py:2 H11Protocol", "sample.py:2 uvicorn.protocols.http.h11_impl",
                     "sample.py:3 class Ours on uvicorn.Server", "sample.py:4 handle_exit", "sample.py:5 _serve"]
