"""The amplify stage: shown tests, constraints read from statements, generated inputs, and
the stage on the real path (the reference answering in the sandbox). Values by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from microcoder.data.amplify import (
    NO_HIDDEN,
    ONE_ANSWER,
    UNVERIFIED,
    promises,
    sample_output_disagrees,
    generate_inputs,
    input_space,
)
from microcoder.data.config import AmplifyConfig, load_build_config
from microcoder.data.constraints import (
    Relation,
    argument_names,
    checked_bounds,
    infer_domain,
    infer_relations,
    numeric_range,
    parse_constraints,
)
from microcoder.data.pipeline import build
from microcoder.data.shown import mark_shown, shown_in_statement, statement_values
from microcoder.problems import Problem, TestCase, read_problems

REPO = Path(__file__).resolve().parent.parent

STATEMENT = """You are given an array nums and an integer k. Return the sum of the k largest.

Example 1:
Input: nums = [3,1,2], k = 2
Output: 5

Example 2:
Input: nums = ['a'], k = True
Output: "x"

Constraints:

1 <= n == nums.length <= 8
-109 <= nums[i] <= 109
1 <= k <= nums.length
"""
REFERENCE = ("class Solution:\n    def largest(self, nums: List[int], k: int) -> int:\n"
             "        return sum(sorted(nums)[-k:])\n")


def largest_problem(**changes) -> Problem:
    fields = dict(id="t/largest", kind="call", entry_point="Solution().largest", prompt=STATEMENT,
                  starter_code="class Solution:\n    def largest(self, nums: List[int], k: int) -> int:\n",
                  tests=[TestCase(input="[3, 1, 2]\n2", output="5"), TestCase(input="[4, 4, 1, 0]\n3", output="9"),
                         TestCase(input="[-7, 5]\n1", output="5")],
                  metadata={"reference_solution": REFERENCE}, source="t")
    fields.update(changes)
    return Problem(**fields)


def test_a_test_is_shown_when_input_and_output_appear_in_the_statement():
    problem = largest_problem()
    # "[3, 1, 2]" is "nums = [3,1,2]" without spaces; "2" and "5" appear; quotes and case are not compared.
    assert shown_in_statement(problem, problem.tests[0])
    assert shown_in_statement(problem, TestCase(input='["a"]\ntrue', output='"x"'))
    assert not shown_in_statement(problem, problem.tests[1])  # [4,4,1,0] is nowhere in it
    assert [test.shown for test in mark_shown(problem).tests] == [True, False, False]
    stdin = Problem(id="s", kind="stdin", prompt="Input\n3 4\nOutput\n7\n", tests=[
        TestCase(input="3 4\n", output="7\n"), TestCase(input="1 1\n", output="2\n")])
    assert [test.shown for test in mark_shown(stdin).tests] == [True, False]


def test_a_test_is_shown_when_the_statement_prints_its_values_as_python_literals():
    statement = ("Find the similar elements.\nYour code should pass these tests:\n"
                 "assert similar((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)\n"
                 "assert pick({'a': None, 'b': True}, [ ( 1 ,2 ) ]) == {3, 1}\n")
    problem = Problem(id="m", kind="call", entry_point="similar", prompt=statement, tests=[
        TestCase(input="[3, 4, 5, 6]\n[5, 7, 4, 10]", output="[4, 5]"),
        TestCase(input='{"b": true, "a": null}\n[[1, 2]]', output="[1, 3]"),
        TestCase(input="[3, 4, 5]\n[5, 7, 4, 10]", output="[4, 5]")])
    # Tuples as lists, a dict's keys in any order with None/True as null/true, a set as its sorted items.
    assert [test.shown for test in mark_shown(problem).tests] == [True, True, False]
    assert statement_values("x = (1,)") >= {"[1]", "1"}
    # HTML entities and spacing of a stdin example do not hide it.
    stdin = Problem(id="s", kind="stdin", prompt="<pre>3  &gt;\n4</pre>Output: 7", tests=[
        TestCase(input="3 >\n 4\n", output="7\n")])
    assert mark_shown(stdin).tests[0].shown


MBPP_ROW = {"task_id": 2, "text": "Write a function to find the similar elements from the given two tuple lists.",
            "code": "def similar_elements(a, b):\n    return tuple(sorted(set(a) & set(b)))\n",
            "test_setup_code": "", "challenge_test_list": [],
            "test_list": ["assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)",
                          "assert similar_elements((1, 2, 3, 4),(5, 4, 3, 7)) == (3, 4)",
                          "assert similar_elements((11, 12, 14, 13),(17, 15, 14, 13)) == (13, 14)"]}


def test_an_mbpp_problem_printing_its_tests_with_tuples_gets_hidden_tests_or_goes(tmp_path):
    source = tmp_path / "MBPP.jsonl"
    source.write_text(json.dumps(MBPP_ROW) + "\n")
    for enabled in (True, False):
        work = tmp_path / str(enabled)
        config = {"work_dir": str(work), "progress": False, "sources": [{"path": str(source)}],
                  "dedup": {"near": False}, "amplify": {"tests_per_problem": 12, "enabled": enabled}}
        path = tmp_path / f"{enabled}.yaml"
        path.write_text(yaml.safe_dump(config))
        built = load_build_config(path)
        build(built, log=lambda _: None)
        corpus = read_problems(built.stage_dir("export") / "microcoder-dataset.jsonl")
        if enabled:  # its three asserts are the statement's: shown; the generated tests are hidden
            (problem,) = corpus
            stored = [test for test in problem.tests if not test.generated]
            assert len(stored) == 3 and all(test.shown for test in stored)
            assert sum(test.generated for test in problem.tests) >= 6
            continue
        assert corpus == []  # no generated tests: every test is shown, so the problem goes
        removed = [json.loads(line) for line in (built.stage_dir("amplify") / "removed.jsonl").read_text().splitlines()]
        assert [(r["id"], r["reason"]) for r in removed] == [("mbpp/2", NO_HIDDEN)]


def test_constraints_are_read_from_the_statement_and_checked_against_the_stored_inputs():
    names = argument_names(largest_problem())
    assert names == ["nums", "k"]
    bounds, facts = parse_constraints(STATEMENT + "nums consists of distinct values.\n", names)
    assert numeric_range(bounds, "len(nums)") == (1, 8)
    assert numeric_range(bounds, "k") == (1, None)  # its upper bound is len(nums), an expression
    assert any(bound.measure == "k" and bound.high == "len(nums)" for bound in bounds)
    assert numeric_range(bounds, "item(nums)") == (-109, 109)
    assert facts["distinct"] == {"nums": True}
    # The stored -7 fits -109 as written; a stored 500 does not, so 109 is read again as 10^9.
    inputs = [[[3, 1, 2], 2], [[500, 4], 1]]
    kept, dropped = checked_bounds(bounds, inputs, names)
    assert numeric_range(kept, "item(nums)") == (-(10**9), 10**9) and dropped == []
    # A bound no reading can fit (k <= len(nums) broken by a stored input) is dropped, named by its line.
    kept, dropped = checked_bounds(bounds, [[[1], 3]], names)
    assert dropped == ["1 <= k <= nums.length"]


def test_chained_and_strict_bounds():
    bounds, _ = parse_constraints("Constraints:\n0 <= left <= right < 10^5\n", ["left", "right"])
    assert numeric_range(bounds, "left") == (0, 99999)  # the chain's ends bound every part inside it
    assert numeric_range(bounds, "right") == (0, 99999)
    assert any(b.measure == "right" and b.low == "left" for b in bounds)


def test_domains_and_relations_from_the_stored_inputs():
    assert infer_domain([[1, 2, 3], [0, 5, 9, 10]]).is_sorted
    permutation = infer_domain([[2, 0, 1], [1, 3, 0, 2]])
    assert permutation.permutation_base == 0 and permutation.distinct and not permutation.is_sorted
    assert infer_domain(["aba", "xyzyx"]).palindrome
    assert infer_domain([[1, "a"], [2]]).kind == "fixed"  # mixed items: whole stored lists reused
    inputs = [[[3, 1, 2], 2], [[4, 4, 1, 0], 3], [[-7, 5], 1]]
    relations = infer_relations(inputs, ["nums", "k"])
    assert Relation("k", "<", "len(nums)") in relations
    # Two examples never order two plain numbers: a chance ordering is no promise.
    assert not [r for r in infer_relations([[1, 5], [2, 9]], ["a", "b"]) if r.left == "a" and r.right == "b"]


def test_generated_inputs_stay_in_the_space_and_are_new():
    problem = largest_problem()
    space = input_space(problem, AmplifyConfig())
    inputs = generate_inputs(problem, space, 40, seed=0, max_input_chars=4000)
    stored = [[[3, 1, 2], 2], [[4, 4, 1, 0], 3], [[-7, 5], 1]]
    assert len(inputs) == 40 and not [arguments for arguments in inputs if arguments in stored]
    assert len({json.dumps(arguments) for arguments in inputs}) == 40
    for nums, k in inputs:
        assert 1 <= len(nums) <= 8 and 1 <= k <= len(nums) and all(-109 <= x <= 109 for x in nums)
    assert max(len(nums) for nums, _ in inputs) > 4  # sizes grow beyond the stored ones, to the stated 8
    assert generate_inputs(problem, space, 40, seed=0, max_input_chars=4000) == inputs
    assert generate_inputs(problem, space, 40, seed=1, max_input_chars=4000) != inputs


def test_generated_inputs_do_not_depend_on_the_hash_seed():
    script = ("import json; from tests.test_data_amplify import largest_problem; "
              "from microcoder.data.amplify import input_space, generate_inputs; "
              "from microcoder.data.config import AmplifyConfig; p = largest_problem(); "
              "print(json.dumps(generate_inputs(p, input_space(p, AmplifyConfig()), 20, 0, 4000)))")
    outputs = {subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "3")}
    assert len(outputs) == 1


def write_config(tmp: Path, problems: list[Problem], **amplify) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    source = tmp / "problems.jsonl"
    source.write_text("".join(problem.model_dump_json() + "\n" for problem in problems))
    config = {"work_dir": str(tmp / "work"), "progress": False, "sources": [{"path": str(source), "format": "canonical"}],
              "validate": {"min_tests": 1}, "dedup": {"near": False},
              "amplify": {"tests_per_problem": 12, **amplify}}
    path = tmp / "data.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_stage_adds_hidden_tests_answered_by_the_reference_and_removes_what_has_none(tmp_path):
    unverified = largest_problem(id="t/unverified", metadata={},
                                 tests=[TestCase(input="[9, 8]\n1", output="9"), TestCase(input="[1]\n1", output="1")])
    all_shown = Problem(id="t/shown", kind="stdin", prompt="Input\n3\nOutput\n3\n", source="t",
                        tests=[TestCase(input="3\n", output="3\n")],
                        metadata={"reference_solution": "print(input())"})
    config = load_build_config(write_config(tmp_path, [largest_problem(), unverified, all_shown]))
    build(config, log=lambda _: None)
    corpus = {p.id: p for p in read_problems(config.stage_dir("export") / "microcoder-dataset.jsonl")}
    assert list(corpus) == ["t/largest"]
    removed = {json.loads(line)["id"]: json.loads(line)["reason"]
               for line in (config.stage_dir("amplify") / "removed.jsonl").read_text().splitlines()}
    assert removed == {"t/unverified": UNVERIFIED, "t/shown": NO_HIDDEN}
    largest = corpus["t/largest"]
    generated = [test for test in largest.tests if test.generated]
    boundary = sum(largest.metadata["amplified"]["boundary"].values())
    assert boundary >= 1 and len(generated) == 12 + boundary and not any(test.shown for test in generated)
    assert [test.shown for test in largest.tests[:3]] == [True, False, False]
    for test in generated:  # each answer is the reference's: the sum of the k largest
        nums, k = (json.loads(line) for line in test.input.split("\n"))
        assert json.loads(test.output) == sum(sorted(nums)[-k:])
    assert len(largest.metadata["reference_cpu_s"]) == len(largest.tests)
    assert largest.metadata["amplified"]["generated"] == len(generated) and largest.metadata["verified"] is True
    answers = (config.stage_dir("amplify") / "reference_answers.jsonl").read_text().splitlines()
    assert len(answers) == largest.metadata["amplified"]["candidates"] == len(generated)
    # A config may keep the unverified problem (its tests are not all shown).
    kept = load_build_config(write_config(tmp_path / "keep", [unverified], keep_unverified=True))
    build(kept, log=lambda _: None)
    (problem,) = read_problems(kept.stage_dir("export") / "microcoder-dataset.jsonl")
    assert problem.metadata["verified"] is False and not any(test.generated for test in problem.tests)


def test_a_promise_the_reference_breaks_on_makes_no_test(tmp_path):
    # The reference returns None outside its promise (k > len(nums) never happens in a stored
    # input, but only a stated relation would keep it out): no null-expected test is made.
    guarded = REFERENCE.replace("return sum", "if k > len(nums) or k < 1:\n            return None\n        return sum")
    problem = largest_problem(prompt="Return the sum of the k largest.", metadata={"reference_solution": guarded})
    config = load_build_config(write_config(tmp_path, [problem], tests_per_problem=30))
    build(config, log=lambda _: None)
    (built,) = read_problems(config.stage_dir("export") / "microcoder-dataset.jsonl")
    assert all(test.output != "null" for test in built.tests)
    assert built.metadata["amplified"]["generated"] >= 1


def test_export_writes_the_engines_files_and_a_seeded_split(tmp_path):
    pyarrow = pytest.importorskip("pyarrow.parquet")
    problems = [largest_problem(id=f"t/largest-{index}", tests=[TestCase(input=f"[{index}]\n1", output=str(index)),
                                                                 TestCase(input=f"[{index}, 1]\n2", output=str(index + 1))])
                for index in range(12)]
    config = load_build_config(write_config(tmp_path, problems, enabled=False))
    config.export.validation_fraction = 0.25
    build(config, log=lambda _: None)
    export = config.stage_dir("export")
    split = json.loads((export / "split.json").read_text())
    assert sorted(split["train"] + split["validation"]) == sorted(p.id for p in problems)
    verl = pyarrow.read_table(export / "verl" / "train.parquet").to_pylist()
    assert [row["extra_info"]["problem_id"] for row in verl] == split["train"]
    assert verl[0]["prompt"][1]["role"] == "user" and "class Solution" in verl[0]["prompt"][1]["content"]
    assert json.loads(verl[0]["reward_model"]["ground_truth"])["ref"] == split["train"][0]
    trl = pyarrow.read_table(export / "trl" / "validation.parquet").to_pylist()
    assert [row["problem_id"] for row in trl] == split["validation"] and trl[0]["prompt"][0]["role"] == "system"
    sheet = (export / "datasheet.md").read_text()
    assert "## Licences" in sheet and "## Shown and hidden tests" in sheet


def test_a_promise_in_words_keeps_generated_inputs_to_shuffles_of_stored_ones():
    statement = STATEMENT + "It is guaranteed that nums has no repeated value.\n"
    problem = largest_problem(prompt=statement)
    space = input_space(problem, AmplifyConfig())
    assert space.promises == ["It is guaranteed that nums has no repeated value"]
    stored = {tuple(sorted(nums)) + (k,) for nums, k in [[[3, 1, 2], 2], [[4, 4, 1, 0], 3], [[-7, 5], 1]]}
    inputs = generate_inputs(problem, space, 10, seed=0, max_input_chars=4000)
    assert inputs and all(tuple(sorted(nums)) + (k,) in stored for nums, k in inputs)
    assert promises("Return the answer. The input is generated such that a path exists.") == [
        "The input is generated such that a path exists"]
    assert promises("Return the sum of nums.") == []


def test_random_lists_repeat_items_now_and_then():
    problem = largest_problem()
    inputs = generate_inputs(problem, input_space(problem, AmplifyConfig()), 40, seed=0, max_input_chars=4000)
    assert sum(len(set(nums)) < len(nums) for nums, _ in inputs) >= 5


def test_hidden_tests_of_one_answer_remove_the_problem(tmp_path):
    # The reference answers 0 whatever the input: every generated test expects 0, which a
    # constant program passes.
    constant = Problem(id="t/zero", kind="call", entry_point="zero", prompt="Return zero.", source="t",
                       starter_code="def zero(n: int) -> int:\n",
                       tests=[TestCase(input="3", output="0"), TestCase(input="5", output="0")],
                       metadata={"reference_solution": "def zero(n):\n    return 0\n"})
    config = load_build_config(write_config(tmp_path, [constant, largest_problem()]))
    build(config, log=lambda _: None)
    removed = {json.loads(line)["id"]: json.loads(line)["reason"]
               for line in (config.stage_dir("amplify") / "removed.jsonl").read_text().splitlines()}
    assert removed == {"t/zero": ONE_ANSWER}


def test_a_sample_answer_other_than_the_stored_one_means_several_answers():
    statement = "Print any two numbers summing to n.\nSample Input\n10 7 100 250\nSample Output\n3 4\n"
    problem = Problem(id="s", kind="stdin", prompt=statement, tests=[TestCase(input="10 7 100 250\n", output="5 2\n"),
                                                                       TestCase(input="4 1 0\n", output="0 1\n")])
    assert sample_output_disagrees(problem) == problem.tests[0]
    agreeing = problem.model_copy(update={"tests": [TestCase(input="10 7 100 250\n", output="3 4\n")]})
    assert sample_output_disagrees(agreeing) is None
    # A short input shown by chance ("4" is in any statement) decides nothing.
    short = problem.model_copy(update={"tests": [TestCase(input="4\n", output="9\n")]})
    assert sample_output_disagrees(short) is None


def test_linked_list_lines_bound_the_one_list_argument():
    statement = ("Constraints:\nThe number of nodes in the list is in the range [0, 300].\n-100 <= Node.val <= 100\n"
                 "The list is guaranteed to be sorted in ascending order.")
    bounds, _ = parse_constraints(statement, ["head"])
    assert numeric_range(bounds, "len(head)") == (0, 300) and numeric_range(bounds, "item(head)") == (-100, 100)
    assert parse_constraints(statement, ["head", "k"])[0] == []  # two arguments: which list is meant is unknown
    assert promises(statement) == []  # sortedness is kept by the stored inputs' domain, not a promise


def test_strings_of_one_shape_keep_it():
    dates = infer_domain(["2019-06-29", "2020-01-15", "1971-12-31"])
    assert dates.template[4] == "-" and dates.template[0] == "12" and dates.template[5] == "01"
    from microcoder.data.amplify import draw
    import random
    drawn = [draw(dates, random.Random(seed)) for seed in range(20)]
    assert all(len(value) == 10 and value[4] == value[7] == "-" and value[0] in "12" for value in drawn)
    assert infer_domain(["abc", "xyz"]).template is None  # no separator: letters drawn freely
    assert infer_domain(["a-b", "ab-"]).template is None  # separators move: no shape
