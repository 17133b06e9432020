"""Reading the canonical format: every bad row is named by file, row and field."""

import json
import math

import pytest
from pydantic import ValidationError

from microcoder.problems import Problem, ProblemFormatError, parse_problem, read_problems, write_problems

GOOD = {"id": "a", "prompt": "", "kind": "stdin", "tests": [{"input": "1", "output": "1"}]}


def write_rows(path, rows):
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


@pytest.mark.parametrize(
    "bad, field",
    [
        ("{not json", "(json)"),
        ({"id": "b", "prompt": "", "kind": "stdin"}, "tests"),
        ({"id": "b", "prompt": "", "kind": "shell", "tests": []}, "kind"),
        ({"id": "b", "prompt": "", "kind": "call", "tests": []}, "entry_point"),
        ({"id": "b", "prompt": "", "kind": "call", "entry_point": "f", "tests": [{"input": "[1,", "output": "1"}]},
         "tests.0.input"),
        ({**GOOD, "tests": [{"input": "1", "output": "1", "extra": 1}]}, "tests.0.extra"),
        (GOOD, "id"),  # the same id as row 1
        ("[1, 2]", "(row)"),
    ],
)
def test_a_bad_row_names_file_row_and_field(tmp_path, bad, field):
    path = write_rows(tmp_path / "problems.jsonl", [GOOD, bad])
    with pytest.raises(ProblemFormatError) as error:
        read_problems(path)
    assert (error.value.path, error.value.row, error.value.field) == (str(path), 2, field)
    assert f"{path}: row 2: field '{field}'" in str(error.value)


def test_the_model_refuses_a_time_limit_that_is_not_a_positive_finite_number():
    # A zero limit would time out every run, nan compares false with every CPU time, and
    # pydantic alone would read `true` as 1.0 and "2" as 2.0.
    refused = [0, 0.0, -1, -0.5, math.nan, math.inf, -math.inf, True, False, "2", [2]]
    for value in refused:
        with pytest.raises(ValidationError, match="time_limit_s") as error:
            Problem(**GOOD, time_limit_s=value)
        assert error.value.errors()[0]["loc"] == ("time_limit_s",), value
    assert "must be positive and finite, got 0" in str(_refusal(0))
    assert "must be positive and finite, got nan" in str(_refusal(math.nan))
    assert "must be a number of seconds, got True" in str(_refusal(True))
    assert "must be a number of seconds, got '2'" in str(_refusal("2"))


def _refusal(value) -> ValidationError:
    try:
        Problem(**GOOD, time_limit_s=value)
    except ValidationError as error:
        return error
    raise AssertionError(f"time_limit_s={value!r} was accepted")


def test_a_limit_set_after_construction_is_checked_too():
    # Pipeline stages set a problem's limit on the model they hold (validate derives it from
    # the reference); an unusable one must not reach the judge that way either.
    problem = Problem(**GOOD, time_limit_s=2.0)
    for value in (0.0, math.nan, True):
        with pytest.raises(ValidationError, match="time_limit_s"):
            problem.time_limit_s = value
    problem.time_limit_s = 0.5
    assert problem.time_limit_s == 0.5


def test_the_model_keeps_a_good_time_limit_or_none():
    assert Problem(**GOOD, time_limit_s=0.25).time_limit_s == 0.25
    whole = Problem(**GOOD, time_limit_s=3).time_limit_s
    assert whole == 3.0 and isinstance(whole, float)
    assert Problem(**GOOD).time_limit_s is None and Problem(**GOOD, time_limit_s=None).time_limit_s is None


def test_a_record_with_a_bad_time_limit_names_its_field():
    with pytest.raises(ProblemFormatError) as error:
        parse_problem({**GOOD, "time_limit_s": -2}, "problems.jsonl", 7)
    assert (error.value.path, error.value.row, error.value.field) == ("problems.jsonl", 7, "time_limit_s")
    assert str(error.value) == "problems.jsonl: row 7: field 'time_limit_s': must be positive and finite, got -2"


def test_bad_rows_can_be_collected_without_losing_the_good_ones(tmp_path):
    path = write_rows(tmp_path / "problems.jsonl", [GOOD, "{oops", {**GOOD, "id": "c"}])
    errors = []
    problems = read_problems(path, on_error=errors.append)
    assert [problem.id for problem in problems] == ["a", "c"]
    assert [(e.row, e.field) for e in errors] == [(2, "(json)")]


def test_round_trip(tmp_path):
    problems = read_problems(write_rows(tmp_path / "in.jsonl", [GOOD, {**GOOD, "id": "c", "kind": "call",
                                                                       "entry_point": "f",
                                                                       "tests": [{"input": "1\n[2]", "output": "3"}]}]))
    out = tmp_path / "out.jsonl"
    assert write_problems(out, problems) == 2
    assert read_problems(out) == problems


def test_unmarked_tests_keep_their_bytes():
    # A problem with no shown or generated test serializes as before those marks existed, so
    # its digest (verl's references) and its step-0 cache key do not move.
    from microcoder.problems import TestCase

    assert TestCase(input="1", output="2").model_dump_json() == '{"input":"1","output":"2"}'
    marked = TestCase(input="1", output="2", shown=True, generated=False)
    assert marked.model_dump() == {"input": "1", "output": "2", "shown": True}
    assert TestCase.model_validate_json(marked.model_dump_json()) == marked
