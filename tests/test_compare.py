"""One test per comparison rule: a valid variant that must pass and a wrong answer that must
fail, with the expectation derived by hand in a comment. Robust-vs-strict contrasts pin
LiveCodeBench's known failures next to our verdicts."""

from __future__ import annotations

import json
import math

import pytest

from microcoder.evaluator import compare
from microcoder.evaluator.compare import judge_call, judge_stdout
from microcoder.problems import Checker


def accepted(expected: str, got: str, checker: Checker | None = None, mode: str = "robust") -> bool:
    return judge_stdout(expected, got, checker, mode)[0]


def call_accepted(expected_json: str, got: object, mode: str = "robust", checker: Checker | None = None) -> bool:
    return judge_call(expected_json, got, mode, checker)[0]


# --------------------------------------------------------------------------------------
# Modes and return values


def test_unknown_mode_raises_naming_the_valid_modes():
    for judge in (lambda: judge_stdout("1", "1", mode="lenient"), lambda: judge_call("1", 1, mode="lenient")):
        with pytest.raises(ValueError, match="robust, strict"):
            judge()


def test_reason_is_empty_when_accepted_and_locates_the_first_difference_otherwise():
    assert judge_stdout("1 2\n3 4\n", "1 2\n3 4\n") == (True, "")
    # Expected tokens: line 1 holds '1' '2', line 2 holds '3' '4'; the 4th token differs.
    accepted_, reason = judge_stdout("1 2\n3 4\n", "1 2\n3 5\n")
    assert not accepted_
    assert reason.startswith("line 2 token 2: expected '4', got '5'")


def test_reason_stays_short_for_long_tokens():
    verdict, reason = judge_stdout("a" * 10_000, "b" * 10_000)
    assert not verdict and len(reason) < 200
    verdict, reason = judge_call(json.dumps(["x" * 10_000]), ["y" * 10_000])
    assert not verdict and len(reason) < 200


# --------------------------------------------------------------------------------------
# Robust stdout: tokens and whitespace


def test_whitespace_amount_crlf_trailing_spaces_and_blank_lines_are_ignored():
    # Tokens of "1 2\n3\n" are ['1', '2', '3']; the variant splits into the same tokens.
    assert accepted("1 2\n3\n", "1   2\t\r\n3  \r\n\n\n")
    # Wrong: the tokens are ['1', '2'], one fewer.
    assert judge_stdout("1 2\n3\n", "1 2\n") == (False, "expected 3 tokens, got 2")


def test_line_breaks_count_as_whitespace_like_wcmp():
    # "1 2 3" and "1\n2\n3" both give ['1', '2', '3'] (Codeforces' wcmp ignores layout).
    assert accepted("1 2 3", "1\n2\n3")
    assert not accepted("1 2 3", "1\n2\n4")


def test_empty_expected_accepts_empty_or_whitespace_only_output():
    # No tokens on either side: zero tokens equal zero tokens.
    assert accepted("", "")
    assert accepted("\n", "  \r\n\n")
    # Wrong: one token where none is expected.
    assert judge_stdout("", "0") == (False, "expected 0 tokens, got 1")


def test_unicode_space_is_part_of_a_token():
    # Only ASCII whitespace separates tokens (testlib), so "1\u00a02" is one token.
    assert accepted("1 2", "1 2")
    assert not accepted("1 2", "1\u00a02")


def test_concatenated_digits_never_match_separate_tokens():
    # ['1234567'] vs ['1', ..., '7']: 1 token vs 7, rejected in both modes; no concatenation.
    assert accepted("1 2 3 4 5 6 7", "1 2 3 4 5 6 7")
    assert not accepted("1234567", "1 2 3 4 5 6 7")
    assert not accepted("1234567", "1 2 3 4 5 6 7", mode="strict")


def test_order_matters_without_unordered_lines():
    # Token 1 is '1' vs '3': rejected; the sets are equal but sets are never compared.
    assert accepted("1 2 3", "1 2 3")
    assert not accepted("1 2 3", "3 2 1")
    assert not accepted("1 2 3", "3 2 1", mode="strict")


# --------------------------------------------------------------------------------------
# Robust stdout: words and case


