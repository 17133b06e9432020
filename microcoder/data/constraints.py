"""What a statement says a valid input is, and what the stored inputs show it to be.

    names = argument_names(problem)                     # ['nums', 'k'] from the starter code
    stated = parse_constraints(problem.prompt, names)   # LeetCode's "Constraints:" lines
    observed = infer_domains(inputs, names)             # types, lengths, ranges, order ...
    relations = infer_relations(inputs, names)          # k <= len(nums), equal lengths ...

The amplify stage (amplify.py) generates inputs inside these and checks each candidate
against every stated bound and observed relation before the reference answers it. All
pure: statement text is data here; a bound's expression is read by a whitelist over
Python's `ast` (names, numbers, + - *, `.length`), never evaluated as code.

Choices of ours:
- A flattened power (`10<sup>9</sup>` read as "109") is taken literally, which only
  narrows an upper bound; when a stored input breaks a bound read that way, the bound is
  read again as a power of ten, and dropped if the stored inputs break that too.
- A property shared by every stored input (sorted, distinct, a permutation, a palindrome,
  `k <= len(nums)`) is taken as a promise of the statement: over-narrow at worst.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from microcoder.problems import Problem

Value = Any
"""A decoded JSON argument."""


# ---------------------------------------------------------------- the signature

_DEF = re.compile(r"def\s+(\w+)\s*\((.*?)\)\s*(?:->[^:]*)?:", re.S)


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, current = [], 0, []
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def argument_names(problem: Problem) -> list[str] | None:
    """The entry point's parameter names from the starter code (or the reference), without
    `self`; None when no signature is found."""
    function = (problem.entry_point or "").rsplit(".", 1)[-1]
    for source in (problem.starter_code, str(problem.metadata.get("reference_solution") or "")):
        for match in _DEF.finditer(source):
            if match.group(1) != function:
                continue
            names = []
            for parameter in _split_top(match.group(2)):
                name = parameter.split(":", 1)[0].split("=", 1)[0].strip().lstrip("*")
                if name and name != "self":
                    names.append(name)
            return names
    return None


# ---------------------------------------------------------------- domains from stored inputs


@dataclass
class Domain:
    """The values one argument (or one level inside it) took in the stored inputs."""

    kind: str
    """'int', 'float', 'bool', 'str', 'list' or 'fixed' (anything else: reuse a stored value)."""
    low: float | None = None
    high: float | None = None
    """Ints and floats: the range to draw from (observed, narrowed or widened by the statement)."""
    length_low: int = 0
    length_high: int = 0
    """Strings and lists: the lengths to draw from."""
    alphabet: str = ""
    """Strings: the characters to draw from."""
    item: Domain | None = None
    """Lists: the domain of their items."""
    is_sorted: bool = False
    distinct: bool = False
    permutation_base: int | None = None
    """A list of ints that is always a permutation of base .. base + len - 1."""
    rectangular: bool = False
    """A list of lists whose rows always have one length."""
    palindrome: bool = False
    template: list[str] | None = None
    """Strings of one shape ("2019-06-29", "?1:4?"): the characters seen at each position.
    Strings are then drawn position by position, keeping separators where they were."""
    seen: list[Value] = field(default_factory=list)
    """Stored values, for 'fixed' and for mutating."""
    number_shape: str | None = None
    """Strings of one shape around their integers ("1+-1i" and "3+4i" are both `#+#i`, see
    `number_shape`), of varying length: drawn as that shape with integers in `low`..`high`."""


def _kind(value: Value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list"
    return "other"


def _template(values: list[str]) -> list[str] | None:
    """Per position, the characters seen there, when every value has one length and a
    character other than a letter or digit somewhere, always at the same place (a date, a
    time, a masked time): the shape carries meaning a free draw would break. Else None."""
    if len(values) < 2 or len({len(value) for value in values}) != 1 or not values[0]:
        return None
    separators = {(index, char) for value in values for index, char in enumerate(value) if not char.isalnum()}
    if not separators or len({index for index, _ in separators}) != len(separators):
        return None
    if any(value[index] != char for value in values for index, char in separators):
        return None
    return ["".join(sorted({value[index] for value in values})) for index in range(len(values[0]))]


_INTEGER = re.compile(r"-?\d+")


def number_shape(value: str) -> str:
    """The string with each integer (a digit run, its minus sign with it) as `#`."""
    return _INTEGER.sub("#", value)


def _number_shape(values: list[str]) -> tuple[str, int, int] | None:
    """(shape, least, greatest integer) when every value has one shape with an integer and
    something else in it ("1+1i", "1+-1i"; not plain numbers, whose digits carry their own
    rules), and the values are not of one length (a `_template` keeps those); else None."""
    if len(values) < 2 or len({len(value) for value in values}) == 1:
        return None
    shapes = {number_shape(value) for value in values}
    if len(shapes) != 1:
        return None
    shape = shapes.pop()
    if "#" not in shape or not shape.replace("#", "") or "##" in shape:  # "1-2": a minus or a separator?
        return None
    numbers = [int(number) for value in values for number in _INTEGER.findall(value)]
    return shape, min(numbers), max(numbers)


def infer_domain(values: list[Value]) -> Domain:
    """The domain of `values` (one argument across the stored tests, or the items of lists)."""
    kinds = {_kind(value) for value in values}
    if kinds == {"int", "float"}:
        kinds = {"float"}
    if len(kinds) != 1 or not values:
        return Domain("fixed", seen=values)
    kind = kinds.pop()
    if kind in ("int", "float"):
        return Domain(kind, low=min(values), high=max(values), seen=values)
    if kind == "bool":
        return Domain("bool", seen=values)
    if kind == "str":
        lengths = [len(value) for value in values]
        alphabet = "".join(sorted(set("".join(values)))) or "a"
        palindrome = any(len(v) >= 2 for v in values) and all(value == value[::-1] for value in values)
        shaped = _number_shape(values)
        if shaped is not None:
            shape, low, high = shaped
            return Domain("str", low=low, high=high, length_low=min(lengths), length_high=max(lengths),
                          alphabet=alphabet, seen=values, number_shape=shape)
        return Domain("str", length_low=min(lengths), length_high=max(lengths), alphabet=alphabet,
                      palindrome=palindrome, seen=values, template=_template(values))
    if kind == "list":
        lengths = [len(value) for value in values]
        items = [item for value in values for item in value]
        item = infer_domain(items) if items else Domain("fixed", seen=[0])
        if item.kind == "fixed":  # items of mixed or opaque types: reuse whole stored lists
            return Domain("fixed", seen=values)
        domain = Domain("list", length_low=min(lengths), length_high=max(lengths), seen=values, item=item)
        long_enough = [value for value in values if len(value) >= 2]
        comparable = long_enough and all(_kind(item) in ("int", "float", "str") for value in long_enough
                                         for item in value) and len({_kind(i) for v in long_enough for i in v}) == 1
        if comparable and any(len(value) >= 3 for value in long_enough):
            domain.is_sorted = all(value == sorted(value) for value in long_enough)
            domain.distinct = all(len(set(value)) == len(value) for value in long_enough)
            if domain.item.kind == "int":
                for base in (0, 1):
                    if all(sorted(value) == list(range(base, base + len(value))) for value in values):
                        domain.permutation_base = base
        if items and all(isinstance(value, list) for value in items):
            domain.rectangular = all(len({len(row) for row in value}) <= 1 for value in values)
        return domain
    return Domain("fixed", seen=values)


def infer_domains(inputs: list[list[Value]]) -> list[Domain]:
    """One domain per argument position from the stored inputs (each a list of arguments)."""
    count = len(inputs[0])
    return [infer_domain([arguments[position] for arguments in inputs]) for position in range(count)]


# ---------------------------------------------------------------- relations between arguments


@dataclass(frozen=True)
class Relation:
    """`left op right` between two measures of the arguments, e.g. ('k', '<=', 'len(nums)')."""

    left: str
    op: str
    right: str

    def holds(self, measures: dict[str, float]) -> bool:
        if self.left not in measures or self.right not in measures:
            return True
        left, right = measures[self.left], measures[self.right]
        return {"<=": left <= right, "<": left < right, "==": left == right}[self.op]

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"


def measures_of(arguments: list[Value], names: list[str]) -> dict[str, float]:
    """Numbers the relations and bounds speak of: each int argument, each string's and
    list's length, each list's largest item (`max(nums)`), the length of its rows."""
    found: dict[str, float] = {}
    for name, value in zip(names, arguments):
        kind = _kind(value)
        if kind == "int":
            found[name] = value
        elif kind in ("str", "list"):
            found[f"len({name})"] = len(value)
            if kind == "list" and value and all(_kind(item) == "int" for item in value):
                found[f"max({name})"] = max(value)
            if kind == "list" and value and all(isinstance(item, (list, str)) for item in value):
                found[f"len({name}[0])"] = len(value[0])
    return found


def infer_relations(inputs: list[list[Value]], names: list[str]) -> list[Relation]:
    """Relations between measures (`measures_of`) that every stored input satisfies, among:
    an int at most (or below) a length or another int (three stored inputs or more), two
    equal lengths, a list's items at most (or below) its length. Needs two stored inputs."""
    if len(inputs) < 2:
        return []
    all_measures = [measures_of(arguments, names) for arguments in inputs]
    keys = sorted(set.intersection(*(set(m) for m in all_measures)))
    relations = []
    for left in keys:
        for right in keys:
            if left == right:
                continue
            pairs = [(m[left], m[right]) for m in all_measures]
            if all(a == b for a, b in pairs):
                if left < right:
                    relations.append(Relation(left, "==", right))
                continue
            if left.startswith("len(") and right.startswith("len(") or left.startswith("max("):
                if not (left.startswith("max(") and right == f"len({left[4:-1]})"):
                    continue
            if right.startswith("max("):
                continue
            if len(inputs) < 3 and (left.startswith("max(") or not (left.startswith("len(") or right.startswith("len("))):
                continue  # two examples order two numbers by chance half the time
            if all(a < b for a, b in pairs):
                relations.append(Relation(left, "<", right))
            elif all(a <= b for a, b in pairs):
                relations.append(Relation(left, "<=", right))
    return relations


