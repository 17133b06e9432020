"""Reading values and signatures out of dataset text without running it.

Everything here parses with `ast` and `ast.literal_eval`; nothing from a dataset is
executed in our process. The loaders use these helpers to turn LeetCode-style argument
strings (`n = 7, queries = [[0,5]]`), Python literals and starter signatures into the
canonical JSON lines of a `call` test.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any


class NotRepresentable(ValueError):
    """A value, argument list or signature that has no canonical JSON form."""


# LeetCode writes JSON spellings inside Python-looking argument lists.
_JSON_NAMES = {"null": None, "true": True, "false": False, "None": None, "True": True, "False": False}


class _JsonNamesToConstants(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in _JSON_NAMES:
            return ast.copy_location(ast.Constant(_JSON_NAMES[node.id]), node)
        return node


def literal(text: str) -> Any:
    """Parse one Python literal, also accepting JSON's `null`/`true`/`false`.
    Raises NotRepresentable when the text is not a literal."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
        return ast.literal_eval(_JsonNamesToConstants().visit(tree))
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as error:
        raise NotRepresentable(f"not a literal ({type(error).__name__}): {text[:80]!r}") from None


def to_json_value(value: Any) -> Any:
    """Return `value` as plain JSON data: tuples become lists. Raises NotRepresentable for
    what JSON cannot hold without loss: sets, non-string dict keys, nan/inf, bytes, objects."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise NotRepresentable(f"float {value!r} has no JSON form")
        return value
    if isinstance(value, (list, tuple)):
        return [to_json_value(item) for item in value]
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise NotRepresentable("dict with non-string keys has no lossless JSON form")
        return {key: to_json_value(item) for key, item in value.items()}
    raise NotRepresentable(f"{type(value).__name__} has no JSON form")


def dumps(value: Any) -> str:
    """Canonical one-line JSON for a test value (no NaN/Infinity)."""
    return json.dumps(to_json_value(value), ensure_ascii=False, allow_nan=False)


def call_input(arguments: list[Any]) -> str:
    """The canonical `input` of a call test: one JSON value per line."""
    return "\n".join(dumps(argument) for argument in arguments)


@dataclass
class Signature:
    """A function's name and parameters (without `self`), read from source with `ast`."""

    name: str
    parameters: list[str]
    annotations: dict[str, str] = field(default_factory=dict)
    """Parameter name -> annotation source text, for annotated parameters."""
    returns: str | None = None
    """Return annotation source text, if any."""
    class_name: str | None = None
    """The enclosing class, for a method."""


def _parse_incomplete(source: str) -> ast.Module:
    """Parse a starter like `class Solution:\\n    def f(self, x):\\n        ` whose last
    def has no body, by giving it `pass` at the right indentation."""
    text = source.replace("\t", "    ").rstrip()
    try:
        return ast.parse(text)
    except SyntaxError:
        pass
    lines = text.split("\n")
    def_indents = [len(line) - len(line.lstrip()) for line in lines if line.lstrip().startswith("def ")]
    indent = (def_indents[-1] if def_indents else 0) + 4
    try:
        return ast.parse(text + "\n" + " " * indent + "pass")
    except SyntaxError as error:
        raise NotRepresentable(f"starter code does not parse: {error.msg} (line {error.lineno})") from None


def find_signature(source: str, name: str | None = None) -> Signature:
    """The signature of function `name` in `source` (a starter or a full solution); with
    no name, of the last function defined at the top level or in a top-level class."""
    module = _parse_incomplete(source)
    candidates: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str | None]] = []
    for node in module.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            candidates.append((node, None))
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("__"):
                    candidates.append((item, node.name))
    if name is not None:
        candidates = [candidate for candidate in candidates if candidate[0].name == name]
    if not candidates:
        raise NotRepresentable(f"no function {name or ''} defined".replace("  ", " "))
    function, class_name = candidates[-1]
    arguments = function.args
    if arguments.vararg or arguments.kwarg or arguments.kwonlyargs:
        raise NotRepresentable(f"{function.name} takes *args, **kwargs or keyword-only arguments")
    positional = arguments.posonlyargs + arguments.args
    if class_name is not None and positional and positional[0].arg in ("self", "cls"):
        positional = positional[1:]
    annotations = {a.arg: ast.unparse(a.annotation) for a in positional if a.annotation is not None}
    returns = ast.unparse(function.returns) if function.returns is not None else None
    return Signature(function.name, [a.arg for a in positional], annotations, returns, class_name)


