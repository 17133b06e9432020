"""Inputs at the edges of a problem's input space, beside the random ones.

Random draws seldom land where off-by-one bugs live: a list at its largest or smallest
stated size, every item equal, a value at the end of its range, two arguments tied, a
shift equal to the size it wraps around, a date on February 29th. `boundary_inputs` builds
such inputs from the input space the amplify stage reads (the statement's constraints, the
stored inputs' domains and relations, amplify.py's `InputSpace`), one change at a time on
a stored input, and keeps each candidate only when every argument lies in its domain
(`fits`: type, length, range, alphabet, order, distinctness, permutation, shape) and the
whole input satisfies every stated bound and observed relation (`InputSpace.admits`).

Each input carries its kind (`KINDS`); the amplify stage records how many tests of each
kind a problem got (`metadata.amplified.boundary`) and the datasheet counts them per
source. Pure: the same space, stored inputs and seed give the same inputs.
"""

from __future__ import annotations

import calendar
import datetime
import hashlib
import json
import random
import re
from collections.abc import Callable
from typing import Any

from microcoder.data.constraints import Domain, number_shape

KINDS = ("min size", "max size", "empty", "min value", "max value", "zero", "equal elements", "tie",
         "range end", "shift = size", "order", "leap-year date")
"""The kinds of boundary input, in the order the datasheet lists them."""


# ---------------------------------------------------------------- is a value in its domain


def fits(domain: Domain, value: Any) -> bool:
    """Whether `value` lies in `domain`: its type, range, length, alphabet or shape, and for
    lists their order, distinctness, permutation and rectangular rows. Pure."""
    kind = domain.kind
    longest = max(domain.length_high, domain.length_low)
    if kind == "fixed":
        return value in domain.seen
    if kind == "bool":
        return isinstance(value, bool)
    if kind in ("int", "float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if kind == "int" and isinstance(value, float):
            return False
        return (domain.low is None or value >= domain.low) and (domain.high is None or value <= domain.high)
    if kind == "str" and domain.number_shape is not None:
        return isinstance(value, str) and number_shape(value) == domain.number_shape and all(
            fits(Domain("int", low=domain.low, high=domain.high), int(number)) for number in re.findall(r"-?\d+", value))
    if kind == "str":
        if not isinstance(value, str) or not domain.length_low <= len(value) <= longest:
            return False
        if domain.template is not None:
            return len(value) == len(domain.template) and all(char in chars
                                                              for char, chars in zip(value, domain.template))
        if domain.palindrome and value != value[::-1]:
            return False
        return all(char in domain.alphabet for char in value)
    if kind == "list":
        if not isinstance(value, list) or not domain.length_low <= len(value) <= longest:
            return False
        if domain.item is not None and not all(fits(domain.item, item) for item in value):
            return False
        if domain.is_sorted and value != sorted(value):
            return False
        if domain.distinct and len({json.dumps(item) for item in value}) != len(value):
            return False
        if domain.permutation_base is not None and sorted(value) != list(range(domain.permutation_base,
                                                                                 domain.permutation_base + len(value))):
            return False
        if domain.rectangular and len({len(row) for row in value}) > 1:
            return False
        return True
    return False


# ---------------------------------------------------------------- edge values of one argument


def _number_edges(domain: Domain) -> list[tuple[str, Any]]:
    if domain.low is None or domain.high is None:
        return []
    cast = int if domain.kind == "int" else float
    low, high = cast(domain.low), cast(domain.high)
    edges = [("min value", low), ("max value", high)]
    if domain.kind == "int":
        edges += [("min value", low + 1), ("max value", high - 1)]
    if low <= 0 <= high:
        edges.append(("zero", cast(0)))
    return edges


def _item(item: Domain, rng: random.Random) -> Any:
    """One item of a list: a number in its range, a string over its alphabet, a bool; None
    for what this module does not draw (nested lists are drawn row by row)."""
    if item.kind == "int" and item.low is not None and item.high is not None:
        return rng.randint(int(item.low), int(item.high))
    if item.kind == "float" and item.low is not None and item.high is not None:
        return round(rng.uniform(item.low, item.high), 2)
    if item.kind == "str" and item.template is None:
        length = rng.randint(item.length_low, max(item.length_low, item.length_high))
        return "".join(rng.choice(item.alphabet or "a") for _ in range(length))
    if item.kind == "bool":
        return rng.random() < 0.5
    return None


def _items(domain: Domain, length: int, rng: random.Random) -> list[Any] | None:
    """`length` items of the list domain, drawn (distinct when it must be), sorted when it
    is; None when they cannot be drawn."""
    if domain.permutation_base is not None:
        values = list(range(domain.permutation_base, domain.permutation_base + length))
        rng.shuffle(values)
        return values
    if domain.item is None:
        return None
    values: list[Any] = []
    for _ in range(length * 6):
        value = _item(domain.item, rng)
        if value is None:
            return None
        if domain.distinct and value in values:
            continue
        values.append(value)
        if len(values) == length:
            break
    if len(values) != length:
        return None
    return sorted(values) if domain.is_sorted else values


def _list_edges(domain: Domain, rng: random.Random) -> list[tuple[str, Any]]:
    item = domain.item
    low, high = domain.length_low, max(domain.length_high, domain.length_low)
    edges: list[tuple[str, Any]] = []
    if low == 0:
        edges.append(("empty", []))
    for kind, length in (("min size", max(1, low)), ("max size", high)):
        if item is not None and item.kind == "list" and domain.rectangular:
            row_low, row_high = item.length_low, max(item.length_high, item.length_low)
            width = max(1, row_low) if kind == "min size" else row_high
            row = Domain("list", length_low=width, length_high=width, item=item.item, is_sorted=item.is_sorted,
                         distinct=item.distinct, permutation_base=item.permutation_base)
            rows = [_items(row, width, rng) for _ in range(length)]
            if all(r is not None for r in rows):
                edges.append((kind, rows))
                if item.item is not None and item.item.kind == "int":
                    for value_kind, value in _number_edges(item.item)[:2]:
                        edges.append((value_kind, [[value] * width for _ in range(length)]))
            continue
        values = _items(domain, length, rng)
        if values is not None:
            edges.append((kind, values))
    if item is not None and item.kind in ("int", "float", "str") and not domain.distinct:
        sample = _items(domain, 1, rng)
        for length in sorted({2, high}):
            if length >= 2 and sample:
                edges.append(("equal elements", sample * length))
        if item.kind in ("int", "float"):
            for kind, value in _number_edges(item):
                edges.append((kind, [value] * max(1, low, min(high, 3))))
                edges.append((kind, [value] * high))
    if not domain.is_sorted and high >= 2:
        values = _items(domain, high, rng)
        if values is not None and all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in values):
            edges.append(("order", sorted(values)))
            edges.append(("order", sorted(values, reverse=True)))
    return edges


