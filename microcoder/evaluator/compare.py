"""Whether a program's output is the expected one: pure comparison rules, no execution.

Two entry points, one per problem kind:

- `judge_stdout(expected, got, checker, mode)` for `stdin` problems (text written to stdout);
- `judge_call(expected_json, got, mode, checker)` for `call` problems (a function's return
  value as the sandbox sends it: decoded JSON, so None/bool/int/float/str/list/dict, with
  returned sets tagged; Python sets and tuples passed directly are read as they are).

Both return `(accepted, reason)`; `reason` is "" when accepted, else one short line saying
where the first difference is. Both take `mode`:

"robust" (the default) is what we train and report with. Stdout is compared token by token
as Codeforces' `wcmp` does: integers must be printed exactly, decimals within a tolerance,
everything else character for character. There is no lenient fallback: a token is never
skipped, outputs are never compared as sets or concatenated.

"strict" reproduces LiveCodeBench's grader (lcb_runner/evaluation/testing_util.py,
`grade_stdio` and `grade_call_based` in LiveCodeBench/LiveCodeBench), rules re-implemented
here, so that its verdicts can be shown next to ours. Its known failures are kept on
purpose: it rejects "0.333333" for "0.3333333333" (no tolerance), and it accepts "3.0" for
"3", "+5" for "5", "007" for "7" and "1e2" for "100" (decimal.Decimal equality), and
True for 1 in call problems (Python ==). LiveCodeBench has no checkers, so strict mode
ignores `checker`.

Decisions (each also where it is implemented):
- Tokens are separated by ASCII whitespace only (space, \\t, \\n, \\r, \\v, \\f), as in
  testlib; a Unicode space such as U+00A0 is part of a token, so it makes the token differ.
- An expected integer token ("-?[0-9]+") must be matched textually: "-0" is not "0",
  "007" is not "7". Arbitrary size, since it is text.
- With `checker.float_tolerance` set, an expected integer also accepts a number within
  tolerance ("2.0000001" for "2"): statements that allow an error often print 2 for 2.0.
  The tolerance bounds the absolute or the relative error, or only the one
  `checker.float_tolerance_kind` names ("an absolute error of 1e-2" is not met by 1e8 + 0.5
  for 1e8, whose relative error is 5e-9).
- Numbers are compared as Python floats (IEEE doubles), so a decimal with more than about
  15 significant digits is rounded first; the tolerance decides, not the last digits. An
  expected number that overflows a double ("1e400") is compared as text.
- Case-insensitive comparison uses str.casefold (Python's caseless matching), for every
  token (`checker.case_insensitive`) or only for the answer words the statement names
  (`checker.case_insensitive_words`: "YES"/"NO" in any case, a string beside them exactly).
- With `checker.exact_decimals` a decimal token is compared as text, as an integer is
  (the statement fixes its digits: "rounded to exactly two digits after the point").
- Unordered tokens (`checker.unordered_tokens`): the got tokens are read as one stream as
  ever, each expected line taking as many as it has, and compared with them as a
  multiset (sorted by value, then searched, as lines are below). With
  `checker.leading_count` each line's first token (a count) is compared in place, and
  with unordered lines the first line.
- Unordered lines pair identical lines, then lines sorted by value, then search the rest
  (at most MAX_UNPAIRED_LINES_SEARCHED lines): exact for exact tokens, bounded in time,
  and any error with tolerances is a rejection (see `_judge_unordered_lines`).
- Call problems, robust mode: values compare as Python's == would, except that a bool
  is not a number, expected floats have a tolerance, and tuples are lists. bool equals
  only bool (True is not 1): a function that should return a bool and returns 1 has the
  wrong type, which a typed judge would reject. An expected int meets a returned float
  only as Python's == does, exactly (6.0 for 6, never n! computed as math.gamma(n + 1),
  which from 23! is not the integer), unless the problem's `checker.float_tolerance`
  allows a float within it. Where the expected value is a float, a returned int or float
  compares within the checker's `float_tolerance`, else CALL_FLOAT_TOLERANCE. inf
  matches only the same inf, nan only an expected nan; ints compare exactly. Tuples count
  as lists at any depth (JSON, the format of expected values, has only lists). A
  returned set or frozenset is never a list ({1, 2} != [1, 2]); the sandbox tags it
  (SET_TAG) so that it arrives as a set. Dict keys arrive as strings.
- A list may be declared unordered (`checker.unordered_levels`): at those nesting levels
  the lists compare as multisets (see `_unordered_list_difference`).
- Strict call mode compares with Python == as LiveCodeBench does: True == 1, 2.0 == 2,
  0.1 + 0.2 != 0.3, {1, 2} != [1, 2]. LiveCodeBench converts only a top-level tuple to a
  list: strict runs (the sandbox's `livecodebench` harness) send nested tuples and dicts
  with keys other than str tagged (TUPLE_TAG, DICT_TAG), so [(1, 2)] != [[1, 2]] and
  {1: 2} != {"1": 2} here as there. Ints of up to 50,000 digits are read (its limit).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Literal, get_args

from microcoder.problems import Checker

JudgeMode = Literal["robust", "strict"]
"""`robust`: our comparison rules; `strict`: LiveCodeBench's."""
JUDGE_MODES: tuple[str, ...] = get_args(JudgeMode)