def keyword_arguments(text: str, parameters: list[str]) -> list[Any]:
    """Parse LeetCode's `a = 1, b = [2,null]` into positional values in signature order.
    Plain positional values are accepted too. Raises NotRepresentable on anything else."""
    stripped = text.strip()
    if stripped.startswith("{"):  # some rows give a JSON object of name -> value
        try:
            mapping = literal(stripped)
        except NotRepresentable:
            mapping = None
        if isinstance(mapping, dict) and set(mapping) == set(parameters):
            return [mapping[name] for name in parameters]
    try:
        call = ast.parse(f"_f({stripped})", mode="eval").body
    except SyntaxError as error:
        raise NotRepresentable(f"arguments do not parse: {error.msg}: {text[:80]!r}") from None
    if not isinstance(call, ast.Call) or any(isinstance(arg, ast.Starred) for arg in call.args):
        raise NotRepresentable(f"arguments do not parse: {text[:80]!r}")
    values: dict[str, Any] = {}
    if len(call.args) > len(parameters):
        raise NotRepresentable(f"{len(call.args)} positional values for {len(parameters)} parameters")
    keywords: list[tuple[str | None, ast.expr]] = [(kw.arg, kw.value) for kw in call.keywords]
    names = [name for name, _ in keywords]
    if (
        not call.args
        and len(keywords) == len(parameters)
        and set(names) != set(parameters)
        and None not in names
        and len(set(names)) == len(names)
    ):
        # The statement renamed the parameters (`start` vs `startGene`); all are given,
        # in order, so read them positionally.
        keywords = list(zip(parameters, [node for _, node in keywords]))
    nodes = list(zip(parameters, call.args)) + keywords
    for name, node in nodes:
        if name is None or name not in parameters:
            raise NotRepresentable(f"argument {name!r} is not a parameter of {parameters}")
        if name in values:
            raise NotRepresentable(f"argument {name!r} given twice")
        try:
            values[name] = ast.literal_eval(_JsonNamesToConstants().visit(node))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise NotRepresentable(f"argument {name!r} is not a literal: {ast.unparse(node)[:80]!r}") from None
    missing = [name for name in parameters if name not in values]
    if missing:
        raise NotRepresentable(f"missing arguments {missing}")
    return [values[name] for name in parameters]


_JSON_TYPES_BY_ANNOTATION: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "bool": (bool,),
    "list": (list,),
    "List": (list,),
}


def matches_annotation(value: Any, annotation: str | None) -> bool:
    """A shallow check that a decoded JSON value fits a simple annotation (`int`, `str`,
    `List[...]` ...). Unknown or missing annotations always match."""
    if annotation is None:
        return True
    base = re.split(r"[\[\s]", annotation.strip(), maxsplit=1)[0]
    types = _JSON_TYPES_BY_ANNOTATION.get(base)
    if types is None:
        return True
    if isinstance(value, bool) and bool not in types:
        return False  # JSON true is not an int, whatever Python says
    return isinstance(value, types)


_LIST_OF = re.compile(r"(?:List|list)\s*\[\s*(.*)\]")


def floats_as_annotated(value: Any, annotation: str | None) -> Any:
    """`value` with its ints written as floats where the annotation says float (`float`,
    `Optional[float]`, `List[float]`, `List[List[float]]` ...): the answer 2 of a function
    returning float is 2.0, so that the judge's tolerance for expected floats applies to it
    (an expected int is met only by an exactly equal float). Ints beyond 2**53 stay ints,
    as a float would round them."""
    if annotation is None:
        return value
    annotation = annotation.strip()
    if annotation in ("float", "Optional[float]"):
        if type(value) is int and abs(value) <= 2**53:
            return float(value)
        return value
    inner = _LIST_OF.fullmatch(annotation)
    if inner and isinstance(value, list):
        return [floats_as_annotated(item, inner.group(1)) for item in value]
    return value


# LeetCode's serialisations of linked lists and binary trees, as plain lists; used to
# normalise expected outputs the same way the adapter prelude serialises results.
def canonical_tree_values(values: list[Any] | None) -> list[Any]:
    """Rebuild a level-order tree list as LeetCode serialises it (trailing nulls dropped,
    no entries under missing nodes), so that equal trees give equal lists."""
    if not values:
        return []
    if values[0] is None:
        return []
    # Build the tree as index-linked nodes: node = [val, left, right].
    root: list[Any] = [values[0], None, None]
    queue, index = [root], 1
    head = 0
    while head < len(queue):
        node = queue[head]
        head += 1
        for side in (1, 2):
            if index < len(values) and values[index] is not None:
                child: list[Any] = [values[index], None, None]
                node[side] = child
                queue.append(child)
            index += 1
    serialised: list[Any] = []
    order: list[Any] = [root]
    position = 0
    while position < len(order):
        node = order[position]
        position += 1
        if node is None:
            serialised.append(None)
            continue
        serialised.append(node[0])
        order.extend((node[1], node[2]))
    while serialised and serialised[-1] is None:
        serialised.pop()
    return serialised
