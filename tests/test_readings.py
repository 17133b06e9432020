"""Statement readings (microcoder/data/readings.py) sentence by sentence, and the checker
fields they set: judged as they say, and left out of a problem's JSON at their defaults."""

import json

import pytest

from microcoder.data import readings
from microcoder.data.export import parquet_row_to_problem, problem_to_parquet_row, write_parquet
from microcoder.data.sources.common import stdin_checker
from microcoder.evaluator.compare import judge_stdout
from microcoder.problems import Checker, Problem, ProblemFormatError, parse_problem


@pytest.mark.parametrize("sentence, value, kind", [
    ("Your answer is accepted if it differs from the correct one by at most 10^{-9}.", 1e-9, "absolute"),
    ("Your answer is correct if its absolute error does not exceed 0.01.", 0.01, "absolute"),
    ("Answers within 10^{-4} of the correct answer are accepted.", 1e-4, "absolute"),
    ("Answers within 10-5 of the actual answer will be accepted.", 1e-5, "absolute"),
    ("Your output is considered correct if the absolute or relative error from the true value is at most 10 ^ {-5}.",
     1e-5, "either"),
    ("Your answer will be accepted if the relative or absolute error does not exceed $10^{-6}$.", 1e-6, "either"),
    ("The error of your answer must be at most 10**-3 to be accepted.", 1e-3, "absolute"),
    ("It is correct if its relative error is at most 1e-7.", 1e-7, "relative"),
    ("It is at least 0.5; answers within 10^-6 of the correct answer are accepted.", 1e-6, "absolute"),
    ("Print the answer with an absolute or relative error of at most 10^{-9}.", 1e-9, "either"),
    ("Output a real number with an absolute or relative error not exceeding 10^{-9}.", 1e-9, "either"),
    ("Your answer is correct if its relative error is less than 0.5%.", 0.005, "relative"),
    ("Your answer is accepted if its absolute error does not exceed $2 \\cdot 10^{-6}$.", 2e-6, "absolute"),
    ("Your answer is accepted if its absolute error does not exceed 5 \\cdot 10^{-3}.", 5e-3, "absolute"),
    ("Your answer is accepted if its absolute error does not exceed 1.5e-6.", 1.5e-6, "absolute"),
])
def test_an_error_bound_in_any_wording(sentence, value, kind):
    tolerance = readings.read_tolerance("Print the area. " + sentence)
    assert (tolerance.value, tolerance.kind) == (pytest.approx(value), kind)


@pytest.mark.parametrize("sentence", [
    "Due to an error in transmission, Bob received a string of 10 - 5 keys.",
    "Every adjacent pair of words differs by a single letter.",
    "The testcases are generated such that there are no cases targeting precision.",
    "If the total error is at most 0.5, print YES.",
])
def test_a_sentence_that_bounds_no_error_sets_no_tolerance(sentence):
    assert readings.read_tolerance(sentence) is None


def test_decimals_fixed_by_the_output_sentence_and_not_by_the_input_one():
    assert readings.read_exact_decimals("Print the average rounded to exactly two digits after the decimal point.")
    assert readings.read_exact_decimals("Print pi truncated, without removing the trailing 0s.")
    assert readings.read_exact_decimals("You are given X rounded to two decimal places. Print 2X.") is None


def test_letter_case_frees_the_named_answers_only():
    statement = ('Print "YES" and the string, or "NO". You can output the answer in any case (for example, '
                 '"yEs" will be recognized as a positive response).')
    assert readings.read_letter_case(statement, ["YES\nabc", "NO"]).words == ("NO", "YES")
    assert readings.read_letter_case("In any case, s contains a letter. Print s.", ["abc"]) is None
    assert readings.read_letter_case("Print the string. You may print each letter in any case.", ["abc"]).words == ()
    # YES and NO both, even when the tests only print one of them
    assert readings.read_letter_case(statement, ["YES\nabc"]).words == ("NO", "YES")