DEFAULT_FLOAT_TOLERANCE = 1e-6
"""Absolute-or-relative tolerance for non-integer expected tokens when the checker sets none
(Codeforces' usual "absolute or relative error does not exceed 1e-6")."""

CALL_FLOAT_TOLERANCE = 1e-5
"""Absolute-or-relative tolerance for an expected float in a call problem whose checker sets
none (LeetCode's "answers within 10^-5 of the actual answer are accepted")."""

SET_TAG = "\x00set"
"""How the sandbox worker (`_zygote.to_jsonable`) sends a returned set: {SET_TAG: [items]};
a dict key starting with NUL is sent with one more NUL in front. Must equal its SET_TAG."""

TUPLE_TAG = "\x00tuple"
"""Strict runs (`_livecodebench.as_json`): a nested tuple, {TUPLE_TAG: [items]}."""

DICT_TAG = "\x00dict"
"""Strict runs: a dict with a key that is not a str, {DICT_TAG: [[key, value], ...]}."""

LIVECODEBENCH_INT_DIGITS = 50_000
"""LiveCodeBench's sys.set_int_max_str_digits: the longest int its JSON reading takes."""

MAX_UNPAIRED_ITEMS_SEARCHED = 1000
"""In an unordered list, the most items left unpaired after sorting that are searched one
by one (O(n^2) comparisons); more are a rejection."""

MAX_UNPAIRED_LINES_SEARCHED = 1000
"""With unordered lines, the most lines left unpaired after sorting that are searched one
by one (O(n^2) line comparisons, about a second at this size); more are a rejection."""

MAX_SHOWN_CHARS = 40
"""Tokens, lines and values longer than this are cut in reasons, which stay under ~200 chars."""

# An integer as competitive-programming outputs print it: optional minus, ASCII digits.
_INTEGER = re.compile(r"-?[0-9]+")
# A plain decimal or exponent number as C's strtod reads it, ASCII only: no "nan", "inf",
# hex floats ("0x1p3") or digit separators ("1_000"), all of which Python's float() accepts.
_DECIMAL_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_TOKEN = re.compile(r"[^ \t\n\r\v\f]+")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def judge_stdout(
    expected: str, got: str, checker: Checker | None = None, mode: str = "robust"
) -> tuple[bool, str]:
    """Judge a `stdin` problem's output.

    Args:
        expected: the test's expected output.
        got: what the program wrote to stdout.
        checker: the problem's checker; robust mode applies `float_tolerance`,
            `float_tolerance_kind`, `case_insensitive`, `case_insensitive_words`,
            `exact_decimals`, `unordered_lines`, `unordered_tokens` and `leading_count`;
            not `python` (it runs in the sandbox, see `Checker.python`) nor
            `unordered_levels` (call problems only); strict mode ignores the whole
            checker, as LiveCodeBench does.
        mode: "robust" or "strict" (see the module docstring).

    Returns:
        (accepted, reason), reason "" when accepted.
    """
    _check_mode(mode)
    if mode == "strict":
        return _judge_stdout_like_livecodebench(expected, got)
    checker = checker or Checker()
    tolerance = _stdout_tolerance(checker)
    if checker.unordered_lines:
        return _judge_unordered_lines(expected, got, checker, tolerance)
    if checker.unordered_tokens:
        return _judge_unordered_tokens(expected, got, checker, tolerance)
    return _judge_token_stream(expected, got, checker, tolerance)