def test_words_are_case_sensitive_by_default():
    assert accepted("YES", "YES")
    assert not accepted("YES", "NO")
    # 'yes' != 'Yes' character for character.
    assert not accepted("Yes", "yes")
    # Strict agrees: 'NO' is neither 'YES' nor a number.
    assert not accepted("YES", "NO", mode="strict")


def test_case_insensitive_checker_ignores_case_but_not_letters():
    checker = Checker(case_insensitive=True)
    # casefold('yes') == casefold('YES') == 'yes'.
    assert accepted("YES", "yes", checker)
    assert accepted("Possible", "pOSSIBLE", checker)
    # Wrong: 'no' casefolds to 'no', not 'yes'.
    assert not accepted("YES", "no", checker)
    # Strict (LiveCodeBench) has no checkers: 'yes' differs from 'YES' as text and is
    # not a Decimal, so it is rejected even though the statement allows any case.
    assert not accepted("YES", "yes", checker, mode="strict")


# --------------------------------------------------------------------------------------
# Robust stdout: integers


@pytest.mark.parametrize("wrong", ["3.0", "+3", "003", "3e0", "0x3", "3.", " 3 4"])
def test_integer_tokens_must_be_printed_exactly(wrong):
    # Expected '3' is an integer token, so only the text '3' matches it.
    assert accepted("3", "3")
    assert not accepted("3", wrong)


def test_negative_zero_is_not_zero():
    # '-0' != '0' as text; an integer token matches only its exact text.
    assert accepted("0", "0")
    assert not accepted("0", "-0")


def test_big_integers_compare_exactly():
    # 2**100 = 1267650600228229401496703205376; the variant differs in the last digit.
    assert accepted(str(2**100), "1267650600228229401496703205376")
    assert not accepted(str(2**100), "1267650600228229401496703205377")
    # As doubles both are 1.2676506002282294e30, so a float comparison would accept it.
    assert float("1267650600228229401496703205376") == float("1267650600228229401496703205377")


@pytest.mark.parametrize(("expected", "got"), [("3", "3.0"), ("5", "+5"), ("7", "007"), ("100", "1e2")])
def test_strict_accepts_integers_printed_as_other_numbers(expected, got):
    # LiveCodeBench: the lines differ as text, but Decimal(got) == Decimal(expected)
    # (3.0 == 3, +5 == 5, 007 == 7, 1E+2 == 100), so it accepts. Robust rejects.
    assert accepted(expected, got, mode="strict")
    assert not accepted(expected, got)
    # Both reject a different integer: Decimal(4) != Decimal(3).
    assert not accepted("3", "4", mode="strict")


def test_integer_with_checker_tolerance_accepts_a_close_number():
    checker = Checker(float_tolerance=1e-6)
    # |2.0000001 - 2| = 1e-7 <= 1e-6: accepted (statements with a tolerance print 2 for 2.0).
    assert accepted("2", "2.0000001", checker)
    assert accepted("2", "2", checker)
    # |2.00001 - 2| = 1e-5 > 1e-6 and > 1e-6 * 2: rejected.
    assert not accepted("2", "2.00001", checker)
    # Without the checker tolerance the integer rule is textual: '2.0000001' != '2'.
    assert not accepted("2", "2.0000001")


# --------------------------------------------------------------------------------------
# Robust stdout: decimals


def test_decimal_within_default_tolerance_contrasted_with_strict():
    # |0.333333 - 0.3333333333| = 3.333e-7 <= 1e-6: accepted.
    assert accepted("0.3333333333", "0.333333")
    # |0.3333 - 0.3333333333| = 3.33e-5 > 1e-6 and > 1e-6 * 0.333: rejected.
    assert not accepted("0.3333333333", "0.3333")
    # Strict: Decimal('0.333333') != Decimal('0.3333333333') and there is no tolerance.
    assert not accepted("0.3333333333", "0.333333", mode="strict")
    assert accepted("0.3333333333", "0.3333333333", mode="strict")


def test_relative_tolerance_for_large_decimals():
    # |1000000.5 - 1000000.0| = 0.5 > 1e-6 absolute, but <= 1e-6 * 1e6 = 1.0 relative.
    assert accepted("1000000.0", "1000000.5")
    # |1000002.0 - 1000000.0| = 2.0 > 1.0: rejected.
    assert not accepted("1000000.0", "1000002.0")


