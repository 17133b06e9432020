"""The corpus's checkers, test policy, labels, dates and reproducible reference times:
statement rules and helpers by hand, then the validate stage on hand-built problems with
the real sandbox. Nothing reads ../shared."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from microcoder.data.config import PipelineConfig, SourceConfig, ValidateConfig
from microcoder.data.datasheet import dates_section, section_on_test_counts
from microcoder.data.difficulty import normalise_difficulty, normalised_label
from microcoder.data.ingest import load_source, read_date_table
from microcoder.data.loaders import load_problems
from microcoder.data.stages import StageContext
from microcoder.data.validate import (
    SEVERAL_ANSWERS,
    _verdict_record,
    check_permuted_answers,
    inferred_call_checker,
    judge_flags,
    list_depth,
    longest_inputs,
    needs_retiming,
    permuted,
    band_of_test_count,
    validate_problems,
)
from microcoder.evaluator import Evaluator, EvaluatorConfig
from microcoder.problems import Checker, Problem, TestCase

ANY_ORDER = "Given nums and target, return the indices of the two numbers that add up to target. You may return the answer in any order."
TWO_SUM_STARTER = "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        "
TWO_SUM_REFERENCE = """
class Solution:
    def twoSum(self, nums, target):
        seen = {}
        for j, x in enumerate(nums):
            if target - x in seen:
                return [seen[target - x], j]
            seen[x] = j