def judge_call(
    expected_json: str, got: object, mode: str = "robust", checker: Checker | None = None
) -> tuple[bool, str]:
    """Judge a `call` problem's return value.

    Args:
        expected_json: the test's expected output, one JSON value.
        got: the candidate's return value as the sandbox sends it, decoded from JSON
            (tuples became lists, dict keys strings, a set {SET_TAG: [items]}; floats may
            be inf or nan). A Python set, frozenset or tuple is also read as itself.
        mode: "robust" or "strict" (see the module docstring).
        checker: the problem's checker; robust mode applies `float_tolerance` and
            `unordered_levels`, strict mode ignores it, as LiveCodeBench has no checkers.

    Returns:
        (accepted, reason), reason "" when accepted.

    Raises:
        ValueError: `expected_json` is not JSON (a broken problem, not a wrong answer),
            the checker's float_tolerance is unusable, or `mode` is not one of JUDGE_MODES.
    """
    _check_mode(mode)
    try:
        expected = loads_like_livecodebench(expected_json) if mode == "strict" else json.loads(expected_json)
    except (json.JSONDecodeError, TypeError) as error:
        raise ValueError(f"expected output is not JSON: {error}: {_shown(expected_json)}") from None
    got = _from_wire(got)
    if mode == "strict":
        return _judge_call_like_livecodebench(expected, got)
    rules = _CallRules.of(checker or Checker())
    reason = _first_value_difference(expected, got, "", 0, rules)
    return (reason is None, reason or "")


# ---------------------------------------------------------------------------------------
# Shared helpers


def _check_mode(mode: str) -> None:
    if mode not in JUDGE_MODES:
        raise ValueError(f"unknown judge mode {mode!r}; valid modes: {', '.join(JUDGE_MODES)}")


def _shown(value: object) -> str:
    """`value` as repr shows it (strings quoted, invisible characters escaped), cut to
    MAX_SHOWN_CHARS so that reasons stay short."""
    try:
        shown = repr(value)
    except ValueError:  # an int with more digits than sys.get_int_max_str_digits() allows
        shown = f"<{type(value).__name__} too long to show>"
    return shown if len(shown) <= MAX_SHOWN_CHARS else shown[: MAX_SHOWN_CHARS - 3] + "..."


def _within_tolerance(expected: float, got: float, tolerance: float, kind: str = "either") -> bool:
    """|got - expected| <= tolerance (`absolute`), <= tolerance * |expected| (`relative`), or
    either (`either`). Both must be finite."""
    difference = abs(got - expected)
    absolute, relative = difference <= tolerance, difference <= tolerance * abs(expected)
    return {"either": absolute or relative, "absolute": absolute, "relative": relative}[kind]


def _tolerance_name(tolerance: float, kind: str) -> str:
    return f"{tolerance:g}" if kind == "either" else f"{tolerance:g} ({kind})"


# ---------------------------------------------------------------------------------------
# Robust stdout


def _stdout_tolerance(checker: Checker) -> float:
    if checker.float_tolerance is None:
        return DEFAULT_FLOAT_TOLERANCE
    tolerance = checker.float_tolerance
    if not (math.isfinite(tolerance) and tolerance >= 0):
        # A problem error, not the candidate's: the caller reports it as a broken problem.
        raise ValueError(f"checker.float_tolerance must be finite and >= 0, got {tolerance!r}")
    return tolerance


def _finite_number(token: str) -> float | None:
    """The token's value if it is a plain decimal number that fits a double, else None."""
    if not _DECIMAL_NUMBER.fullmatch(token):
        return None
    value = float(token)
    return value if math.isfinite(value) else None


def _token_difference(expected: str, got: str, checker: Checker, tolerance: float) -> str | None:
    """Why `got` does not match the expected token, or None when it does."""
    if expected == got:
        return None
    is_integer = _INTEGER.fullmatch(expected) is not None
    # Integers compare as text unless the checker sets a tolerance (see module docstring).
    if is_integer and checker.float_tolerance is None:
        return f"expected {_shown(expected)}, got {_shown(got)} (integers must match exactly)"
    expected_value = _finite_number(expected)
    if expected_value is not None and checker.exact_decimals:
        return f"expected {_shown(expected)}, got {_shown(got)} (decimals must be printed as stated)"
    if expected_value is not None:
        got_value = _finite_number(got)
        if got_value is None:
            return f"expected number {_shown(expected)}, got {_shown(got)}"
        kind = checker.float_tolerance_kind if checker.float_tolerance is not None else "either"
        if _within_tolerance(expected_value, got_value, tolerance, kind):
            return None
        return (
            f"expected {_shown(expected)}, got {_shown(got)} "
            f"(difference {abs(got_value - expected_value):.3g} exceeds tolerance {_tolerance_name(tolerance, kind)})"
        )
    # Not a number (or one that overflows a double): compare as text.
    if expected.casefold() == got.casefold() and _any_case(expected, checker):
        return None
    return f"expected {_shown(expected)}, got {_shown(got)}"