def test_exponent_syntax_and_trailing_zeros_are_numbers():
    # '1e-7' is 1e-7; '0.0000001' is the same value, difference 0.
    assert accepted("1e-7", "0.0000001")
    # '2.50' vs '2.5': difference 0.
    assert accepted("2.50", "2.5")
    # '-3.5' vs '3.5': difference 7.
    assert not accepted("-3.5", "3.5")


@pytest.mark.parametrize("not_a_number", ["nan", "inf", "-inf", "0x1p1", "2_0", "2.5.0", "two", "2,5"])
def test_decimal_expected_rejects_non_decimal_got_tokens(not_a_number):
    # Each is either not a number or not plain decimal/exponent syntax, though Python's
    # float() reads 'nan', 'inf' and '2_0' (and 'nan' would make |diff| <= tol False anyway).
    assert accepted("2.0", "2")
    assert not accepted("2.0", not_a_number)


def test_overflowing_got_number_is_rejected():
    # float('1e400') is inf: not a finite number, so not within any tolerance of 1.5.
    assert accepted("1.5", "1.5000001")
    assert not accepted("1.5", "1e400")


def test_an_absolute_only_tolerance_rejects_a_large_answer_off_by_more():
    absolute = Checker(float_tolerance=1e-2, float_tolerance_kind="absolute")
    # 100000000.5 for 100000000: relative error 5e-9, absolute 0.5 > 1e-2.
    assert judge_stdout("100000000", "100000000.5", absolute)[0] is False
    assert judge_stdout("100000000.000", "100000000.5", absolute)[0] is False
    assert judge_stdout("100000000", "100000000.005", absolute)[0] is True
    assert judge_call("100000000.0", 100000000.5, "robust", absolute)[0] is False
    assert judge_call("100000000.0", 100000000.005, "robust", absolute)[0] is True
    # The default kind, absolute or relative, accepts it on its relative error.
    assert judge_stdout("100000000", "100000000.5", Checker(float_tolerance=1e-2))[0] is True
    assert judge_call("100000000.0", 100000000.5, "robust", Checker(float_tolerance=1e-2))[0] is True


def test_a_relative_only_tolerance_rejects_a_small_answer_off_by_less_than_it():
    relative = Checker(float_tolerance=1e-6, float_tolerance_kind="relative")
    # 0.0000005 for 0.000001: absolute error 5e-7 <= 1e-6, relative 0.5.
    assert judge_stdout("0.000001", "0.0000005", relative)[0] is False
    assert judge_stdout("1000.0", "1000.0005", relative)[0] is True
    assert judge_call("0.000001", 0.0000005, "robust", relative)[0] is False
    assert judge_stdout("0.000001", "0.0000005", Checker(float_tolerance=1e-6))[0] is True


def test_the_tolerance_kind_is_left_out_of_the_json_when_it_is_the_default():
    assert "float_tolerance_kind" not in Checker(float_tolerance=1e-6).model_dump_json()
    assert json.loads(Checker(float_tolerance=1e-6, float_tolerance_kind="absolute").model_dump_json())[
        "float_tolerance_kind"] == "absolute"
    with pytest.raises(ValueError):
        Checker(float_tolerance=1e-6, float_tolerance_kind="both")


def test_checker_tolerance_replaces_the_default():
    checker = Checker(float_tolerance=1e-2)
    # |3.14 - 3.14159| = 0.00159 <= 0.01: accepted with 1e-2 ...
    assert accepted("3.14159", "3.14", checker)
    # ... but not with the default 1e-6.
    assert not accepted("3.14159", "3.14")
    # |3.2 - 3.14159| = 0.058 > 0.01 and > 0.01 * 3.14: rejected.
    assert not accepted("3.14159", "3.2", checker)


def test_invalid_checker_tolerance_is_a_problem_error():
    with pytest.raises(ValueError, match="float_tolerance"):
        judge_stdout("1.0", "1.0", Checker(float_tolerance=-1.0))


# --------------------------------------------------------------------------------------
# Robust stdout: unordered lines