# ---------------------------------------------------------------- the statement's constraints

_POWER = re.compile(r"(\d+)\s*\*?\s*10\s*\^\s*(\d+)|10\s*\^\s*(\d+)")


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    negative = text.startswith("-")
    body = text.lstrip("-").strip()
    match = _POWER.fullmatch(body)
    if match:
        value = int(match.group(1)) * 10 ** int(match.group(2)) if match.group(1) else 10 ** int(match.group(3))
    elif re.fullmatch(r"\d+(\.\d+)?", body):
        value = float(body) if "." in body else int(body)
    else:
        return None
    return -value if negative else value


def _as_power(value: float) -> float | None:
    """109 -> 10**9, 105 -> 10**5: a superscript flattened into digits; None if not one."""
    text = str(abs(int(value))) if float(value).is_integer() else ""
    if re.fullmatch(r"10[1-9]|101[0-8]", text):
        power = 10 ** int(text[2:])
        return -power if value < 0 else power
    match = re.fullmatch(r"([1-9])10([1-9])", text)  # 2 * 10<sup>5</sup> -> "2105"
    if match:
        power = int(match.group(1)) * 10 ** int(match.group(2))
        return -power if value < 0 else power
    return None


@dataclass
class Bound:
    """`low <= measure <= high` for one measure (`measures_of` names, or `nums[i]`-style
    items: `item(nums)`, `item(grid[0])` ...). A side may be a number or an expression over
    measures (`len(nums)`, `n - 1`)."""

    measure: str
    low: float | str | None = None
    high: float | str | None = None
    line: str = ""