def _any_case(token: str, checker: Checker) -> bool:
    """Whether the token may be printed in any letter case."""
    if checker.case_insensitive or not checker.case_insensitive_words:
        return checker.case_insensitive
    return token.casefold() in {word.casefold() for word in checker.case_insensitive_words}


def _case_key(token: str, checker: Checker) -> str:
    """The token as compared for identity: casefolded where its case is free."""
    return token.casefold() if _any_case(token, checker) else token


def _tokens_by_line(text: str) -> list[list[str]]:
    """The whitespace-separated tokens of each line; blank lines give empty lists."""
    return [_TOKEN.findall(line) for line in _LINE_BREAK.split(text)]


def _judge_token_stream(expected: str, got: str, checker: Checker, tolerance: float) -> tuple[bool, str]:
    """Compare all tokens in order, line breaks counting as whitespace (Codeforces' wcmp)."""
    expected_tokens = [
        (line_number, token_number, token)
        for line_number, line_tokens in enumerate(_tokens_by_line(expected), start=1)
        for token_number, token in enumerate(line_tokens, start=1)
    ]
    got_tokens = _TOKEN.findall(got)

    first_difference = ""
    for (line_number, token_number, expected_token), got_token in zip(expected_tokens, got_tokens):
        difference = _token_difference(expected_token, got_token, checker, tolerance)
        if difference is not None:
            first_difference = f"line {line_number} token {token_number}: {difference}"
            break

    if len(expected_tokens) != len(got_tokens):
        count_reason = f"expected {len(expected_tokens)} tokens, got {len(got_tokens)}"
        return False, f"{count_reason}; first difference at {first_difference}" if first_difference else count_reason
    return (not first_difference, first_difference)


def _judge_unordered_lines(expected: str, got: str, checker: Checker, tolerance: float) -> tuple[bool, str]:
    """Compare the non-blank lines as multisets, each line judged token by token.

    Lines are paired in three passes; a pair is only ever made of two lines that match
    under the token rules, so an accepted output is always a true permutation:
    1. lines identical after tokenising (and casefolding) pair off (a Counter, O(n));
    2. the rest are sorted by their values (numbers as floats) and paired position by
       position where they match: reformatted numbers ("2.50" for "2.5") land here;
    3. what is still unpaired is searched greedily, each expected line taking the first
       unused output line it matches; above MAX_UNPAIRED_LINES_SEARCHED lines this
       O(n^2) search is skipped and the output rejected.
    For exact tokens the result is exact. With tolerances "matches" is not transitive, so
    the passes can reject a permutation that a full bipartite matching would accept
    (numbers within about two tolerances of each other): errors go towards rejection.
    """
    expected_lines = _non_blank_lines(expected)
    got_lines = _non_blank_lines(got)
    if len(expected_lines) != len(got_lines):
        return False, f"expected {len(expected_lines)} non-blank lines, got {len(got_lines)}"
    if checker.leading_count and expected_lines:  # the count's line stays first; the rest are free
        (number, expected_first), (_, got_first) = expected_lines[0], got_lines[0]
        if len(expected_first) != len(got_first) or any(
                _token_difference(e, g, checker, tolerance) is not None for e, g in zip(expected_first, got_first)):
            return False, f"expected line {number} ({_shown(' '.join(expected_first))}) first, got {_shown(' '.join(got_first))}"
        expected_lines, got_lines = expected_lines[1:], got_lines[1:]

    def identity_key(tokens: list[str]) -> tuple[str, ...]:
        return tuple(_case_key(token, checker) for token in tokens)

    def value_key(tokens: list[str]) -> tuple[tuple[int, float | str], ...]:
        # (0, number) sorts before (1, text), so mixed lines never compare float with str.
        return tuple(
            (0, number) if (number := _finite_number(token)) is not None else (1, identity_key([token])[0])
            for token in tokens
        )

    def lines_match(expected_tokens: list[str], got_tokens: list[str]) -> bool:
        return len(expected_tokens) == len(got_tokens) and all(
            _token_difference(e, g, checker, tolerance) is None for e, g in zip(expected_tokens, got_tokens)
        )

    # Pass 1: identical lines.
    identical = Counter(identity_key(tokens) for _, tokens in expected_lines) & Counter(
        identity_key(tokens) for _, tokens in got_lines
    )
    expected_left = _without_identical(expected_lines, identical, identity_key)
    got_left = _without_identical(got_lines, identical, identity_key)

    # Pass 2: sorted by value, position by position.
    expected_left.sort(key=lambda line: value_key(line[1]))
    got_left.sort(key=lambda line: value_key(line[1]))
    unpaired_after_sorting = [(e, g) for e, g in zip(expected_left, got_left) if not lines_match(e[1], g[1])]
    expected_left = [e for e, _ in unpaired_after_sorting]
    got_left = [g for _, g in unpaired_after_sorting]
    if not expected_left:
        return True, ""

    # Pass 3: greedy search over what is left.
    first_number, first_tokens = min(expected_left)
    if len(expected_left) > MAX_UNPAIRED_LINES_SEARCHED:
        return False, (
            f"{len(expected_left)} lines unpaired after sorting (over {MAX_UNPAIRED_LINES_SEARCHED}, "
            f"not searched), e.g. expected line {first_number} ({_shown(' '.join(first_tokens))})"
        )
    for number, expected_tokens in sorted(expected_left):
        match_index = next(
            (index for index, (_, got_tokens) in enumerate(got_left) if lines_match(expected_tokens, got_tokens)),
            None,
        )
        if match_index is None:
            return False, f"expected line {number} ({_shown(' '.join(expected_tokens))}) matches no output line"
        del got_left[match_index]
    return True, ""