def test_unordered_lines_compares_the_multiset_of_lines():
    checker = Checker(unordered_lines=True)
    # Lines {'1 2', '3 4', '3 4'} in another order, with blank lines and CRLF: same multiset.
    assert accepted("1 2\n3 4\n3 4\n", "3 4\r\n\n1 2\n3   4\n", checker)
    # Wrong: {'1 2', '1 2', '3 4'} has '1 2' twice and '3 4' once.
    assert not accepted("1 2\n3 4\n3 4\n", "1 2\n1 2\n3 4\n", checker)
    # Wrong: tokens inside a line keep their order ('2 1' is not '1 2').
    assert not accepted("1 2\n3 4\n", "3 4\n2 1\n", checker)
    # Wrong: line count 2 vs 3.
    assert judge_stdout("1\n2\n", "1\n2\n2\n", checker) == (False, "expected 2 non-blank lines, got 3")


def test_unordered_lines_one_number_per_line_accepts_a_permutation():
    # '1\n2\n3' vs '3\n2\n1': multisets {1, 2, 3} equal. Strict and unchecked robust reject.
    checker = Checker(unordered_lines=True)
    assert accepted("1\n2\n3\n", "3\n2\n1\n", checker)
    assert not accepted("1\n2\n3\n", "3\n2\n1\n")
    assert not accepted("1\n2\n3\n", "3\n2\n1\n", checker, mode="strict")


def test_unordered_lines_apply_tolerance_and_case_rules_inside_lines():
    checker = Checker(unordered_lines=True, case_insensitive=True)
    # 'yes 0.333333' matches 'YES 0.3333333333' (casefold; |diff| = 3.3e-7 <= 1e-6).
    assert accepted("NO 1\nYES 0.3333333333\n", "yes 0.333333\nno 1\n", checker)
    # Wrong: |0.3334 - 0.3333333333| = 6.7e-5 > 1e-6.
    assert not accepted("NO 1\nYES 0.3333333333\n", "yes 0.3334\nno 1\n", checker)


def test_unordered_lines_pairs_reformatted_numbers_after_sorting():
    checker = Checker(unordered_lines=True)
    # No line is identical, but sorted by value both sides are [(1, 2.5), (3, 0.25)] and
    # pair position by position: '2.50' is 2.5, '.25' is 0.25 (difference 0).
    assert accepted("3 0.25\n1 2.5\n", "1 2.50\n3 .25\n", checker)
    # Wrong: sorted, (1, 2.5) meets (1, 2.6): difference 0.1 > 1e-6; no other line matches.
    assert not accepted("3 0.25\n1 2.5\n", "1 2.60\n3 .25\n", checker)


def test_unordered_lines_searches_pairs_that_sorting_misses():
    checker = Checker(unordered_lines=True, float_tolerance=0.1)
    # Sorted: expected [(1.0, 5), (1.1, 6)], got [(1.05, 6), (1.08, 5)]; position by
    # position the integers differ (5 vs 6). Searched: '1.0 5' ~ '1.08 5' (|0.08| <= 0.1)
    # and '1.1 6' ~ '1.05 6' (|0.05| <= 0.1): a valid permutation, accepted.
    assert accepted("1.0 5\n1.1 6\n", "1.05 6\n1.08 5\n", checker)
    # Wrong: '1.0 5' vs '1.25 5' differs by 0.25 > 0.1 (and by more than 0.1 * 1.0).
    assert not accepted("1.0 5\n1.1 6\n", "1.05 6\n1.25 5\n", checker)


def test_unordered_lines_stops_searching_beyond_the_limit(monkeypatch):
    monkeypatch.setattr(compare, "MAX_UNPAIRED_LINES_SEARCHED", 1)
    checker = Checker(unordered_lines=True, float_tolerance=0.1)
    # The accepted case above leaves 2 lines after sorting: over a limit of 1, rejected
    # rather than searched (bounded time, error towards rejection).
    verdict, reason = judge_stdout("1.0 5\n1.1 6\n", "1.05 6\n1.08 5\n", checker)
    assert not verdict and "2 lines unpaired after sorting" in reason
    # Outputs that pair by identity or sorting never reach the limit.
    assert accepted("1 2\n3 4\n", "3 4\n1 2.0000001\n", Checker(unordered_lines=True, float_tolerance=1e-6))


# --------------------------------------------------------------------------------------
# Strict stdout (LiveCodeBench's grade_stdio)