_TARGET = re.compile(r"^(\w+)((?:\[\w+\])*)(\.length)?$")


def _measure(target: str, names: list[str], aliases: dict[str, str]) -> str | None:
    """`nums.length` -> len(nums); `nums[i]` -> item(nums); `grid[i][j]` -> item2(grid);
    `words[i].length` -> itemlen(words); `k` -> k; an alias (`n == nums.length`) resolved."""
    target = target.replace(" ", "")
    if target in aliases:
        return aliases[target]
    match = _TARGET.match(target)
    if not match or match.group(1) not in names:
        return None
    name, index, length = match.group(1), match.group(2), bool(match.group(3))
    depth = index.count("[")
    if depth == 0:
        return f"len({name})" if length else name
    if depth == 1:
        return f"itemlen({name})" if length else f"item({name})"
    if depth == 2 and not length:
        return f"item2({name})"
    return None


def _side(text: str, names: list[str], aliases: dict[str, str]) -> float | str | None:
    number = _number(text)
    if number is not None:
        return number
    expression = re.sub(r"([\w\[\]]+(?:\.length)?)", lambda m: _measure(m.group(1), names, aliases) or m.group(1), text)
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in names and node.id not in ("len", "max"):
            return None
        if not isinstance(node, (ast.Expression, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Constant, ast.Name,
                                 ast.Call, ast.Load, ast.UnaryOp, ast.USub, ast.Subscript)):
            return None
    return expression