def _judge_unordered_tokens(expected: str, got: str, checker: Checker, tolerance: float) -> tuple[bool, str]:
    """Each expected line's tokens against as many of the got tokens, taken in turn from
    one stream (line breaks are whitespace, as in `_judge_token_stream`), as multisets:
    sorted by value and paired position by position where they match, the rest searched
    greedily (at most MAX_UNPAIRED_ITEMS_SEARCHED); a pair only ever matches under the
    token rules, so an accepted line is a true permutation of the expected one."""
    got_tokens = _TOKEN.findall(got)
    expected_lines = _non_blank_lines(expected)
    total = sum(len(tokens) for _, tokens in expected_lines)
    if total != len(got_tokens):
        return False, f"expected {total} tokens, got {len(got_tokens)}"

    def value_key(token: str) -> tuple[int, float | str]:
        number = _finite_number(token)
        return (0, number) if number is not None else (1, _case_key(token, checker))

    def matches(expected_token: str, got_token: str) -> bool:
        return _token_difference(expected_token, got_token, checker, tolerance) is None

    start = 0
    for number, tokens in expected_lines:
        taken = got_tokens[start : start + len(tokens)]
        start += len(tokens)
        if checker.leading_count:  # the line's count stays first; its items are free
            if not matches(tokens[0], taken[0]):
                return False, f"line {number}: expected the count {_shown(tokens[0])} first, got {_shown(taken[0])}"
            tokens, taken = tokens[1:], taken[1:]
        unpaired = [(e, g) for e, g in zip(sorted(tokens, key=value_key), sorted(taken, key=value_key))
                    if not matches(e, g)]
        if len(unpaired) > MAX_UNPAIRED_ITEMS_SEARCHED:
            return False, (f"line {number}: {len(unpaired)} tokens unpaired after sorting (over "
                           f"{MAX_UNPAIRED_ITEMS_SEARCHED}, not searched)")
        got_left = [g for _, g in unpaired]
        for expected_token, _ in unpaired:
            index = next((i for i, token in enumerate(got_left) if matches(expected_token, token)), None)
            if index is None:
                return False, f"line {number}: expected token {_shown(expected_token)} matches no token (any order)"
            del got_left[index]
    return True, ""


def _non_blank_lines(text: str) -> list[tuple[int, list[str]]]:
    """(1-based line number, tokens) of each line that has a token."""
    return [(number, tokens) for number, tokens in enumerate(_tokens_by_line(text), start=1) if tokens]