@pytest.mark.parametrize("statement, outputs, words", [
    ("Print the first word. Note that string comparison here is case-insensitive.", ["alice"], None),
    ("Print the first login in lowercase. Logins are case-insensitive, so 'Bob' and 'bob' are the same user.",
     ["bob"], None),
    ("Print the number of steps and the final string; in any case print the number of steps first.", ["2 abc"], None),
    ("Print YES (case-insensitive) if the array contains a zero, and NO otherwise.", ["YES"], ("NO", "YES")),
    ("For each test case, first print either YES or NO (in any case).", ["NO"], ("NO", "YES")),
    # a capitalised word of the story is not an answer word; the sentence frees every token
    ("Snuke runs the ABC contest. Print the name of the contest in lowercase. You may print each letter in any case.",
     ["abc"], ()),
])
def test_letter_case_read_from_the_sentences_about_the_output(statement, outputs, words):
    found = readings.read_letter_case(statement, outputs)
    assert (None if found is None else found.words) == words


@pytest.mark.parametrize("sentence, kind, several", [
    ("Any correct answer will be accepted.", "stdin", True),
    ("If there are multiple answers, print any.", "stdin", True),
    ("Return any array that satisfies this condition.", "call", True),
    ("Find any array a such that the sum is n.", "stdin", True),
    ("Find any substring of length 2 which is also in the reverse of s. Return true if it exists.", "call", False),
    ("If there are several minima, Yelisey can choose any of them.", "stdin", False),
    ("In one operation, you can choose any index i and delete it.", "call", False),
    ("Any answer with a calculation error less than 10-5 will be accepted.", "call", False),
    ("[1, 5] is also accepted. Any permutation of [11,8,6,6,7] is accepted.", "call", False),
])
def test_several_answers_from_the_platforms_wordings(sentence, kind, several):
    assert (readings.read_several_answers(sentence, kind) is not None) is several


@pytest.mark.parametrize("sentence, order", [
    ("You may print the elements in any order.", "tokens"),
    ("The order of the output does not matter.", "tokens"),
    ("You can print the pairs in any order.", "lines"),
    ("A permutation is an array consisting of n distinct integers from 1 to n in arbitrary order.", None),
    ("Takahashi can arrange these dishes in any order he likes.", None),
])
def test_the_printed_order(sentence, order):
    found = readings.read_stdin_order(sentence)
    assert (None if found is None else "lines" if found.lines else "tokens") == order


@pytest.mark.parametrize("statement, outputs, order", [
    ("Print the indices in any order, one on each line.", [], "lines"),
    ("Print the indices, each on its own line; the indices may be printed in any order.", [], "lines"),
    ("Print the indices in any order, each on a new line.", [], "lines"),
    # one token a line in every expected output: the lines are the items
    ("Print the indices in any order.", ["2\n1\n3\n", "5\n"], "lines"),
    ("Print the indices in any order.", ["2 1 3\n", "5\n"], "tokens"),
    # a count before the items stays in place where the statement speaks of one and the outputs have it
    ("Print k followed by the k indices in any order.", ["3 1 2 5\n", "1 4\n"], "tokens, count first"),
    ("First print the number of indices, then the indices in any order, one on each line.", ["2\n4\n1\n"],
     "lines, count first"),
    ("Print k, then the indices in any order, one on each line.", ["2\n4\n1\n", "0\n"], "lines, count first"),
    ("Print k followed by the k indices in any order.", ["3\n1 2 5\n"], "tokens"),  # the count has its own line
    ("Print the indices in any order.", ["2 1 3\n"], "tokens"),  # no count spoken of: 2 is an index
])
def test_lines_or_tokens_and_the_count_from_the_words_and_the_outputs(statement, outputs, order):
    found = readings.read_stdin_order(statement, outputs)
    assert ("lines" if found.lines else "tokens") + (", count first" if found.leading_count else "") == order


