"""Reading the canonical format: every bad row is named by file, row and field."""

import json

import pytest

from microcoder.problems import ProblemFormatError, read_problems, write_problems

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