def _without_identical(
    lines: list[tuple[int, list[str]]],
    identical: Counter[tuple[str, ...]],
    identity_key: Callable[[list[str]], tuple[str, ...]],
) -> list[tuple[int, list[str]]]:
    """`lines` less as many lines of each key as `identical` counts (those paired off)."""
    still_to_remove = identical.copy()
    remaining = []
    for number, tokens in lines:
        key = identity_key(tokens)
        if still_to_remove[key] > 0:
            still_to_remove[key] -= 1
        else:
            remaining.append((number, tokens))
    return remaining


# ---------------------------------------------------------------------------------------
# Strict stdout: LiveCodeBench's grade_stdio rules, in our words.


def _livecodebench_lines(text: str) -> list[str]:
    # Strip the whole output (so trailing blank lines vanish), split on "\n", strip each
    # line (so "\r" and edge spaces vanish). Python's Unicode-aware str.strip, as theirs.
    return [line.strip() for line in text.strip().split("\n")]


def _livecodebench_decimals(line: str) -> list[Decimal] | None:
    """Every token of the line as a Decimal, or None if any token is not one."""
    try:
        return [Decimal(token) for token in line.split()]
    except (InvalidOperation, ValueError):
        return None


def _judge_stdout_like_livecodebench(expected: str, got: str) -> tuple[bool, str]:
    expected_lines, got_lines = _livecodebench_lines(expected), _livecodebench_lines(got)
    if len(expected_lines) != len(got_lines):
        return False, f"expected {len(expected_lines)} lines, got {len(got_lines)}"
    for line_number, (expected_line, got_line) in enumerate(zip(expected_lines, got_lines), start=1):
        if expected_line == got_line:
            continue
        # A line that differs as text passes if both lines are all numbers and the lists
        # of Decimals are equal: this is why "3.0", "+5", "007", "1e2" pass for integers.
        mismatch = f"line {line_number}: expected {_shown(expected_line)}, got {_shown(got_line)}"
        got_decimals = _livecodebench_decimals(got_line)
        expected_decimals = _livecodebench_decimals(expected_line)
        if got_decimals is None or expected_decimals is None:
            return False, mismatch
        try:
            equal = got_decimals == expected_decimals
        except InvalidOperation:
            # Comparing a signalling NaN ("sNaN") raises; in LiveCodeBench the exception
            # escapes grade_stdio and run_test reports the test as failed.
            equal = False
        if not equal:
            return False, mismatch
    return True, ""


# ---------------------------------------------------------------------------------------
# Robust call: structural equality over JSON values.


@dataclass(frozen=True)
class _CallRules:
    """What a call problem's checker changes in the comparison (see the module docstring)."""

    float_tolerance: float
    """Tolerance for an expected float."""
    float_for_int: bool
    """Whether a float may stand for an expected int (within float_tolerance)."""
    unordered_levels: frozenset[int]
    tolerance_kind: str = "either"
    """Which error the tolerance bounds (`Checker.float_tolerance_kind`)."""

    @classmethod
    def of(cls, checker: Checker) -> _CallRules:
        if checker.float_tolerance is None:
            return cls(CALL_FLOAT_TOLERANCE, False, frozenset(checker.unordered_levels))
        return cls(_stdout_tolerance(checker), True, frozenset(checker.unordered_levels), checker.float_tolerance_kind)


def loads_like_livecodebench(text: str) -> object:
    """json.loads, with ints of up to LIVECODEBENCH_INT_DIGITS digits (CPython's default
    refuses more than 4300; LiveCodeBench raises the limit to 50,000)."""
    return json.loads(text, parse_int=_long_int)


def _long_int(digits: str) -> int:
    if len(digits) <= 4000:
        return int(digits)
    if len(digits.lstrip("-")) > LIVECODEBENCH_INT_DIGITS:
        raise ValueError(f"an int of more than {LIVECODEBENCH_INT_DIGITS} digits")
    return int(Decimal(digits))  # Decimal -> int is not under the str-digits limit


