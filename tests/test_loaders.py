"""Loaders: each source format on small fixture records that imitate it, broken rows
included. Nothing here reads ../shared. Recording tests need the sandbox and are skipped
when it is not available."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from microcoder.data.literals import (
    NotRepresentable,
    canonical_tree_values,
    find_signature,
    floats_as_annotated,
    keyword_arguments,
    literal,
    to_json_value,
)
from microcoder.data.loaders import detect_format, load_problems
from microcoder.data.sources.common import stdin_checker
from microcoder.problems import DEFAULT_CALL_PRELUDE, read_problems, write_problems

os.environ.setdefault("OMP_NUM_THREADS", "1")


def write_json(path: Path, records: list) -> Path:
    path.write_text(json.dumps(records))
    return path


def write_jsonl(path: Path, lines: list) -> Path:
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as handle:
            handle.write(text)
    else:
        path.write_text(text)
    return path


# ---------------------------------------------------------------- pure helpers


def test_literal_accepts_json_spellings_and_never_evaluates():
    assert literal("[1, null, true, false]") == [1, None, True, False]
    with pytest.raises(NotRepresentable):
        literal("__import__('os').system('echo hi')")
    with pytest.raises(NotRepresentable):
        literal("[2] * 100000")


def test_to_json_value_rules():
    assert to_json_value((1, (2, 3))) == [1, [2, 3]]
    for bad in ({1, 2}, float("nan"), float("inf"), {1: "a"}, object()):
        with pytest.raises(NotRepresentable):
            to_json_value(bad)


def test_keyword_arguments_follow_signature_order():
    assert keyword_arguments("queries = [[0,5]], n = 7", ["n", "queries"]) == [7, [[0, 5]]]
    # renamed parameters, all given in order: read positionally
    assert keyword_arguments('start = "A", end = "B"', ["startGene", "endGene"]) == ["A", "B"]
    assert keyword_arguments('{"a": 1, "b": [2]}', ["a", "b"]) == [1, [2]]
    with pytest.raises(NotRepresentable):
        keyword_arguments("n = 7", ["n", "queries"])


def test_find_signature_of_incomplete_starter():
    signature = find_signature("class Solution:\n    def f(self, nums: List[int], k: int) -> int:\n        ")
    assert (signature.name, signature.parameters, signature.returns, signature.class_name) == (
        "f", ["nums", "k"], "int", "Solution")


def test_canonical_tree_values_drops_trailing_nulls_and_orphans():
    assert canonical_tree_values([1, None, 2, None, None, None]) == [1, None, 2]
    assert canonical_tree_values([]) == [] and canonical_tree_values(None) == []


# ----------------------------------------------------------------- LiveCodeBench

STDIN_PROBLEM = {
    "problem": "Print the sum of A and B.",
    "starter_code": "",
    "tests": [
        {"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
        {"input": '"7"', "output": "1", "testtype": "functional"},
    ],
}
CALL_PROBLEM = {
    "problem": "Return the sum of nums.",
    "starter_code": "class Solution:\n    def total(self, nums: List[int], k: int) -> int:\n        ",
    "tests": [
        {"input": "[1, 2]\n3", "output": "6", "testtype": "functional"},
        {"input": '"7"', "output": "1", "testtype": "functional"},  # wrong arity
    ],
}


def test_livecodebench_kinds_and_dropped_tests(tmp_path):
    path = write_json(tmp_path / "lcb_small.json", [STDIN_PROBLEM, CALL_PROBLEM])
    assert detect_format(path) == "livecodebench"
    problems, rejects = load_problems(path)
    assert rejects == []
    stdin, call = problems
    assert stdin.kind == "stdin" and [t.input for t in stdin.tests] == ["1 2\n"]
    assert stdin.metadata["dropped_tests"] == {"testtype 'functional' on a stdin problem": 1}
    assert call.kind == "call" and call.entry_point == "Solution().total" and call.prelude is None
    assert [(t.input, t.output) for t in call.tests] == [("[1, 2]\n3", "6")]
    assert call.metadata["dropped_tests"] == {"argument count does not match the signature": 1}
    assert stdin.id == "livecodebench/lcb_small-1" and stdin.metadata["source_file"] == "lcb_small.json"


def test_floats_as_annotated_writes_a_float_functions_int_answers_as_floats():
    assert floats_as_annotated(2, "float") == 2.0 and type(floats_as_annotated(2, "float")) is float
    assert [type(x) for x in floats_as_annotated([1, 2.5, None], "List[Optional[float]]")] == [float, float, type(None)]
    assert [type(x) for x in floats_as_annotated([1, 2.5], "List[int]")] == [int, float]
    assert [[type(x) for x in xs] for xs in floats_as_annotated([[1], [2]], "List[List[float]]")] == [[float], [float]]
    assert floats_as_annotated(2, "int") == 2 and floats_as_annotated(True, "float") is True
    # 2**53 + 1 has no exact float: it stays the int it was written as.
    assert floats_as_annotated(2**53 + 1, "float") == 2**53 + 1


def test_a_float_functions_int_answer_becomes_a_float_test(tmp_path):
    # The answer "2" of a function returning float is the float 2.0, so that a returned
    # 2.0000001 meets it within the tolerance for floats (an int is met only exactly).
    record = {"problem": "Return the mean.", "starter_code": "class Solution:\n    def mean(self, xs: List[int]) -> float:\n        ",
              "tests": [{"input": "[1, 3]", "output": "2", "testtype": "functional"},
                        {"input": "[1, 2]", "output": "1.5", "testtype": "functional"}]}
    [problem], _ = load_problems(write_json(tmp_path / "lcb_float.json", [record]))
    assert [t.output for t in problem.tests] == ["2.0", "1.5"]


def test_livecodebench_problem_left_without_tests_is_rejected(tmp_path):
    only_functional = dict(STDIN_PROBLEM, tests=[STDIN_PROBLEM["tests"][1]])
    path = write_json(tmp_path / "lcb.json", [only_functional])
    problems, rejects = load_problems(path, "livecodebench")
    assert problems == [] and len(rejects) == 1
    assert rejects[0].field == "tests" and rejects[0].reason.startswith("no tests left")
    assert "row 1: field 'tests'" in str(rejects[0])


def test_test_shared_by_many_problems_is_dropped(tmp_path):
    shared = {"input": "9\n", "output": "1\n", "testtype": "stdin"}
    records = [
        {"problem": f"Problem {i}", "starter_code": "", "tests": [{"input": f"{i}\n", "output": f"{i}\n", "testtype": "stdin"}, shared]}
        for i in range(4)
    ]
    problems, _ = load_problems(write_json(tmp_path / "lcb.json", records))
    assert all(len(p.tests) == 1 for p in problems)
    assert problems[0].metadata["dropped_tests"] == {"test shared with many other problems of the file": 1}


def test_shared_test_is_dropped_when_tests_are_a_json_string(tmp_path):
    shared = {"input": "9\n", "output": "1\n", "testtype": "stdin"}
    records = [
        {"problem": f"Problem {i}", "starter_code": "",
         "tests": json.dumps([{"input": f"{i}\n", "output": f"{i}\n", "testtype": "stdin"}, shared])}
        for i in range(4)
    ]
    problems, _ = load_problems(write_json(tmp_path / "lcb.json", records))
    assert [len(p.tests) for p in problems] == [1, 1, 1, 1]


def test_missing_field_names_file_row_and_field(tmp_path):
    path = write_json(tmp_path / "lcb.json", [STDIN_PROBLEM, {"problem": "x", "tests": []} | {"starter_code": 3}])
    problems, rejects = load_problems(path, "livecodebench")
    assert len(problems) == 1
    assert str(rejects[0]) == f"{path}: row 2: field 'starter_code': expected str, got int"
    missing = write_json(tmp_path / "lcb2.json", [{"problem": "x", "starter_code": ""}])
    _, rejects = load_problems(missing, "livecodebench")
    assert (rejects[0].row, rejects[0].field, rejects[0].reason) == (1, "tests", "missing field")


def test_unparseable_rows_do_not_stop_conversion(tmp_path):
    path = write_jsonl(tmp_path / "LeetCodeDataset-small.jsonl", ["{not json", LEETCODE_RECORD, "[1, 2]"])
    problems, rejects = load_problems(path, "leetcodedataset")
    assert len(problems) == 1
    assert [(r.row, r.field, r.reason) for r in rejects] == [(1, "(json)", "unparseable row"), (3, "(row)", "unparseable row")]


def test_stdin_checks_from_statement(tmp_path):
    statements = [
        "Print x. Your answer is accepted if its absolute or relative error is at most 10^{-6}.",
        "Print any permutation. If there are multiple answers, print any of them.",
        "This is an interactive problem.",
    ]
    records = [
        {"problem": text, "starter_code": "", "tests": [{"input": f"{i}\n", "output": "1\n", "testtype": "stdin"}]}
        for i, text in enumerate(statements)
    ]
    problems, rejects = load_problems(write_json(tmp_path / "lcb.json", records))
    assert problems[0].checker is not None and problems[0].checker.float_tolerance == pytest.approx(1e-6)
    assert problems[0].metadata["checker_rule"] == (
        "tolerance 1e-06 (either): 'Your answer is accepted if its absolute or relative error is at most 10^{-6}.'")
    assert [r.reason for r in rejects] == ["several correct outputs", "interactive"]


@pytest.mark.parametrize("statement, tolerance, kind", [
    ("Your answer is accepted if its absolute or relative error is at most 10^{-6}.", 1e-6, "either"),
    ("It is judged correct if the relative or absolute error does not exceed 1e-9.", 1e-9, "either"),
    ("Answers within an absolute error of 10^{-2} of the true value are accepted.", 1e-2, "absolute"),
    ("Print the area; an absolute error of at most 10^-4 is allowed.", 1e-4, "absolute"),
    ("Your output is correct if its relative error is at most 10^{-5}.", 1e-5, "relative"),
])
def test_the_statement_says_which_error_its_tolerance_bounds(statement, tolerance, kind):
    checker = stdin_checker(statement)
    assert checker is not None
    assert checker.float_tolerance == pytest.approx(tolerance) and checker.float_tolerance_kind == kind


# --------------------------------------------------------- CodeContests / Codeforces


def test_codecontests_and_codeforces(tmp_path):
    contests = write_json(tmp_path / "codecontests_test.json", [
        {"problem": "Add.\n\nTime Limit: {'seconds': 2, 'nanos': 0}\nMemory Limit: 268435456 Bytes\n",
         "tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]}},
        {"problem": "Broken.", "tests": {"inputs": ["1\n", "2\n"], "outputs": ["1\n"]}},
    ])
    assert detect_format(contests) == "codecontests"
    problems, rejects = load_problems(contests)
    assert problems[0].prompt == "Add." and problems[0].metadata["original_time_limit_s"] == 2
    assert problems[0].metadata["original_memory_limit_mb"] == 256
    assert rejects[0].field == "tests" and "2 inputs but 1 outputs" in rejects[0].message
    forces = write_json(tmp_path / "codeforces_test.json", [
        {"problem": "Min max.\n\nTags:\n['math']\n\nTime Limit: 1000 ms\nMemory Limit: 256 MB\n",
         "tests": [{"input": "1\n1 2", "output": "1 2"}]},
    ])
    problems, rejects = load_problems(forces)
    assert problems[0].tags == ["math"] and problems[0].metadata["original_time_limit_s"] == 1.0


# ---------------------------------------------------------------- LeetCodeDataset

LEETCODE_RECORD = {
    "task_id": "shortest-distance",
    "question_id": 3243,
    "difficulty": "Medium",
    "tags": ["Graph"],
    "estimated_date": "2024-08-04",
    "problem_description": "Find distances.",
    "starter_code": "class Solution:\n    def shortest(self, n: int, queries: List[List[int]]) -> List[int]:\n        ",
    "prompt": "from typing import *\n",
    "completion": "class Solution:\n    def shortest(self, n, queries):\n        return [n] * len(queries)\n",
    "entry_point": "Solution().shortest",
    "test": "def check(candidate):\n    assert candidate(n = 7, queries = [[0, 5]]) == [7]\n",
    "input_output": [
        {"input": "n = 7, queries = [[0,5]]", "output": "[7]"},
        {"input": "n = [2] * 100, queries = []", "output": "[]"},
        {"input": "n = 3, queries = [[0,1]]", "output": "Error: list index out of range"},
    ],
}


def test_leetcodedataset_call_problem(tmp_path):
    path = write_jsonl(tmp_path / "LeetCodeDataset-small.jsonl.gz", [LEETCODE_RECORD])
    assert detect_format(path) == "leetcodedataset"
    [problem], rejects = load_problems(path)
    assert rejects == []
    assert problem.id == "leetcodedataset/shortest-distance" and problem.entry_point == "Solution().shortest"
    assert problem.prelude == "from typing import *\n"
    assert [(t.input, t.output) for t in problem.tests] == [("7\n[[0, 5]]", "[7]")]
    assert (problem.difficulty, problem.date, problem.tags) == ("Medium", "2024-08-04", ["Graph"])
    assert problem.metadata["reference_solution"] == LEETCODE_RECORD["completion"]
    assert problem.metadata["dropped_tests"] == {
        "unparseable input (an argument is an expression, not a literal)": 1,
        "output is a recorded error, not an answer": 1,
    }


def test_leetcodedataset_unparseable_input_output_rejects_problem(tmp_path):
    record = dict(LEETCODE_RECORD, input_output="[{'input': 'n = 7'")
    path = write_jsonl(tmp_path / "LeetCodeDataset.jsonl", [record])
    problems, rejects = load_problems(path, "leetcodedataset")
    assert problems == [] and (rejects[0].field, rejects[0].reason) == ("input_output", "unparseable tests")


def test_leetcodedataset_tree_problem_uses_adapter(tmp_path):
    record = dict(
        LEETCODE_RECORD,
        task_id="invert-tree",
        starter_code="class Solution:\n    def invertTree(self, root: Optional[TreeNode]) -> Optional[TreeNode]:\n        ",
        entry_point="Solution().invertTree",
        input_output=[{"input": "root = [2,1,3]", "output": "[2,3,1]"}, {"input": "root = []", "output": "[]"}],
    )
    [problem], _ = load_problems(write_jsonl(tmp_path / "LeetCodeDataset.jsonl", [record]))
    assert problem.entry_point == "_Adapter().invertTree"
    assert "class _Adapter" in problem.prelude and problem.prelude.startswith("from typing import *\n")
    assert [(t.input, t.output) for t in problem.tests] == [("[2, 1, 3]", "[2, 3, 1]"), ("[]", "[]")]
    compile(problem.prelude, "<prelude>", "exec")  # compiles; it is run only in the sandbox


# ---------------------------------------------------------------------------- APPS


def test_apps_call_and_stdin(tmp_path):
    path = write_jsonl(tmp_path / "APPS_small.jsonl", [
        {"id": 1, "name": "1", "difficulty": "introductory", "description": "Pin.", "starter_code": "\ndef validate_pin(pin):\n\t",
         "sample_io": [], "test_list": [{"input": "1234", "output": [True]}, {"input": "a234", "output": [False]}]},
        {"id": 2, "name": "2", "difficulty": "interview", "description": "Sum.", "starter_code": "",
         "sample_io": [], "test_list": [{"input": "1 2\n", "output": ["3\n"]}]},
    ])
    assert detect_format(path) == "apps"
    call, stdin = load_problems(path)[0]
    # one value in the column is not a literal, so the whole column is strings
    assert [t.input for t in call.tests] == ['"1234"', '"a234"'] and call.entry_point == "validate_pin"
    assert stdin.kind == "stdin" and stdin.tests[0].output == "3\n"


# -------------------------------------------------------------- canonical round trip


def test_converted_problems_round_trip(tmp_path):
    path = write_json(tmp_path / "lcb.json", [STDIN_PROBLEM, CALL_PROBLEM])
    problems, _ = load_problems(path)
    write_problems(tmp_path / "out.jsonl", problems)
    assert read_problems(tmp_path / "out.jsonl") == problems


def test_cli_convert(tmp_path):
    from typer.testing import CliRunner

    from microcoder.cli import app

    path = write_json(tmp_path / "lcb.json", [STDIN_PROBLEM, dict(STDIN_PROBLEM, tests=[])])
    out, rejects = tmp_path / "out.jsonl", tmp_path / "rejects.jsonl"
    result = CliRunner().invoke(app, ["data", "convert", str(path), "--out", str(out), "--rejects", str(rejects)])
    assert result.exit_code == 0, result.output
    assert "1 converted, 1 rejected" in result.output
    assert len(read_problems(out)) == 1
    [reject] = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert (reject["row"], reject["field"]) == (2, "tests")


# ------------------------------------------------------- recorded asserts (sandbox)

HUMANEVAL_RECORD = {
    "task_id": "HumanEval/0",
    "prompt": "def helper(x):\n    return x + 1\n\n\ndef add(a, b):\n    \"\"\"Add a and b.\"\"\"\n",
    "canonical_solution": "    return a + b\n",
    "entry_point": "add",
    "test": "\n\ndef check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(*(2, 2)) == 4\n"
            "    assert candidate(1, 2) == 3\n    assert candidate((1,), (2,)) == [1, 2] or True\n",
}


@pytest.fixture(scope="module")
def sandbox():
    import microcoder.evaluator.sandbox as sandbox_module
    with sandbox_module.Sandbox(workers=2) as box:
        yield box


def test_humaneval_recording(tmp_path, sandbox):
    broken = dict(HUMANEVAL_RECORD, task_id="HumanEval/1", canonical_solution="    return a - b\n")
    unjson = dict(HUMANEVAL_RECORD, task_id="HumanEval/2", test="def check(candidate):\n    assert candidate({1}, {2}) == {1, 2} or True\n",
                  canonical_solution="    return a | b\n")
    path = write_jsonl(tmp_path / "HumanEval.jsonl.gz", [HUMANEVAL_RECORD, broken, unjson])
    assert detect_format(path) == "humaneval"
    problems, rejects = load_problems(path, sandbox=sandbox)
    [problem] = problems
    assert problem.entry_point == "add" and problem.prelude == DEFAULT_CALL_PRELUDE + "\n" + HUMANEVAL_RECORD["prompt"]
    # distinct calls in call order; tuples recorded as lists
    assert [(t.input, t.output) for t in problem.tests] == [("1\n2", "3"), ("2\n2", "4"), ("[1]\n[2]", "[1, 2]")]
    assert problem.metadata["reference_solution"].endswith("return a + b\n")
    assert [r.reason for r in rejects] == ["reference fails its own tests", "no tests left (not JSON-representable argument: set)"]


def test_recording_tests_that_draw_random_inputs_is_reproducible(tmp_path, sandbox):
    drawn = dict(HUMANEVAL_RECORD, test="import random\n\ndef check(candidate):\n"
                 "    for _ in range(3):\n        a = random.randint(0, 10 ** 9)\n        assert candidate(a, 1) == a + 1\n")
    path = write_jsonl(tmp_path / "HumanEval.jsonl.gz", [drawn])
    builds = [[(t.input, t.output) for t in load_problems(path, sandbox=sandbox)[0][0].tests] for _ in range(2)]
    assert len(builds[0]) == 3 and builds[0] == builds[1]


def test_mbpp_and_humanevalpack_recording(tmp_path, sandbox):
    mbpp = write_jsonl(tmp_path / "MBPP.jsonl", [{
        "task_id": 7, "text": "Write a function to square a number.", "code": "def square(x):\r\n\treturn x * x",
        "test_list": ["assert square(2) == 4", "assert square(3) == 9"], "test_setup_code": "", "challenge_test_list": [],
    }])
    [problem], _ = load_problems(mbpp, sandbox=sandbox)
    assert problem.id == "mbpp/7" and problem.entry_point == "square"
    assert [(t.input, t.output) for t in problem.tests] == [("2", "4"), ("3", "9")]
    pack = dict(HUMANEVAL_RECORD, task_id="Python/0", buggy_solution="    return a - b\n", bug_type="operator misuse",
                test=HUMANEVAL_RECORD["test"].replace("candidate", "add") + "\ncheck(add)\n")
    [problem], _ = load_problems(write_jsonl(tmp_path / "humanevalpack.jsonl", [pack]), sandbox=sandbox)
    assert problem.source == "humanevalpack" and problem.metadata["buggy_solution"].endswith("return a - b\n")
    assert len(problem.tests) == 3


def test_node_adapter_prelude_compiles_without_warnings():
    import warnings

    from microcoder.data.leetcode_nodes import adapter_prelude
    from microcoder.data.literals import find_signature

    for returns in ("List[int]", "Optional[TreeNode]", "List[Optional[ListNode]]"):
        source = f"class Solution:\n    def f(self, root: Optional[TreeNode]) -> {returns}:\n        pass\n"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compile(adapter_prelude(find_signature(source, "f")), "prelude.py", "exec")


# ---------------------------------------------------------------- the table of sources


def test_every_source_is_one_module_registered_in_the_table():
    from microcoder.data import sources
    from microcoder.data.sources import SOURCES

    folder = Path(sources.__file__).parent
    modules = sorted(path.stem for path in folder.glob("*.py") if path.stem not in ("__init__", "common"))
    assert modules == sorted(SOURCES)
    for name, source in SOURCES.items():
        assert source.name == name and source.licence and source.description
        # the assert formats, and only they, are recorded in the sandbox
        assert source.assert_tests == (name in ("humaneval", "humanevalpack", "mbpp"))


def test_detection_tries_the_table_in_order(monkeypatch, tmp_path):
    from microcoder.data.sources import SOURCES

    # A HumanEvalPack record has every field HumanEval's detect asks for: the earlier entry wins.
    record = {"task_id": "Python/0", "prompt": "", "canonical_solution": "", "test": "", "entry_point": "f",
              "buggy_solution": ""}
    assert SOURCES["humaneval"].detect(record) and detect_format("x.jsonl", record) == "humanevalpack"
    # The table is what detection reads: a format taken out of it is no longer found.
    monkeypatch.delitem(SOURCES, "humanevalpack")
    assert detect_format("x.jsonl", record) == "humaneval"
    path = tmp_path / "pack.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(ValueError, match="unknown format 'humanevalpack'"):
        load_problems(path, "humanevalpack")


def test_the_convert_help_lists_every_source_from_the_table():
    from typer.testing import CliRunner

    from microcoder.cli import app
    from microcoder.data.sources import SOURCES

    shown = " ".join(CliRunner().invoke(app, ["data", "convert", "--help"], env={"COLUMNS": "400"}).output.split())
    for name, source in SOURCES.items():
        assert f"{name}: {source.description}" in shown
