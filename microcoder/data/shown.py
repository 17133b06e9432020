"""Which stored tests a statement shows: its examples, in whatever literal form it prints them.

A program that prints the shown outputs passes every shown test, so the reward judges
hidden tests first and the amplify stage gives every problem hidden ones. A stored test is
**shown** when each of its parts (each argument of a `call` test, its output; a `stdin`
test's input and output) appears in the statement, in either of two readings:

- as text: the part with whitespace, case and quote style ignored is a substring of the
  statement read the same way (`squash`);
- as a value (`call` parts): the part's JSON value equals a literal the statement writes,
  read as a Python literal or as JSON (`statement_values`): tuples and sets as lists,
  single or double quotes, `None`/`True`/`False` or `null`/`true`/`false`, any spacing.
  MBPP prints its tests as `assert f((1, 2), 3) == (4, 5)`, which the text reading misses.

A false "shown" only asks for more hidden tests; a missed one lets a program that prints
the statement's outputs earn reward, so both readings are generous. Pure: statement text
is data here, parsed with `ast.literal_eval` (literals.py), never run.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from microcoder.data.literals import NotRepresentable, literal
from microcoder.problems import Problem, TestCase

MAX_LITERAL_CHARS = 20_000
"""A bracketed span longer than this is not parsed (a statement's examples are shorter)."""


def squash(text: str) -> str:
    """Text as compared for "appears in the statement": HTML entities decoded, lowercase,
    `'` as `"`, no whitespace."""
    return "".join(html.unescape(text).lower().replace("'", '"').split())


def canonical(value: Any) -> str | None:
    """One spelling per value: tuples and lists alike, dict keys sorted, a float that is a
    whole number as that int; None for what has no JSON form."""
    def plain(item: Any) -> Any:
        if isinstance(item, (list, tuple)):
            return [plain(element) for element in item]
        if isinstance(item, (set, frozenset)):
            return sorted((plain(element) for element in item), key=lambda element: json.dumps(element))
        if isinstance(item, dict):
            return {str(key): plain(element) for key, element in item.items()}
        if isinstance(item, float) and item.is_integer() and abs(item) < 2**53:
            return int(item)
        if item is None or isinstance(item, (bool, int, float, str)):
            return item
        raise TypeError(type(item).__name__)

    try:
        return json.dumps(plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _bracket_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every balanced (), [] or {} span of `text`, outermost first at each
    start. One pass with a stack: a closing bracket that does not match the innermost open
    one drops the open ones down to its match (prose like "(see [1)" ends nothing)."""
    closing = {")": "(", "]": "[", "}": "{"}
    stack: list[tuple[str, int]] = []
    spans = []
    for index, char in enumerate(text):
        if char in "([{":
            stack.append((char, index))
        elif char in closing:
            for depth in range(len(stack) - 1, -1, -1):
                if stack[depth][0] == closing[char]:
                    spans.append((stack[depth][1], index + 1))
                    del stack[depth:]
                    break
    return sorted(spans, key=lambda span: (span[0], -span[1]))


def _values_within(value: Any, found: set[str]) -> None:
    """Add the canonical form of `value` and of every value nested in it."""
    form = canonical(value)
    if form is not None:
        found.add(form)
    if isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            _values_within(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _values_within(item, found)


_SCALARS = re.compile(r"""(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])|'[^'\n]*'|"[^"\n]*"|"""
                      r"""\b(?:None|True|False|null|true|false)\b""")


def statement_values(statement: str) -> set[str]:
    """The canonical forms (`canonical`) of every literal the statement writes: each
    bracketed span that parses as a Python literal (JSON's null/true/false accepted) and
    every value nested in it, and each number, quoted string and None/True/False/null
    word. Pure."""
    text = html.unescape(statement)
    found: set[str] = set()
    parsed_until = -1
    for start, end in _bracket_spans(text):
        if end <= parsed_until or end - start > MAX_LITERAL_CHARS:
            continue  # inside a span already read whole
        try:
            value = literal(text[start:end])
        except NotRepresentable:
            continue
        _values_within(value, found)
        parsed_until = end
    for match in _SCALARS.finditer(text):
        try:
            _values_within(literal(match.group(0)), found)
        except NotRepresentable:
            continue
    return found


def _value_shown(part: str, values: set[str]) -> bool:
    try:
        form = canonical(json.loads(part))
    except (json.JSONDecodeError, RecursionError):
        return False
    return form is not None and form in values


def shown_in_statement(problem: Problem, test: TestCase, statement: str | None = None,
                       values: set[str] | None = None) -> bool:
    """Whether every part of the test (each argument and the output of a `call` test, the
    input and output of a `stdin` one) appears in the statement, as text (`squash`) or, for
    `call`, as a value (`statement_values`). `statement` and `values` may be given
    precomputed. Pure."""
    statement = squash(problem.prompt) if statement is None else statement
    if problem.kind == "call":
        values = statement_values(problem.prompt) if values is None else values
        parts = [line for line in test.input.split("\n") if line.strip()] + [test.output]
        return all(not squash(part) or squash(part) in statement or _value_shown(part, values) for part in parts)
    return all(squash(part) in statement for part in (test.input, test.output) if squash(part))


def mark_shown(problem: Problem) -> Problem:
    """The problem with each stored test's `shown` set from its statement."""
    statement = squash(problem.prompt)
    values = statement_values(problem.prompt) if problem.kind == "call" else set()
    tests = [test.model_copy(update={"shown": shown_in_statement(problem, test, statement, values)})
             for test in problem.tests]
    return problem.model_copy(update={"tests": tests})