def _from_wire(value: object) -> object:
    """The return value with the sandbox's encoding undone: {SET_TAG: items} becomes a
    frozenset, and a dict key's extra leading NUL is dropped (see `_zygote.to_jsonable`);
    strict runs' {TUPLE_TAG: items} a tuple, {DICT_TAG: pairs} a dict with those keys."""
    if type(value) is list:
        return [_from_wire(item) for item in value]
    if type(value) is dict:
        if len(value) == 1 and SET_TAG in value and type(value[SET_TAG]) is list:
            return _as_set([_from_wire(item) for item in value[SET_TAG]])
        if len(value) == 1 and TUPLE_TAG in value and type(value[TUPLE_TAG]) is list:
            return tuple(_from_wire(item) for item in value[TUPLE_TAG])
        if len(value) == 1 and DICT_TAG in value and type(value[DICT_TAG]) is list:
            try:
                return {_hashable(_from_wire(key)): _from_wire(item) for key, item in value[DICT_TAG]}
            except (TypeError, ValueError):
                return repr(value)  # not pairs of a key and a value: never equal to an expected value
        return {(key[1:] if key.startswith("\x00") else key): _from_wire(item) for key, item in value.items()}
    return value


def _hashable(item: object) -> object:
    return tuple(_hashable(part) for part in item) if type(item) is list else item


def _as_set(items: list[object]) -> frozenset:
    # A set's items were hashable, so its lists were tuples; turn them back. (An item that
    # still is not hashable came from an odd class; a set is never an expected value, so
    # only the reason would show its repr.)
    def hashable(item: object) -> object:
        return tuple(hashable(part) for part in item) if type(item) is list else item

    try:
        return frozenset(hashable(item) for item in items)
    except TypeError:
        return frozenset(repr(item) for item in items)


def _json_type_name(value: object) -> str:
    names = {type(None): "null", bool: "bool", int: "int", float: "float", str: "string",
             list: "list", tuple: "list", dict: "object", set: "set", frozenset: "set"}
    return names.get(type(value), f"unsupported {type(value).__name__}")


def _is_number(value: object) -> bool:
    # Exact type checks: bool is a subclass of int but is not a number here.
    return type(value) is int or type(value) is float


def _numbers_difference(expected: int | float, got: int | float, rules: _CallRules) -> str | None:
    """Why two numbers differ, or None if they match (see the module docstring)."""
    if type(expected) is int and type(got) is int:
        return None if expected == got else "differs"
    if type(expected) is int and not rules.float_for_int:
        # Python's ==, exact: 6.0 == 6, but math.gamma(24) != 23! (it is 6815744 short).
        return None if expected == got else "an int is expected: a float must equal it exactly"
    try:
        expected_float, got_float = float(expected), float(got)
    except OverflowError:
        return "differs (an integer beyond the range of a float)"
    if math.isnan(expected_float) or math.isnan(got_float):
        # nan matches only when nan is expected.
        return None if math.isnan(expected_float) and math.isnan(got_float) else "differs"
    if math.isinf(expected_float) or math.isinf(got_float):
        return None if expected_float == got_float else "differs"
    if _within_tolerance(expected_float, got_float, rules.float_tolerance, rules.tolerance_kind):
        return None
    return f"differs by more than {_tolerance_name(rules.float_tolerance, rules.tolerance_kind)}"


def _first_value_difference(expected: object, got: object, path: str, level: int, rules: _CallRules) -> str | None:
    """Where and how `got` first differs from `expected`, or None if they match.

    `path` locates the value, e.g. "[2]['key']"; "" is the whole return value. `level` is
    the number of lists and dicts around it (0 for the return value).
    """
    where = f"at {path}: " if path else ""
    if _is_number(expected) and _is_number(got):
        how = _numbers_difference(expected, got, rules)
        if how is None:
            return None
        return f"{where}expected {_shown(expected)}, got {_shown(got)} ({how})"

    expected_type, got_type = _json_type_name(expected), _json_type_name(got)
    if expected_type != got_type:
        return f"{where}expected {expected_type} {_shown(expected)}, got {got_type} {_shown(got)}"

    if expected_type == "list":
        if len(expected) != len(got):
            return f"{where}expected a list of {len(expected)} items, got {len(got)}"
        if level in rules.unordered_levels:
            return _unordered_list_difference(expected, got, path, level, rules)
        for index, (expected_item, got_item) in enumerate(zip(expected, got)):
            difference = _first_value_difference(expected_item, got_item, f"{path}[{index}]", level + 1, rules)
            if difference is not None:
                return difference
        return None

    if expected_type == "object":
        missing = [key for key in expected if key not in got]
        if missing:
            return f"{where}missing key {_shown(missing[0])}"
        extra = [key for key in got if key not in expected]
        if extra:
            return f"{where}unexpected key {_shown(extra[0])}"
        for key, expected_item in expected.items():
            difference = _first_value_difference(expected_item, got[key], f"{path}[{key!r}]", level + 1, rules)
            if difference is not None:
                return difference
        return None

    if expected_type in ("null", "bool", "string"):
        if expected == got:
            return None
        return f"{where}expected {_shown(expected)}, got {_shown(got)}"

    # Both sides of a type no JSON value has (only possible if `expected` were not JSON).
    return f"{where}cannot compare {expected_type} values"