"""
TWO_SUM_REVERSED = TWO_SUM_REFERENCE.replace("return [seen[target - x], j]", "return [j, seen[target - x]]")
TWO_SUM_WRONG = TWO_SUM_REFERENCE.replace("return [seen[target - x], j]", "return [j, j]")
TWO_SUM_TESTS = [("[2, 7, 11, 15]\n9", "[0, 1]"), ("[3, 2, 4]\n6", "[1, 2]"), ("[3, 3]\n6", "[0, 1]")]


def call(id: str, prompt: str, starter: str, tests, reference: str | None = None, **fields) -> Problem:
    metadata = {"reference_solution": reference} if reference else {}
    return Problem(id=id, prompt=prompt, kind="call", entry_point="Solution()." + starter.split("def ")[1].split("(")[0],
                   starter_code=starter, tests=[{"input": i, "output": o} for i, o in tests], metadata=metadata, **fields)


# ---------------------------------------------------------------- statement rules


def test_any_order_for_a_list_result_frees_level_0():
    checker, rule = inferred_call_checker(call("a", ANY_ORDER, TWO_SUM_STARTER, TWO_SUM_TESTS))
    assert checker.unordered_levels == [0] and rule.startswith("any order, levels [0]")
    # An existing checker (LeetCode's float tolerance) is kept and extended.
    tolerant = call("t", ANY_ORDER, TWO_SUM_STARTER, TWO_SUM_TESTS, checker=Checker(float_tolerance=1e-5))
    assert inferred_call_checker(tolerant)[0] == Checker(float_tolerance=1e-5, unordered_levels=[0])


def test_any_order_that_names_no_result_or_a_scalar_result_sets_nothing():
    # Something else happens in any order: the result's order is not freed.
    tasks = call("b", "You may complete the tasks in any order. Return the result as a list.", TWO_SUM_STARTER, TWO_SUM_TESTS)
    assert inferred_call_checker(tasks) is None
    # A bool has no order, though the sentence names the result.
    boolean = call("c", "Return true if you can concatenate the pieces and return the result in any order.",
                   "class Solution:\n    def f(self, xs: List[int]) -> bool:\n", [("[1]", "true")])
    assert inferred_call_checker(boolean) is None


def test_a_result_of_fixed_positions_frees_its_inner_lists():
    prompt = ("Return a list answer of size 2 where answer[0] is the integers only in nums1 and answer[1] those only "
              "in nums2. Note that the integers in the lists may be returned in any order.")
    problem = call("d", prompt, "class Solution:\n    def f(self, a: List[int], b: List[int]) -> List[List[int]]:\n",
                   [("[1, 2, 3]\n[2, 4, 6]", "[[1, 3], [4, 6]]")])
    assert inferred_call_checker(problem)[0].unordered_levels == [1]


GROUPS_STARTER = "class Solution:\n    def f(self, words: List[str]) -> List[List[str]]:\n"
GROUPS_TESTS = [('["eat", "tea", "tan"]', '[["eat", "tea"], ["tan"]]')]


@pytest.mark.parametrize("prompt, levels, undecided", [
    # LeetCode 49's wording: the groups are collections, so their insides are free too.
    ("Group the anagrams together. You can return the answer in any order.", [0, 1], False),
    # The outer order freed, the inner one fixed by the words.
    ("Return the groups in any order, but the words in each list must be sorted.", [0], False),
    ("Return all the triplets in any order. The elements inside each triplet can be in any order.", [0, 1], False),
    ("Return all possible permutations. You can return the answer in any order.", [0], False),
    ("Return all the subsets (the power set) in any order.", [0, 1], False),
    # Nested, outer freed, nothing said of the inner lists: level 0, listed for a hand decision.
    ("Return the intervals after merging, in any order.", [0], True),
])
def test_each_level_of_a_nested_result_is_freed_by_its_own_words(prompt, levels, undecided):
    checker, rule = inferred_call_checker(call("g", prompt, GROUPS_STARTER, GROUPS_TESTS))
    assert checker.unordered_levels == levels
    assert ("inner order undecided" in rule) is undecided


def test_list_depth_from_the_annotation_else_from_the_outputs():
    assert list_depth("List[List[int]]", []) == 2 and list_depth("int", [[1]]) == 0
    assert list_depth(None, [[[1], [2]], []]) == 2 and list_depth(None, [[1], 2]) == 0


def test_several_call_results_are_flagged_and_a_fixed_choice_is_not():
    several = call("e", "If there are multiple answers, return any of them.", TWO_SUM_STARTER, TWO_SUM_TESTS)
    assert judge_flags(several)[0] == SEVERAL_ANSWERS
    fixed = call("f", "If there are multiple answers, return the answer that occurs last.", TWO_SUM_STARTER, TWO_SUM_TESTS)
    assert judge_flags(fixed) is None
    stdin = Problem(id="s", prompt="If there are many such sequences, you may output any.", kind="stdin",
                    tests=[{"input": "1", "output": "1"}])
    assert judge_flags(stdin)[0] == "several correct outputs"


@pytest.mark.parametrize("sentence", [
    "Return the indices in any arbitrary order.", "The order of the output does not matter.",
    "The order in your answer doesn't matter.", "You can return the pairs in an arbitrary order."])
def test_more_ways_of_freeing_the_result_order(sentence):
    checker, _ = inferred_call_checker(call("o", "Find the pairs. " + sentence, TWO_SUM_STARTER, TWO_SUM_TESTS))
    assert checker.unordered_levels == [0]


@pytest.mark.parametrize("sentence, several", [
    ("If there are several, return any permutation of them.", True), ("Return any string that works.", True),
    ("You may find any valid split.", True), ("Find any of them.", True),
    ("Return the permutation that is lexicographically smallest.", False),
    ("Find the answer for any k.", False)])
def test_more_ways_of_accepting_several_results(sentence, several):
    assert (judge_flags(call("m", sentence, TWO_SUM_STARTER, TWO_SUM_TESTS)) is not None) is several


@pytest.mark.parametrize("sentence, several", [
    ("If there are many, print any of them.", True), ("Output any valid arrangement.", True),
    ("Print any string of length n.", True), ("Print the answer for any query.", False)])
def test_more_ways_of_accepting_several_outputs(sentence, several):
    problem = Problem(id="s", prompt=sentence, kind="stdin", tests=[{"input": "1", "output": "1"}])
    assert (judge_flags(problem) is not None) is several


def test_permuted_reverses_the_lists_at_the_levels_only():
    assert permuted([[1, 2], [3, 4]], [0]) == [[3, 4], [1, 2]]
    assert permuted([[1, 2], [3, 4]], [1]) == [[2, 1], [4, 3]]
    assert permuted([[1, 2], [3, 4]], [0, 1]) == [[4, 3], [2, 1]]


def test_the_permuted_check_counts_changed_answers_and_fails_a_wrong_level():
    # Tests 1 and 2 have two-item answers (reversal changes them); [[7]] does not change.
    problem = call("g", ANY_ORDER, TWO_SUM_STARTER, [("[1]\n1", "[0, 1]"), ("[2]\n2", "[2, 3]"), ("[3]\n3", "[7]")],
                   checker=Checker(unordered_levels=[0]))
    assert check_permuted_answers(problem) == (2, "")
    # At level 1 of a flat list nothing is permuted: no answer changes, the count says so.
    assert check_permuted_answers(problem.model_copy(update={"checker": Checker(unordered_levels=[1])})) == (0, "")


def test_the_permuted_check_fails_when_the_judge_ignores_the_checker(monkeypatch):
    import microcoder.data.validate as validate

    problem = call("h", ANY_ORDER, TWO_SUM_STARTER, [("[1]\n1", "[0, 1]")], checker=Checker(unordered_levels=[0]))
    original = validate.judge_call
    monkeypatch.setattr(validate, "judge_call", lambda expected, got, mode, checker: original(expected, got, mode, None))
    changed, reason = check_permuted_answers(problem)
    assert reason.startswith("test 1: the checker rejects the permuted expected result")


# ---------------------------------------------------------------- test policy, labels, dates


def test_longest_inputs_keeps_order_and_breaks_ties_by_position():
    tests = [TestCase(input=text, output="") for text in ("aa", "b", "cccc", "dd", "e")]
    # Lengths 2, 1, 4, 2, 1: the three longest are "cccc" and the two of length 2, in order.
    assert [t.input for t in longest_inputs(tests, 3)] == ["aa", "cccc", "dd"]
    assert [band_of_test_count(n) for n in (1, 4, 5, 15, 16, 100, 101)] == ["1", "4", "5-9", "10-15", "16-50", "51-100", "101+"]


def test_test_policy_config_is_checked():
    with pytest.raises(ValueError, match="max_tests"):
        ValidateConfig(min_tests=5, max_tests=3)
    with pytest.raises(ValueError, match="min_tests"):
        ValidateConfig(min_tests=0)
    with pytest.raises(ValueError, match="retime_above"):
        ValidateConfig(retime_above=0)


def test_labels_normalise_to_three_levels_keeping_the_raw_one():
    assert normalised_label("Meidum") == ("medium", "easy/medium/hard")
    assert normalised_label("EASY ") == ("easy", "easy/medium/hard")
    assert [normalised_label(raw)[0] for raw in ("introductory", "interview", "competition")] == ["easy", "medium", "hard"]
    assert normalised_label("2400") == (None, "unknown")
    problem = Problem(id="x", prompt="", kind="stdin", tests=[], difficulty="interview")
    normalise_difficulty(problem)
    normalise_difficulty(problem)  # a second pass keeps the raw label it recorded
    assert (problem.difficulty, problem.metadata["difficulty_label"]) == ("medium", {"raw": "interview", "scale": "apps"})


def test_date_table_json_and_csv_and_a_bad_line_named(tmp_path):
    (tmp_path / "dates.json").write_text(json.dumps({"two-sum": "2015-08-10"}))
    assert read_date_table(tmp_path / "dates.json") == {"two-sum": "2015-08-10"}
    (tmp_path / "dates.csv").write_text("slug,date\ntwo-sum,2015-08-10\n3sum,2015-09-01\n")
    assert read_date_table(tmp_path / "dates.csv") == {"two-sum": "2015-08-10", "3sum": "2015-09-01"}
    (tmp_path / "bad.csv").write_text("two-sum,2015-08-10\n3sum,Sept 2015\n")
    with pytest.raises(ValueError, match=r"bad.csv: line 2: expected a slug and a YYYY-MM-DD date"):
        read_date_table(tmp_path / "bad.csv")


LEETCODE_ROW = {"task_id": "two-sum", "question_id": 1, "difficulty": "Easy", "tags": ["Array"],
                "problem_description": ANY_ORDER, "starter_code": TWO_SUM_STARTER, "entry_point": "Solution().twoSum",
                "prompt": "from typing import *\n", "completion": TWO_SUM_REFERENCE, "test": "",
                "input_output": [{"input": "nums = [2,7,11,15], target = 9", "output": "[0, 1]"}]}


def test_a_date_table_dates_a_leetcode_source_by_slug(tmp_path):
    path = tmp_path / "LeetCodeDataset-mini.jsonl"
    path.write_text(json.dumps(LEETCODE_ROW) + "\n" + json.dumps(dict(LEETCODE_ROW, task_id="3sum")) + "\n")
    (tmp_path / "dates.csv").write_text("two-sum,2015-08-10\n")
    config = PipelineConfig(sources=[], progress=False, base_dir=str(tmp_path))
    problems, rejects = load_source(config, SourceConfig(path=str(path), dates="dates.csv"), StageContext(config))
    assert rejects == []
    assert [(p.id, p.date, p.metadata.get("date_from")) for p in problems] == [
        ("leetcodedataset/two-sum", "2015-08-10", "date table dates.csv"), ("leetcodedataset/3sum", None, None)]
    section = "\n".join(dates_section(problems, config))
    assert "1 dated problems, from 2015-08-10 to 2015-08-10; 1 undated" in section


def test_a_row_repeated_whole_is_a_duplicate_row_and_a_reused_id_is_not(tmp_path):
    row = {"id": 7, "name": "7", "difficulty": "introductory", "description": "Sum.", "starter_code": "",
           "sample_io": [], "test_list": [{"input": "1 2\n", "output": ["3\n"]}]}
    path = tmp_path / "APPS_dups.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (row, row, dict(row, description="Other."))) + "\n")
    problems, rejects = load_problems(path)
    assert len(problems) == 1
    assert [(r.row, r.reason) for r in rejects] == [(2, "duplicate row"), (3, "duplicate id")]
    assert "repeats row 1 exactly" in rejects[0].message


# ---------------------------------------------------------------- reference timing


def run(verdict: str, times: list[float]) -> SimpleNamespace:
    return SimpleNamespace(verdict=verdict, detail="", tests_passed=len(times), tests_total=2, test_cpu_seconds=times)


def test_near_limit_runs_are_retimed_and_the_least_time_kept():
    # Limit 4 s, from half of it: 2.1 s is near, 1.9 s is not; a timeout always is.
    assert needs_retiming(run("accepted", [0.1, 2.1]), 4.0, 0.5)
    assert not needs_retiming(run("accepted", [0.1, 1.9]), 4.0, 0.5)
    assert needs_retiming(run("time_limit_exceeded", [0.1]), 4.0, 0.5)
    # With limits derived as 3 x the slowest test over a 1 s floor, 0.34 s sets a limit.
    assert needs_retiming(run("accepted", [0.34]), 4.0, 0.5, 1.0 / 3)
    assert not needs_retiming(run("accepted", [0.3]), 4.0, 0.5, 1.0 / 3)
    # Three runs: a timeout and two passes; accepted, each test's least time of the passes.
    record = _verdict_record([run("time_limit_exceeded", [0.1]), run("accepted", [0.2, 3.9]), run("accepted", [0.1, 3.5])])
    assert record == {"verdict": "accepted", "detail": "", "tests_passed": 2, "tests_total": 2,
                      "test_cpu_s": [0.1, 3.5], "runs": 3, "accepted_runs": 2}


# ---------------------------------------------------------------- the validate stage, sandboxed


BURN = "import time\n_end = time.process_time() + {seconds}\nwhile time.process_time() < _end:\n    pass\n"


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("validate")
    config = PipelineConfig(sources=[], progress=False, work_dir=str(tmp), workers=1, time_limit_s=0.6)
    config.validate = ValidateConfig(min_tests=2, max_tests=2, time_limits_from_reference=False)
    problems = [
        call("two-sum", ANY_ORDER, TWO_SUM_STARTER, TWO_SUM_TESTS, TWO_SUM_REFERENCE),
        call("any-of-them", "Return a pair that adds up to target. If there are multiple answers, return any of them.",
             TWO_SUM_STARTER, TWO_SUM_TESTS, TWO_SUM_REFERENCE),
        call("one-test", "Return the indices.", TWO_SUM_STARTER, TWO_SUM_TESTS[:1], TWO_SUM_REFERENCE),
        # 0.4 s of CPU per call, against a 0.6 s limit: at 0.5 of it or more, so re-timed.
        call("slow", "Return the indices.", TWO_SUM_STARTER, TWO_SUM_TESTS[:2],
             TWO_SUM_REFERENCE.replace("        seen = {}", "        " + BURN.format(seconds=0.4).replace("\n", "\n        ") + "seen = {}")),
    ]
    config.stage_dir("validate").mkdir(parents=True)  # run_stage makes it in a build
    context = StageContext(config)
    try:
        output = validate_problems(problems, config, context)
    finally:
        context.close()
    cache = [json.loads(line) for line in (config.stage_dir("validate") / "reference_verdicts.jsonl").read_text().splitlines()]
    return output, {record["id"]: record for record in cache}


def test_validate_infers_checks_and_keeps_the_any_order_problem(validated):
    output, _ = validated
    kept = {p.id: p for p in output.problems}
    assert {r.id: r.reason for r in output.removals} == {"any-of-them": SEVERAL_ANSWERS,
                                                         "one-test": "fewer than 2 tests (min_tests)"}
    two_sum = kept["two-sum"]
    assert two_sum.checker == Checker(unordered_levels=[0])
    assert two_sum.metadata["checker_inferred"] == "statement"
    # max_tests 2: the two longest inputs stay ("[2, 7, 11, 15]\n9" and "[3, 2, 4]\n6").
    assert [t.input for t in two_sum.tests] == [i for i, _ in TWO_SUM_TESTS[:2]]
    assert two_sum.metadata["dropped_tests"] == {"over max_tests (2, the longest inputs kept)": 1}
    # Both kept answers have two items, so reversing them changes both.
    assert two_sum.metadata["checker_permuted_tests"] == {"tests": 2, "changed": 2}
    histogram = output.extra["tests_per_problem"][""]  # no pipeline_source: the problems' source, ""
    assert histogram == {"before": {"3": 2, "1": 1, "2": 1}, "after": {"2": 2}}
    section = "\n".join(section_on_test_counts(output.extra["tests_per_problem"], output.problems,
                                                  PipelineConfig(sources=[], validate=ValidateConfig(min_tests=2, max_tests=2))))
    assert "at least 2, at most 2 stored" in section and "|  | 1 / 0 | 1 / 2 | 2 / 0 |" in section


def test_the_corpus_problem_accepts_a_permuted_answer_and_rejects_a_wrong_one(validated):
    output, _ = validated
    two_sum = next(p for p in output.problems if p.id == "two-sum")
    with Evaluator(EvaluatorConfig(workers=1)) as evaluator:
        assert evaluator.evaluate_code(two_sum, TWO_SUM_REVERSED).verdict == "accepted"
        assert evaluator.evaluate_code(two_sum, TWO_SUM_WRONG).verdict == "wrong_answer"
        # The same permuted answer without the inferred checker is rejected.
        assert evaluator.evaluate_code(two_sum.model_copy(update={"checker": None}), TWO_SUM_REVERSED).verdict == "wrong_answer"


def test_a_reference_near_its_limit_is_run_three_times(validated):
    output, cache = validated
    assert (cache["slow"]["verdict"], cache["slow"]["runs"]) == ("accepted", 3)
    assert min(cache["slow"]["test_cpu_s"]) >= 0.4
    assert "runs" not in cache["two-sum"]  # milliseconds: run once
    assert "slow" in {p.id for p in output.problems}


def test_parquet_keeps_unordered_levels(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from microcoder.data.export import parquet_row_to_problem, write_parquet

    problem = call("p", ANY_ORDER, TWO_SUM_STARTER, TWO_SUM_TESTS, checker=Checker(unordered_levels=[0, 1]))
    write_parquet(tmp_path / "corpus.parquet", [problem])
    [row] = pq.read_table(tmp_path / "corpus.parquet").to_pylist()
    assert parquet_row_to_problem(row).checker == Checker(unordered_levels=[0, 1])


def test_parquet_keeps_the_tolerance_kind_and_the_test_marks(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from microcoder.data.export import parquet_row_to_problem, write_parquet

    absolute = call("a", ANY_ORDER, TWO_SUM_STARTER, TWO_SUM_TESTS,
                    checker=Checker(float_tolerance=1e-2, float_tolerance_kind="absolute"))
    absolute.tests[0].shown, absolute.tests[1].generated = True, True
    either = call("e", ANY_ORDER, TWO_SUM_STARTER, TWO_SUM_TESTS, checker=Checker(float_tolerance=1e-6))
    write_parquet(tmp_path / "corpus.parquet", [absolute, either])
    rows = pq.read_table(tmp_path / "corpus.parquet").to_pylist()
    assert [parquet_row_to_problem(row) for row in rows] == [absolute, either]