def _targets(part: str, names: list[str], aliases: dict[str, str]) -> list[str] | None:
    """The measures a chain part names (`m, n`, `n == nums.length`), or None when it names none."""
    measures = [_measure(target, names, aliases) for target in re.split(r"\s*(?:,|==)\s*", part.strip())]
    return measures if measures and all(measures) else None


def _shift(side: float | str, strict: bool, up: bool) -> float | str:
    """A strict bound as an inclusive one (integers: +-1)."""
    if not strict:
        return side
    if isinstance(side, str):
        return f"({side}) {'+' if up else '-'} 1"
    return side + (1 if up else -1) if float(side).is_integer() else side


def _chain_bounds(line: str, names: list[str], aliases: dict[str, str]) -> list[Bound]:
    """Bounds from one chain `a <= x <= b`, `1 <= left <= right <= n`, `0 <= k < nums.length`:
    each part between two comparisons bounds the part after it from below and the part before
    it from above; the chain's numeric ends bound every measure inside it."""
    pieces = re.split(r"\s*(<=|<)\s*", line)
    if len(pieces) < 3 or any(">" in piece for piece in pieces):
        return []
    parts, ops = pieces[0::2], pieces[1::2]
    named = [_targets(part, names, aliases) for part in parts]
    sides = [None if targets else _side(part, names, aliases) for part, targets in zip(parts, named)]
    if any(targets is None and side is None for targets, side in zip(named, sides)):
        return []
    lows: dict[str, list] = {}
    highs: dict[str, list] = {}
    for index, op in enumerate(ops):
        strict = op == "<"
        left, right = index, index + 1
        for measure in named[right] or []:  # left part bounds it from below
            low = sides[left] if named[left] is None else (named[left][0] if len(named[left]) == 1 else None)
            if low is not None:
                lows.setdefault(measure, []).append(_shift(low, strict, up=True))
        for measure in named[left] or []:  # right part bounds it from above
            high = sides[right] if named[right] is None else (named[right][0] if len(named[right]) == 1 else None)
            if high is not None:
                highs.setdefault(measure, []).append(_shift(high, strict, up=False))
    first, last = sides[0], sides[-1]
    for index, targets in enumerate(named):
        for measure in targets or []:
            if isinstance(first, (int, float)) and index > 1:
                lows.setdefault(measure, []).append(_shift(first, ops[0] == "<", up=True))
            if isinstance(last, (int, float)) and index < len(named) - 2:
                highs.setdefault(measure, []).append(_shift(last, ops[-1] == "<", up=False))
    bounds = []
    for measure in sorted(set(lows) | set(highs)):
        for low in lows.get(measure, [None]):
            bounds.append(Bound(measure, low, None, line))
        for high in highs.get(measure, [None]):
            bounds.append(Bound(measure, None, high, line))
    return [bound for bound in bounds if bound.low is not None or bound.high is not None]