@pytest.mark.parametrize("sentence, frees", [
    ("The order of the elements in the result does not matter.", True),
    ("Return an array that consists of indices of peaks in the given array in any order.", True),
    ("The pairs can appear in any order.", True),
    ("Return the minimum time. The tasks can be done in any order.", False),
    ("Return the largest multiple of three that can be formed by concatenating the digits in any order.", False),
])
def test_the_result_order(sentence, frees):
    assert (readings.read_result_order(sentence) is not None) is frees


def test_the_new_fields_are_left_out_of_the_json_at_their_defaults_and_kept_otherwise(tmp_path):
    assert json.loads(Checker(case_insensitive=True).model_dump_json()) == {
        "float_tolerance": None, "case_insensitive": True, "unordered_lines": False, "unordered_levels": [], "python": None}
    checker = Checker(case_insensitive_words=["NO", "YES"], unordered_tokens=True, leading_count=True, exact_decimals=True)
    problem = Problem(id="p", prompt="", kind="stdin", tests=[{"input": "", "output": "YES"}], checker=checker)
    assert parse_problem(json.loads(problem.model_dump_json())).checker == checker
    assert parquet_row_to_problem(problem_to_parquet_row(problem)).checker == checker
    write_parquet(tmp_path / "p.parquet", [problem])  # the schema holds the fields


def test_the_stdin_fields_are_refused_on_a_call_problem():
    with pytest.raises(ProblemFormatError, match="checker.unordered_tokens"):
        parse_problem({"id": "c", "prompt": "", "kind": "call", "entry_point": "f", "tests": [],
                       "checker": {"unordered_tokens": True}})


def test_the_judge_applies_each_field():
    words = Checker(case_insensitive_words=["NO", "YES"])
    assert judge_stdout("YES\nabc", "yes\nabc", words)[0] and not judge_stdout("YES\nabc", "YES\nABC", words)[0]
    exact = Checker(exact_decimals=True)
    assert judge_stdout("0.30", "0.30", exact)[0] and not judge_stdout("0.30", "0.3", exact)[0]
    assert judge_stdout("0.30", "0.3")[0]  # without it, within the default tolerance
    tokens = Checker(unordered_tokens=True)
    assert judge_stdout("3\n1 2 3", "3\n3 1 2", tokens)[0]
    assert judge_stdout("3\n1 2 3", "3 3 1 2", tokens)[0]  # line breaks are whitespace, as ever
    assert not judge_stdout("3\n1 2 3", "1\n3 2 3", tokens)[0]  # the count stays first
    assert not judge_stdout("3\n1 2 3", "3\n1 2 2", tokens)[0]
    assert judge_stdout("2\n0.5 1", "2\n1.0 0.5000001", Checker(unordered_tokens=True, float_tolerance=1e-6))[0]
    counted = Checker(unordered_tokens=True, leading_count=True)
    assert judge_stdout("3 1 2 5\n", "3 5 2 1\n", counted)[0]
    assert not judge_stdout("3 1 2 5\n", "1 2 5 3\n", counted)[0] and judge_stdout("3 1 2 5\n", "1 2 5 3\n", tokens)[0]
    lines_counted = Checker(unordered_lines=True, leading_count=True)
    assert judge_stdout("2\n1\n3\n", "2\n3\n1\n", lines_counted)[0]
    assert not judge_stdout("1\n2\n", "2\n1\n", lines_counted)[0]


def test_stdin_checker_combines_the_readings():
    statement = ("Print YES and the numbers in any order, or NO. You can output the answer in any case. "
                 "Your answer is accepted if its absolute error does not exceed 0.01.")
    assert stdin_checker(statement, ["YES\n1.5 2"]) == Checker(
        float_tolerance=0.01, float_tolerance_kind="absolute", case_insensitive_words=["NO", "YES"], unordered_tokens=True)
