"""Problems by reference (no verl needed): a row pins a problem's id and digest, the reward
worker reads the problems file once and refuses a problem that changed."""

import json

import pytest

from microcoder.integrations.verl import reward
from microcoder.integrations.verl.problem_store import ProblemStore, parse_reference, problem_reference
from microcoder.problems import ProblemFormatError
from tests.helpers import stdin_problem

SUM = stdin_problem([("1 2\n", "3\n"), ("10 -4\n", "6\n")], problem_id="sum", source="tests")
DOUBLE = stdin_problem([("4\n", "8\n")], problem_id="double", source="tests")
CORRECT_SUM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def write(path, *problems):
    path.write_text("".join(problem.model_dump_json() + "\n" for problem in problems))
    return str(path)


@pytest.fixture(autouse=True)
def fresh_process_state():
    reward._problems.clear()
    reward._stores.clear()
    yield
    reward._problems.clear()
    reward._stores.clear()
    reward.close_shared_evaluator()


def test_a_reference_is_small_and_resolves_to_its_problem(tmp_path):
    path = write(tmp_path / "problems.jsonl", DOUBLE, SUM)
    reference = problem_reference(SUM)
    assert len(reference) < 120 and parse_reference(reference) == ("sum", json.loads(reference)["sha256"])
    assert parse_reference(SUM.model_dump_json()) is None  # an inline problem is not a reference
    assert ProblemStore([path]).get(*parse_reference(reference)) == SUM
    result = reward.compute_score("microcoder/tests", CORRECT_SUM, reference, {}, evaluator_workers=1,
                                  problems_files=[path])
    assert result["verdict"] == "accepted"


def test_the_store_keeps_offsets_not_problems(tmp_path):
    """What each worker holds per problem is a line's place and digest: the tests stay on disk."""
    big = stdin_problem([(f"{i} {i}\n", f"{2 * i}\n") for i in range(2000)], problem_id="big")
    path = write(tmp_path / "problems.jsonl", big, SUM)
    store = ProblemStore([path])
    assert len(store) == 2
    held = [value for entries in store._lines.values() for entry in entries for value in entry]
    assert all(not isinstance(value, str) or len(value) == 64 for value in held)  # digests only, no JSON
    assert store.get(*parse_reference(problem_reference(big))) == big


def test_a_problem_edited_after_conversion_is_refused(tmp_path):
    path = tmp_path / "problems.jsonl"
    write(path, SUM)
    reference = problem_reference(SUM)
    edited = stdin_problem([("1 2\n", "4\n"), ("10 -4\n", "6\n")], problem_id="sum", source="tests")
    write(path, edited)  # same id, another expected output
    with pytest.raises(ValueError, match=r"problem 'sum': the dataset row pins sha256 .* changed since the parquet"):
        reward.parse_ground_truth(reference, [str(path)])


def test_a_line_changed_while_the_run_reads_it_is_refused(tmp_path):
    path = tmp_path / "problems.jsonl"
    write(path, SUM)
    store = ProblemStore([str(path)])
    edited = stdin_problem([("1 2\n", "4\n"), ("10 -4\n", "6\n")], problem_id="sum", source="tests")
    write(path, edited)  # same length, other content: the index still points at the line
    with pytest.raises(ValueError, match="changed while the run was reading it"):
        store.get("sum", parse_reference(problem_reference(SUM))[1])


def test_missing_ids_files_and_settings_are_named(tmp_path):
    path = write(tmp_path / "problems.jsonl", DOUBLE)
    with pytest.raises(KeyError, match="problem 'sum' is in none of problems_files"):
        reward.parse_ground_truth(problem_reference(SUM), [path])
    reward._stores.clear()
    with pytest.raises(ValueError, match="reward_kwargs.problems_files is not set"):
        reward.parse_ground_truth(problem_reference(SUM), None)
    with pytest.raises(FileNotFoundError, match=r"problems_files: .*nowhere.jsonl not found .*working directory"):
        reward.parse_ground_truth(problem_reference(SUM), [str(tmp_path / "nowhere.jsonl")])


def test_each_process_reads_its_problems_files_once(tmp_path, monkeypatch):
    path = write(tmp_path / "problems.jsonl", DOUBLE, SUM)
    built = []
    original = reward.ProblemStore

    def counting(paths):
        built.append(paths)
        return original(paths)

    monkeypatch.setattr(reward, "ProblemStore", counting)
    for problem in (SUM, DOUBLE, SUM):
        reward._problems.clear()  # not the parse cache: the store itself is kept
        assert reward.parse_ground_truth(problem_reference(problem), [path]) == problem
    assert len(built) == 1


def test_bad_lines_and_duplicate_ids_name_file_and_row(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text(SUM.model_dump_json() + "\n\n{not json\n")
    with pytest.raises(ProblemFormatError, match=r"problems.jsonl: row 3: field '\(json\)'"):
        ProblemStore([str(path)])
    write(path, SUM, SUM)
    with pytest.raises(ProblemFormatError, match="duplicate id 'sum'"):
        ProblemStore([str(path)])
    with pytest.raises(ValueError, match="gunzip"):
        ProblemStore([str(tmp_path / "problems.jsonl.gz")])


def test_one_id_in_two_files_is_found_by_its_digest(tmp_path):
    """A heldout file and a train file may both hold an id; the digest picks the line."""
    edited = stdin_problem([("5 5\n", "10\n")], problem_id="sum", source="tests")
    first, second = write(tmp_path / "a.jsonl", SUM), write(tmp_path / "b.jsonl", edited)
    assert reward.parse_ground_truth(problem_reference(edited), [first, second]) == edited
    assert reward.parse_ground_truth(problem_reference(SUM), [first, second]) == SUM