def test_strict_trims_lines_and_trailing_blank_lines():
    # Whole output stripped, then each line: '1 2\r\n3  \n\n' -> ['1 2', '3'].
    assert accepted("1 2\n3\n", "1 2\r\n3  \n\n", mode="strict")
    # Wrong: line 2 is '4', not '3', and Decimal(4) != Decimal(3).
    assert not accepted("1 2\n3\n", "1 2\n4\n", mode="strict")


def test_strict_compares_line_by_line_unlike_robust():
    # Robust: tokens ['1', '2'] both ways. Strict: 1 line vs 2 lines, rejected.
    assert accepted("1 2", "1\n2")
    assert judge_stdout("1 2", "1\n2", mode="strict") == (False, "expected 1 lines, got 2")
    # Strict: an inner blank line is a line ('' vs '2'), so it rejects.
    assert not accepted("1\n2", "1\n\n2", mode="strict")


def test_strict_spacing_inside_a_line_passes_only_through_decimals():
    # '1  2' != '1 2' as text, but both split to [Decimal(1), Decimal(2)]: accepted.
    assert accepted("1 2", "1  2", mode="strict")
    # 'a  b' != 'a b' as text and 'a' is no Decimal: rejected, although robust accepts it.
    assert not accepted("a b", "a  b", mode="strict")
    assert accepted("a b", "a  b")


def test_strict_decimal_quirks():
    # Decimal reads '1_000' as 1000 and 'inf' as Infinity, so both pass there; robust
    # rejects them ('1_000' is not the integer text '1000'; 'inf' is not 'Infinity').
    assert accepted("1000", "1_000", mode="strict")
    assert accepted("Infinity", "inf", mode="strict")
    assert not accepted("1000", "1_000")
    assert not accepted("Infinity", "inf")
    # Decimal('NaN') != Decimal('NaN'), so a NaN line never passes unless identical text.
    assert accepted("NaN", "NaN", mode="strict")
    assert not accepted("NaN", "nan", mode="strict")
    # Comparing a signalling NaN raises InvalidOperation; LiveCodeBench fails the test.
    assert not accepted("1", "sNaN", mode="strict")


def test_strict_ignores_the_checker():
    # LiveCodeBench has no tolerance option: |2.5 - 2.4| = 0.1 <= 0.5, yet strict rejects.
    checker = Checker(float_tolerance=0.5, unordered_lines=True)
    assert accepted("2.5", "2.4", checker)
    assert not accepted("2.5", "2.4", checker, mode="strict")


# --------------------------------------------------------------------------------------
# Robust call


def test_call_expected_must_be_json():
    with pytest.raises(ValueError, match="not JSON"):
        judge_call("[1, 2", [1, 2])
    with pytest.raises(ValueError, match="not JSON"):
        judge_call("[1, 2", [1, 2], mode="strict")


def test_call_lists_compare_elementwise_and_tuples_count_as_lists():
    # [1, [2, 3]] == [1, [2, 3]] item by item; a tuple is a list in both modes.
    assert call_accepted("[1, [2, 3]]", [1, [2, 3]])
    assert call_accepted("[1, 2]", (1, 2))
    assert call_accepted("[1, 2]", (1, 2), mode="strict")
    # Wrong: item [1][1] is 4, not 3.
    assert judge_call("[1, [2, 3]]", [1, [2, 4]]) == (False, "at [1][1]: expected 3, got 4 (differs)")
    # Wrong: order matters, and lengths must match.
    assert not call_accepted("[1, 2]", [2, 1])
    assert not call_accepted("[1, 2]", [1, 2, 3])
    assert not call_accepted("[1, 2]", [2, 1], mode="strict")


def test_call_dicts_compare_keys_and_values():
    # Same keys, same values, any order.
    assert call_accepted('{"a": 1, "b": [2]}', {"b": [2], "a": 1})
    assert not call_accepted('{"a": 1, "b": [2]}', {"a": 1})
    assert not call_accepted('{"a": 1}', {"a": 1, "c": 0})
    assert not call_accepted('{"a": 1}', {"a": 2})


def test_call_ints_are_exact_and_big():
    # 10**30 + 1 != 10**30, though both are 1e30 as doubles.
    assert call_accepted(str(10**30 + 1), 10**30 + 1)
    assert not call_accepted(str(10**30 + 1), 10**30)