def _string_edges(domain: Domain, statement: str) -> list[tuple[str, Any]]:
    if domain.template is not None:
        return _date_edges(domain, statement)
    if domain.number_shape is not None:
        return [] if domain.low is None or domain.high is None else [
            (kind, domain.number_shape.replace("#", str(int(number))))
            for kind, number in (("min value", domain.low), ("max value", domain.high), ("zero", 0))]
    alphabet = domain.alphabet or "a"
    low, high = domain.length_low, max(domain.length_high, domain.length_low)
    edges: list[tuple[str, Any]] = []
    if low == 0:
        edges.append(("empty", ""))
    cycle = lambda length: "".join(alphabet[index % len(alphabet)] for index in range(length))  # noqa: E731
    edges += [("min size", alphabet[0] * max(1, low)), ("min size", cycle(max(1, low))),
              ("max size", cycle(high)), ("max size", cycle(high)[::-1])]
    edges += [("equal elements", alphabet[0] * high), ("equal elements", alphabet[-1] * max(2, low))]
    if domain.palindrome:
        half = cycle((high + 1) // 2)
        edges.append(("max size", half + half[: high // 2][::-1]))
    return edges


_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_YEARS = re.compile(r"between (?:the )?years? (\d{4}) and (\d{4})", re.IGNORECASE)


def _date_edges(domain: Domain, statement: str) -> list[tuple[str, Any]]:
    """YYYY-MM-DD strings around February 29th and the year's ends, in the years the
    statement names ("between the years 1971 and 2100"), else the stored ones'."""
    matches = [_DATE.match(value) for value in domain.seen if isinstance(value, str)]
    if not matches or not all(matches):
        return []
    stated = _YEARS.search(statement)
    years = [int(match.group(1)) for match in matches]
    first, last = (int(stated.group(1)), int(stated.group(2))) if stated else (min(years), max(years))
    leap = [year for year in range(first, last + 1) if calendar.isleap(year)][:2]
    picked = sorted({year for year in (first, last, 1900, 2000, 2100, *years) if first <= year <= last} | set(leap))
    edges = []
    for year in picked:
        days = [(1, 1), (2, 28), (3, 1), (12, 31)] + ([(2, 29)] if calendar.isleap(year) else [])
        edges += [("leap-year date", datetime.date(year, month, day).isoformat()) for month, day in days]
    return edges


def edge_values(domain: Domain, statement: str, rng: random.Random) -> list[tuple[str, Any]]:
    """(kind, value) at the edges of one argument's domain, each inside it (`fits`)."""
    if domain.kind in ("int", "float"):
        edges = _number_edges(domain)
    elif domain.kind == "list":
        edges = _list_edges(domain, rng)
    elif domain.kind == "str":
        edges = _string_edges(domain, statement)
    else:
        edges = []
    if domain.template is not None and edges and edges[0][0] == "leap-year date":
        return edges  # a date's validity is the calendar's, not the stored digits'
    return [(kind, value) for kind, value in edges if fits(domain, value)]


# ---------------------------------------------------------------- whole inputs


def _size(value: Any) -> list[int]:
    """The sizes a shift may wrap around: a list's or string's length, a grid's cell count."""
    if isinstance(value, (list, str)):
        sizes = [len(value)]
        if value and all(isinstance(row, list) for row in value):
            sizes.append(sum(len(row) for row in value))
        return sizes
    return []


def _relational(arguments: list[Any], domains: list[Domain]) -> list[tuple[str, list[Any]]]:
    """Ties between int arguments and int arguments set to a list's size (and one past it,
    twice it): a shift by the whole size, a window as long as the list, a range's end."""
    ints = [p for p, d in enumerate(domains) if d.kind == "int" and isinstance(arguments[p], int)
            and not isinstance(arguments[p], bool)]
    found = []
    for target in ints:
        for origin in ints:
            if origin != target:
                changed = list(arguments)
                changed[target] = arguments[origin]
                found.append(("tie", changed))
        for position, value in enumerate(arguments):
            for size in _size(value) if position != target else []:
                for kind, number in (("shift = size", size), ("shift = size", 2 * size), ("range end", size - 1),
                                     ("range end", size + 1)):
                    changed = list(arguments)
                    changed[target] = number
                    found.append((kind, changed))
    return found


def _candidates(stored: list[list[Any]], domains: list[Domain], statement: str, rng: random.Random,
                promised: bool) -> list[tuple[str, list[Any]]]:
    """Boundary candidates: each stored input with one argument at an edge, every argument at
    its min (max) edge at once, and the relational ones; under a promise in words, only
    stored inputs with a list's order sorted or reversed (what keeps its multiset)."""
    found: list[tuple[str, list[Any]]] = []
    if promised:
        for arguments in stored:
            for position, value in enumerate(arguments):
                if isinstance(value, list) and value and all(isinstance(v, (int, str)) and not isinstance(v, bool)
                                                             for v in value) and len({type(v) for v in value}) == 1:
                    for ordered in (sorted(value), sorted(value, reverse=True)):
                        changed = json.loads(json.dumps(arguments))
                        changed[position] = ordered
                        found.append(("order", changed))
        return found
    edges = [edge_values(domain, statement, rng) for domain in domains]
    for kind_wanted in ("min", "max"):
        whole = []
        for position, options in enumerate(edges):
            picked = [value for kind, value in options if kind.startswith(kind_wanted) or
                      (kind_wanted == "min" and kind in ("empty", "zero"))]
            whole.append(picked[0] if picked else stored[0][position])
        sized = any(domain.kind in ("list", "str") for domain in domains)
        found.append((f"{kind_wanted} {'size' if sized else 'value'}", whole))
    for arguments in stored[:3]:
        for position, options in enumerate(edges):
            for kind, value in options:
                changed = json.loads(json.dumps(arguments))
                changed[position] = value
                found.append((kind, changed))
        found += _relational(arguments, domains)
    if len(domains) == 2 and all(d.template is not None for d in domains):  # two dates: across a leap day
        days = [value for kind, value in edges[0] if kind == "leap-year date"]
        found += [("leap-year date", [first, second]) for first in days for second in days if first < second]
    return found


def boundary_inputs(domains: list[Domain], admits: Callable[[list[Any]], bool], stored: list[list[Any]],
                    statement: str, promised: bool, count: int, seed: int, problem_id: str,
                    max_input_chars: int) -> list[tuple[str, list[Any]]]:
    """Up to `count` distinct (kind, arguments) at the edges of the input space, none a
    stored input, each inside every argument's domain (`fits`; a date's validity is the
    calendar's) and accepted by `admits` (the stated bounds and observed relations,
    amplify.py's `InputSpace.admits`); kinds taken in turn (each kind's candidates shuffled
    with the seed) so that no kind crowds out the others. `promised`: the statement
    promises in words what no bound says, so only reorderings of stored lists are made. Pure: the same arguments give the same inputs
    under any PYTHONHASHSEED."""
    if count <= 0 or not stored:
        return []
    rng = random.Random(int(hashlib.sha256(f"boundary:{seed}:{problem_id}".encode()).hexdigest()[:16], 16))
    seen = {json.dumps(arguments) for arguments in stored}
    by_kind: dict[str, list[list[Any]]] = {}
    for kind, arguments in _candidates(stored, domains, statement, rng, promised):
        key = json.dumps(arguments)
        if key in seen or len(key) > max_input_chars or not admits(arguments):
            continue
        dated = kind == "leap-year date"
        if not all(fits(domain, value) or (dated and domain.template is not None)
                   for domain, value in zip(domains, arguments)):
            continue
        seen.add(key)
        by_kind.setdefault(kind, []).append(arguments)
    for queue in by_kind.values():  # a kind's candidates come in the order they were built: spread them
        rng.shuffle(queue)
    chosen: list[tuple[str, list[Any]]] = []
    queues = [(kind, by_kind[kind]) for kind in KINDS if kind in by_kind]
    while len(chosen) < count and any(queue for _, queue in queues):
        for kind, queue in queues:
            if queue and len(chosen) < count:
                chosen.append((kind, queue.pop(0)))
    return chosen