def constraint_lines(statement: str) -> list[str]:
    """The lines of the statement's "Constraints:" section (LeetCode's layout), normalised
    (≤ as <=, unicode minus, no trailing period)."""
    match = re.search(r"Constraints\s*:?\s*\n(.*?)(?:\n\s*(?:Follow[- ]?up|Note)\b|\Z)", statement, re.S | re.I)
    if not match:
        return []
    lines = []
    for raw in match.group(1).splitlines():
        line = raw.strip().replace("≤", "<=").replace("≥", ">=").replace("−", "-").replace("\u00a0", " ")
        line = line.replace("&lt;", "<").replace("&gt;", ">").rstrip(".").strip()
        if line:
            lines.append(line)
    return lines


def parse_constraints(statement: str, names: list[str]) -> tuple[list[Bound], dict[str, Any]]:
    """(bounds, facts) from the statement's constraints. Facts: `alphabet` {name: chars}
    ("s consists of lowercase English letters", "s[i] is either '0' or '1'"), `distinct` and
    `sorted` {name: True} ("All the values of nums are unique", "sorted in non-decreasing
    order"). Lines of other shapes are left alone (the stored inputs still bound them)."""
    lines = constraint_lines(statement)
    aliases: dict[str, str] = {}
    for line in lines:  # n == nums.length, m == grid.length, n == grid[i].length
        for match in re.finditer(r"\b(\w+)\s*==\s*([\w\[\]]+\.length)", line):
            measure = _measure(match.group(2), names, {})
            if measure and match.group(1) not in names:
                aliases[match.group(1)] = measure.replace("itemlen(", "len(").replace(")", "[0])") \
                    if measure.startswith("itemlen(") else measure
    bounds: list[Bound] = []
    facts: dict[str, dict[str, Any]] = {"alphabet": {}, "distinct": {}, "sorted": {}}
    for line in lines:
        _read_facts(line, names, facts)
        for bound in _chain_bounds(line, names, aliases) + _node_bounds(line, names):
            if bound not in bounds:
                bounds.append(bound)
    return bounds, facts


_NODES = re.compile(r"number of nodes in the (?:linked )?list\s+is\s+in\s+the\s+range\s*\[\s*([^,\]]+),\s*([^\]]+)\]",
                    re.IGNORECASE)
_NODE_VALUE = re.compile(r"^([^<>=]+?)\s*<=\s*Node\.val\s*<=\s*([^<>=]+)$")


def _node_bounds(line: str, names: list[str]) -> list[Bound]:
    """LeetCode's linked-list lines, for a problem of one list argument (given as a JSON
    list): "The number of nodes in the list is in the range [0, 300]" bounds its length,
    "-100 <= Node.val <= 100" its items. Trees are left alone: a level-order list with
    nulls is no plain list."""
    if len(names) != 1:
        return []
    name = names[0]
    if (match := _NODES.search(line)) is not None:
        low, high = _number(match.group(1)), _number(match.group(2))
        return [Bound(f"len({name})", low, None, line), Bound(f"len({name})", None, high, line)] \
            if low is not None and high is not None else []
    if (match := _NODE_VALUE.match(line)) is not None:
        low, high = _number(match.group(1)), _number(match.group(2))
        return [Bound(f"item({name})", low, None, line), Bound(f"item({name})", None, high, line)] \
            if low is not None and high is not None else []
    return []


def _alphabet(line: str) -> str:
    """The characters a "consists of ..." line allows: quoted characters, or the classes
    it names (lowercase / uppercase letters, letters, digits, spaces)."""
    lowered = line.lower()
    quoted = re.findall(r"'(.)'", line)
    if quoted and not re.search(r"letters?|digits?", lowered):
        return "".join(sorted(set(quoted)))
    chars = ""
    if "letter" in lowered:
        if "lowercase" in lowered or "lower-case" in lowered:
            chars += "abcdefghijklmnopqrstuvwxyz"
        if "uppercase" in lowered or "upper-case" in lowered:
            chars += "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        if not chars:
            chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    if re.search(r"\bdigits?\b", lowered):
        chars += "0123456789"
    if re.search(r"\bspaces?\b", lowered):
        chars += " "
    return "".join(sorted(set(chars + "".join(quoted)))) if chars else ""