def test_call_float_tolerance_contrasted_with_strict():
    # 0.1 + 0.2 = 0.30000000000000004; |diff| = 5.6e-17 <= 1e-5: robust accepts.
    assert call_accepted("0.3", 0.1 + 0.2)
    # Strict: 0.30000000000000004 == 0.3 is False in Python.
    assert not call_accepted("0.3", 0.1 + 0.2, mode="strict")
    # |0.30002 - 0.3| = 2e-5 > 1e-5 and > 1e-5 * 0.3: rejected.
    assert not call_accepted("0.3", 0.30002)
    # Relative: |1000000.005 - 1000000.0| = 0.005 <= 1e-5 * 1e6 = 10.
    assert call_accepted("[1000000.0]", [1000000.005])


def test_call_expected_float_accepts_an_int_or_float_within_tolerance():
    # Expected 2.0: 2 (Python: 2 == 2.0) and 2.0000001 (|diff| = 1e-7 <= 1e-5) pass.
    assert call_accepted("2.0", 2)
    assert call_accepted("2.0", 2.0000001)
    # |2.5 - 2.0| = 0.5: rejected.
    assert not call_accepted("2.0", 2.5)
    assert not call_accepted("2.0", 3)


def test_call_float_for_an_int_must_equal_it_exactly_as_in_python():
    # 23! = 25852016738884976640000; math.gamma(24) = 2.585201673888497e+22, whose value
    # is 25852016738884969824256, 6815744 less: a relative error of 2.6e-16, which any
    # relative tolerance accepts, yet not the number. Python's == says so; both modes too.
    factorial_23 = 25852016738884976640000
    assert math.gamma(24) != factorial_23
    assert judge_call(str(factorial_23), math.gamma(24)) == (
        False, "expected 25852016738884976640000, got 2.585201673888497e+22 "
               "(an int is expected: a float must equal it exactly)")
    assert not call_accepted(str(factorial_23), math.gamma(24), mode="strict")
    # 2.0000001 for 2: within the old 1e-5, but not 2.
    assert not call_accepted("2", 2.0000001)
    assert not call_accepted("[1, 2]", [1, 2.0000001])
    # An exact float is the int, as 6.0 == 6 in Python (references that compute with
    # floats return 6.0 for 6); 2**53 + 1 has no float, so no float equals it.
    assert call_accepted("6", 6.0) and call_accepted("[1, 2]", [1, 2.0])
    assert call_accepted("2", 2.0, mode="strict")
    assert not call_accepted(str(2**53 + 1), float(2**53 + 1))


def test_call_checker_tolerance_lets_a_float_stand_for_an_int():
    checker = Checker(float_tolerance=1e-6)
    # |2.0000001 - 2| = 1e-7 <= 1e-6: accepted under the checker, rejected without it.
    assert call_accepted("2", 2.0000001, checker=checker)
    assert not call_accepted("2", 2.0000001)
    # |2.00001 - 2| = 1e-5 > 1e-6 and > 1e-6 * 2: rejected.
    assert not call_accepted("2", 2.00001, checker=checker)
    # The checker's tolerance replaces the default for expected floats: 0.30002 is 2e-5
    # from 0.3, within 1e-4 but not within the default 1e-5.
    assert call_accepted("0.3", 0.30002, checker=Checker(float_tolerance=1e-4))
    assert not call_accepted("0.3", 0.30002)
    # Strict ignores checkers: 0.1 + 0.2 != 0.3 there whatever the checker says.
    assert not call_accepted("0.3", 0.1 + 0.2, mode="strict", checker=Checker(float_tolerance=1e-4))
    with pytest.raises(ValueError, match="float_tolerance"):
        judge_call("1.0", 1.0, checker=Checker(float_tolerance=math.inf))


def test_call_set_is_not_a_list_in_either_mode():
    # Python: {1, 2} != [1, 2]; LiveCodeBench compares with == and rejects too. The
    # sandbox sends a set as {SET_TAG: items}; a Python set passed directly is the same.
    for returned in ({1, 2}, frozenset({1, 2}), {compare.SET_TAG: [1, 2]}):
        for mode in ("robust", "strict"):
            assert not call_accepted("[1, 2]", returned, mode=mode), (returned, mode)
    assert judge_call("[1, 2]", {compare.SET_TAG: [1, 2]}) == (False, "expected list [1, 2], got set frozenset({1, 2})")
    # Nested: a list of sets is not a list of lists.
    assert not call_accepted("[[1], [2]]", [{compare.SET_TAG: [1]}, {compare.SET_TAG: [2]}])
    # Set items that were tuples come back as tuples, so the reason shows the set.
    assert "frozenset({(1, 2)})" in judge_call("[[1, 2]]", {compare.SET_TAG: [[1, 2]]})[1]