def _unordered_list_difference(
    expected: list | tuple, got: list | tuple, path: str, level: int, rules: _CallRules
) -> str | None:
    """Compare two lists of equal length as multisets, each pair of items by the rules.

    As `_judge_unordered_lines` pairs lines: both lists are sorted by `_order_key` (inner
    unordered levels sorted too) and paired position by position where the items match;
    the items left are searched greedily, each expected item taking the first unused
    returned item it matches (at most MAX_UNPAIRED_ITEMS_SEARCHED). For exact values the
    result is exact; with tolerances an error goes towards rejection.
    """
    where = f"at {path}: " if path else ""

    def key(item: object) -> tuple:
        return _order_key(item, level + 1, rules.unordered_levels)

    def matches(expected_item: object, got_item: object) -> bool:
        return _first_value_difference(expected_item, got_item, path, level + 1, rules) is None

    pairs = zip(sorted(expected, key=key), sorted(got, key=key))
    unpaired = [(e, g) for e, g in pairs if not matches(e, g)]
    if not unpaired:
        return None
    if len(unpaired) > MAX_UNPAIRED_ITEMS_SEARCHED:
        return (f"{where}{len(unpaired)} items unpaired after sorting (over {MAX_UNPAIRED_ITEMS_SEARCHED}, "
                f"not searched), e.g. expected {_shown(unpaired[0][0])} (any order)")
    got_left = [g for _, g in unpaired]
    for expected_item, _ in unpaired:
        index = next((i for i, got_item in enumerate(got_left) if matches(expected_item, got_item)), None)
        if index is None:
            return f"{where}expected item {_shown(expected_item)} matches no returned item (any order)"
        del got_left[index]
    return None


def _order_key(value: object, level: int, unordered_levels: frozenset[int]) -> tuple:
    """A sort key that orders any values totally: by kind, then by value, with the lists
    at unordered levels inside `value` sorted first, so two orders of one multiset tie."""
    kind = type(value)
    if kind is bool:
        return (1, value)
    if kind is int or kind is float:
        return (0, 1, 0) if value != value else (0, 0, value)  # nan after every number
    if kind is str:
        return (2, value)
    if value is None:
        return (3,)
    if kind in (list, tuple):
        keys = [_order_key(item, level + 1, unordered_levels) for item in value]
        if level in unordered_levels:
            keys.sort()
        return (4, tuple(keys))
    if kind is dict:
        return (5, tuple(sorted((key, _order_key(item, level + 1, unordered_levels)) for key, item in value.items())))
    if kind in (set, frozenset):
        return (6, tuple(sorted(repr(item) for item in value)))
    return (7, repr(value))


# ---------------------------------------------------------------------------------------
# Strict call: LiveCodeBench's grade_call_based rule, in our words.


def _contains_nan(value: object) -> bool:
    if type(value) is float:
        return math.isnan(value)
    if type(value) in (list, tuple):
        return any(_contains_nan(item) for item in value)
    if type(value) is dict:
        return any(_contains_nan(item) for item in value.values())
    return False


def _judge_call_like_livecodebench(expected: object, got: object) -> tuple[bool, str]:
    # LiveCodeBench turns a returned tuple into a list (top level only) and compares with
    # Python ==: True == 1, 1 == 1.0, and no tolerance, so 0.1 + 0.2 != 0.3.
    if type(got) is tuple:
        got = list(got)
    # A nan the candidate computed is a fresh object, so == (which for list items first
    # tries identity) never holds for it there. Our `got` may hold json's shared NaN
    # object, which == would accept by identity, so rule nan out explicitly.
    if _contains_nan(got):
        return False, "the return value contains nan, which never compares equal"
    if got == expected:
        return True, ""
    return False, f"expected {_shown(expected)}, got {_shown(got)}"