def _read_facts(line: str, names: list[str], facts: dict[str, dict[str, Any]]) -> None:
    subject = re.match(r"^(?:all (?:the )?(?:values|elements|integers|numbers|characters) (?:of|in) )?(\w+)",
                       line, re.I)
    name = subject.group(1) if subject else None
    if name not in names:
        return
    lowered = line.lower()
    if re.search(r"\bconsists? (?:only )?of\b|\bcontains? only\b|\bis either\b|\bare either\b", lowered):
        chars = _alphabet(line)
        if chars:
            facts["alphabet"][name] = chars
    if re.search(r"\b(unique|distinct|pairwise different)\b", lowered) and "not" not in lowered:
        facts["distinct"][name] = True
    if re.search(r"sorted in (non-decreasing|ascending|increasing|strictly increasing) order", lowered):
        facts["sorted"][name] = True


# ---------------------------------------------------------------- checking a candidate


def _evaluate(expression: str, measures: dict[str, float]) -> float | None:
    """The value of a bound's expression over `measures`; None when a measure is missing."""
    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            left, right = value(node.left), value(node.right)
            return left + right if isinstance(node.op, ast.Add) else left - right if isinstance(node.op, ast.Sub) \
                else left * right
        key = ast.unparse(node)
        if key in measures:
            return measures[key]
        raise KeyError(key)

    try:
        return value(ast.parse(expression, mode="eval"))
    except (KeyError, SyntaxError, TypeError, RecursionError):
        return None


def _values_of(measure: str, arguments: dict[str, Value], measures: dict[str, float]) -> list[float] | None:
    """The numbers `measure` takes on one input: one for a plain measure, every item for
    `item(nums)` and `item2(grid)`, every item's length for `itemlen(words)`."""
    kind, _, rest = measure.partition("(")
    name = rest[:-1] if rest else ""
    try:
        if kind == "item":
            return [item for item in arguments[name] if isinstance(item, (int, float)) and not isinstance(item, bool)]
        if kind == "item2":
            return [item for row in arguments[name] for item in row
                    if isinstance(item, (int, float)) and not isinstance(item, bool)]
        if kind == "itemlen":
            return [len(item) for item in arguments[name]]
    except (KeyError, TypeError):
        return None
    return [measures[measure]] if measure in measures else None


def bound_holds(bound: Bound, arguments: list[Value], names: list[str]) -> bool:
    """Whether one input satisfies one bound (a bound whose measures are absent holds)."""
    named = dict(zip(names, arguments))
    measures = measures_of(arguments, names)
    values = _values_of(bound.measure, named, measures)
    if values is None:
        return True
    low = bound.low if not isinstance(bound.low, str) else _evaluate(bound.low, measures)
    high = bound.high if not isinstance(bound.high, str) else _evaluate(bound.high, measures)
    return all((low is None or v >= low) and (high is None or v <= high) for v in values)


def checked_bounds(bounds: list[Bound], inputs: list[list[Value]], names: list[str]) -> tuple[list[Bound], list[str]]:
    """The bounds every stored input satisfies; where one does not, the numbers of its line
    (both sides of `-109 <= x <= 109`) are read again as flattened powers, and the line's
    bounds are kept if that reading holds. Also the lines dropped (misread, or stored inputs
    outside them)."""
    broken = {bound.line for bound in bounds if not all(bound_holds(bound, arguments, names) for arguments in inputs)}
    kept, dropped = [], []
    for bound in bounds:
        if bound.line in broken:
            bound = Bound(bound.measure, *(_as_power(side) if isinstance(side, (int, float)) and _as_power(side)
                                           else side for side in (bound.low, bound.high)), line=bound.line)
        if all(bound_holds(bound, arguments, names) for arguments in inputs):
            kept.append(bound)
        elif bound.line not in dropped:
            dropped.append(bound.line)
    return kept, dropped


def numeric_range(bounds: list[Bound], measure: str) -> tuple[float | None, float | None]:
    """The tightest numeric (low, high) the bounds give `measure`."""
    low = high = None
    for bound in bounds:
        if bound.measure != measure:
            continue
        if isinstance(bound.low, (int, float)) and not isinstance(bound.low, bool):
            low = bound.low if low is None else max(low, bound.low)
        if isinstance(bound.high, (int, float)) and not isinstance(bound.high, bool):
            high = bound.high if high is None else min(high, bound.high)
    return low, high