def test_call_dict_keys_with_a_leading_nul_are_not_sets():
    # The sandbox escapes a returned dict key that starts with NUL by one more NUL.
    assert call_accepted('{"\\u0000set": [1]}', {"\x00\x00set": [1]})
    assert call_accepted('{"a": 1}', {"a": 1})
    assert not call_accepted('{"\\u0000set": [1]}', {compare.SET_TAG: [1]})


def test_call_unordered_levels_compare_lists_as_multisets():
    top = Checker(unordered_levels=[0])
    # [0] -> the returned list in any order: [1, 0] is [0, 1] permuted.
    assert call_accepted("[0, 1]", [1, 0], checker=top)
    assert not call_accepted("[0, 1]", [1, 0])
    # A multiset: [1, 1, 2] is not [1, 2, 2]; lengths must match; a set is still no list.
    assert not call_accepted("[1, 1, 2]", [1, 2, 2], checker=top)
    assert not call_accepted("[0, 1]", [0, 1, 1], checker=top)
    assert not call_accepted("[0, 1]", {1, 0}, checker=top)
    assert judge_call("[1, 1, 2]", [1, 2, 2], checker=top) == (
        False, "expected item 1 matches no returned item (any order)")
    # Level 0 only: the quadruplets may come in any order, their numbers may not.
    quadruplets = "[[-2, -1, 1, 2], [-2, 0, 0, 2], [-1, 0, 0, 1]]"
    assert call_accepted(quadruplets, [[-1, 0, 0, 1], [-2, -1, 1, 2], [-2, 0, 0, 2]], checker=top)
    assert not call_accepted(quadruplets, [[1, 0, 0, -1], [-2, -1, 1, 2], [-2, 0, 0, 2]], checker=top)
    # Levels 0 and 1: both; still a multiset at each level ([0, 0, 2, -2] has both zeros).
    both = Checker(unordered_levels=[0, 1])
    assert call_accepted(quadruplets, [[1, 0, 0, -1], [2, -1, 1, -2], [0, 0, 2, -2]], checker=both)
    assert not call_accepted(quadruplets, [[1, 0, 0, -1], [2, -1, 1, -2], [0, 2, 2, -2]], checker=both)
    # Level 1 only: each group in any order, the groups in the expected order.
    inner = Checker(unordered_levels=[1])
    assert call_accepted('[["ate", "eat"], ["bat"]]', [["eat", "ate"], ["bat"]], checker=inner)
    assert not call_accepted('[["ate", "eat"], ["bat"]]', [["bat"], ["eat", "ate"]], checker=inner)
    # Strict ignores the checker, as LiveCodeBench has none.
    assert not call_accepted("[0, 1]", [1, 0], mode="strict", checker=top)


def test_call_unordered_items_keep_tolerances_and_types():
    top = Checker(unordered_levels=[0], float_tolerance=0.1)
    # Sorted: expected [1.0, 1.1], returned [1.05, 1.08]; pairs (1.0, 1.05) and
    # (1.1, 1.08) are within 0.1: accepted. 1.25 is 0.15 from 1.1: rejected.
    assert call_accepted("[1.1, 1.0]", [1.05, 1.08], checker=top)
    assert not call_accepted("[1.1, 1.0]", [1.05, 1.25], checker=top)
    # Types and exactness still count in any order: True is not 1, 1.5 is not 1.
    assert not call_accepted("[1, 2]", [2, True], checker=Checker(unordered_levels=[0]))
    assert not call_accepted("[1, 2]", [2.0, 1.5], checker=Checker(unordered_levels=[0]))
    assert call_accepted("[1, 2]", [2.0, 1.0], checker=Checker(unordered_levels=[0]))


def test_call_unordered_search_pairs_what_sorting_misses(monkeypatch):
    # Tolerance 0.5. Expected [[0.0, 5.0], [0.3, 1.0]], returned [[0.4, 5.0], [0.1, 1.0]].
    # Sorted, the pairs are ([0.0, 5.0], [0.1, 1.0]) and ([0.3, 1.0], [0.4, 5.0]): 5.0 vs
    # 1.0 fails both. The search pairs [0.0, 5.0] with [0.4, 5.0] (0.4 <= 0.5) and
    # [0.3, 1.0] with [0.1, 1.0] (0.2): a valid permutation, accepted.
    checker = Checker(unordered_levels=[0], float_tolerance=0.5)
    expected = "[[0.0, 5.0], [0.3, 1.0]]"
    assert call_accepted(expected, [[0.4, 5.0], [0.1, 1.0]], checker=checker)
    # Wrong: [0.3, 1.0] against [0.1, 2.0] is 1.0 off (> 0.5 and > 0.5 * 1.0).
    assert judge_call(expected, [[0.4, 5.0], [0.1, 2.0]], checker=checker) == (
        False, "expected item [0.3, 1.0] matches no returned item (any order)")
    # Without the search the same valid answer is rejected, so the search did the pairing.
    monkeypatch.setattr(compare, "MAX_UNPAIRED_ITEMS_SEARCHED", 1)
    verdict, reason = judge_call(expected, [[0.4, 5.0], [0.1, 1.0]], checker=checker)
    assert not verdict and "2 items unpaired after sorting" in reason


def test_call_bool_is_not_int_contrasted_with_strict():
    assert call_accepted("true", True)
    assert call_accepted("[true, 0]", [True, 0])
    # Robust: True is not 1 and False is not 0 (wrong type). Strict: True == 1 in Python.
    assert judge_call("true", 1) == (False, "expected bool True, got int 1")
    assert not call_accepted("0", False)
    assert not call_accepted("1.0", True)
    assert call_accepted("true", 1, mode="strict")
    assert call_accepted("[0]", [False], mode="strict")


def test_call_int_and_float_equal_in_strict_only_when_exact():
    # Strict: 1 == 1.0 in Python, so accepted; 1 == 1.0000001 is not.
    assert call_accepted("1", 1.0, mode="strict")
    assert not call_accepted("1", 1.0000001, mode="strict")


def test_call_inf_and_nan():
    # inf matches inf of the same sign; nan matches only an expected nan.
    assert call_accepted("Infinity", math.inf)
    assert not call_accepted("Infinity", -math.inf)
    assert not call_accepted("1e308", math.inf)
    assert call_accepted("NaN", math.nan)
    assert not call_accepted("1.0", math.nan)
    assert not call_accepted("NaN", 1.0)
    # Strict: a computed nan never == anything, even json's NaN.
    assert not call_accepted("[NaN]", json.loads("[NaN]"), mode="strict")
    assert call_accepted("[Infinity]", [math.inf], mode="strict")


def test_call_strings_and_null_are_exact():
    assert call_accepted('"abc"', "abc")
    assert not call_accepted('"abc"', "ABC")
    assert not call_accepted('"1"', 1)
    assert call_accepted("null", None)
    assert not call_accepted("null", 0)
    assert not call_accepted("null", [])


def test_call_unsupported_types_are_rejected_not_called():
    # A set is not JSON; it is rejected by type, never compared with ==.
    assert not call_accepted("[1, 2]", {1, 2})


def test_strict_call_values_keep_nested_tuples_and_key_types_as_livecodebench_compares_them():
    # What the sandbox's livecodebench harness sends: nested tuples and non-str keys tagged.
    nested = [{compare.TUPLE_TAG: [1, 2]}]
    assert judge_call("[[1, 2]]", nested, "strict")[0] is False  # [(1, 2)] != [[1, 2]]
    assert judge_call("[[1, 2]]", nested, "robust")[0] is True   # the same answer, for us
    int_keys = {compare.DICT_TAG: [[1, 2]]}
    assert judge_call('{"1": 2}', int_keys, "strict")[0] is False
    assert judge_call("1", True, "strict")[0] is True  # True == 1


def test_strict_reads_ints_up_to_livecodebench_s_50000_digits():
    digits = "7" * 6000
    assert compare.loads_like_livecodebench(f"[{digits}]") == [int(compare.Decimal(digits))]
    assert judge_call(digits, int(compare.Decimal(digits)), "strict")[0] is True
    with pytest.raises(ValueError):
        compare.loads_like_livecodebench("9" * 50_001)
