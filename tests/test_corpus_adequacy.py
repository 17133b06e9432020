"""The adequacy benchmark's parts: its mutation operators, its independent generator, its own
reading of "shown"."""

from __future__ import annotations

import ast
import json
import random

from benchmarks.corpus_adequacy import (
    OPERATORS,
    mutants,
    mutate,
    mutation_sites,
    neighbour_inputs,
    shown_here,
    shown_outputs_program,
)
from microcoder.data.amplify import input_space
from microcoder.data.config import AmplifyConfig
from microcoder.problems import Problem, TestCase

SOURCE = """def f(nums, low, high):
    if not nums:
        return 0
    total = 0
    for i in range(len(nums)):
        if low < nums[i] and nums[i] <= high:
            total += nums[i]
    while total > 100:
        total = total - 100
    return max(total, sorted(nums)[0])
"""


def all_mutants_by_operator(source: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for site in mutation_sites(ast.parse(source)):
        mutated = mutate(source, site)
        if mutated is not None:
            found.setdefault(site[1].split(":")[0], []).append(mutated)
    return found


def test_every_operator_makes_the_one_change_it_names():
    made = all_mutants_by_operator(SOURCE)
    assert set(made) == set(OPERATORS) - {"bool"}  # no True/False literal in SOURCE
    assert any("if nums[i] <= high:" in m for m in made["drop-operand"])  # `low < nums[i] and` dropped
    assert any("if low < nums[i]:" in m for m in made["drop-operand"])
    assert any("if not (low < nums[i] and nums[i] <= high)" in m for m in made["negate"])
    assert any("nums[i + 1]" in m for m in made["index+1"]) and any("nums[i - 1]" in m for m in made["index-1"])
    assert any("range(len(nums) - 1)" in m for m in made["len-1"])
    assert any("sorted(nums, reverse=True)" in m for m in made["reverse-sort"])
    assert any("nums[i] < high" in m for m in made["compare"])  # `<=` for `<` and back
    assert any("if not nums:\n        return 0" not in m and "pass" in m for m in made["drop-return"])
    assert any("total = -1" in m for m in made["constant-1"])  # a constant changed
    for mutated_list in made.values():  # every mutant parses and differs from the source
        for mutated in mutated_list:
            ast.parse(mutated)
            assert ast.unparse(ast.parse(mutated)) != ast.unparse(ast.parse(SOURCE))


def test_mutants_take_the_operators_in_turn_and_follow_the_seed():
    chosen = mutants(SOURCE, 10, random.Random(0))
    operators = [operator for operator, _ in chosen]
    assert len(chosen) == 10 and len(set(operators)) == 10  # ten operators, not ten constants
    assert mutants(SOURCE, 10, random.Random(0)) == chosen
    assert mutants(SOURCE, 10, random.Random(1)) != chosen


STATEMENT = """Return the sum of nums[i] for i in [0, k).
Constraints:
1 <= nums.length <= 6
0 <= nums[i] <= 9
1 <= k <= nums.length
"""


def test_neighbours_are_new_inputs_inside_the_stated_constraints():
    problem = Problem(id="t/prefix", kind="call", entry_point="Solution().prefix", prompt=STATEMENT, source="t",
                      starter_code="class Solution:\n    def prefix(self, nums: List[int], k: int) -> int:\n",
                      tests=[TestCase(input="[1, 2, 3]\n2", output="3"), TestCase(input="[4, 0, 9, 9]\n4", output="22"),
                             TestCase(input="[5, 5, 1, 2, 3]\n1", output="5", generated=True)])
    found = neighbour_inputs(problem, 40, seed=3)
    corpus = [[json.loads(line) for line in test.input.split("\n")] for test in problem.tests]
    assert len(found) >= 20 and not [arguments for arguments in found if arguments in corpus]
    for nums, k in found:  # the statement's constraints, checked by hand
        assert 1 <= len(nums) <= 6 and all(0 <= x <= 9 for x in nums) and 1 <= k <= len(nums)
    assert neighbour_inputs(problem, 40, seed=3) == found
    # Built apart from the build's generator: its inputs are edits of the corpus's, so most
    # keep a corpus input's other argument as it was.
    space = input_space(problem.model_copy(update={"tests": problem.tests[:2]}), AmplifyConfig())
    assert space is not None and sum(any(arguments[1] == c[1] for c in corpus) for arguments in found) >= len(found) // 2
    # A promise in words ("it is guaranteed that ...") keeps every neighbour a reordering of a corpus input.
    promised = problem.model_copy(update={"prompt": STATEMENT + "It is guaranteed that the answer fits in an int.\n"})
    for nums, k in neighbour_inputs(promised, 40, seed=3):
        assert any(sorted(nums) == sorted(c[0]) and k == c[1] for c in corpus)


def test_shown_is_decided_by_the_benchmarks_own_reading_not_the_flags():
    statement = "Write f.\nYour code should pass these tests:\nassert f((1, 2), 'ab') == (3, None)\n"
    problem = Problem(id="m", kind="call", entry_point="f", prompt=statement, source="t", tests=[
        TestCase(input='[1, 2]\n"ab"', output="[3, null]", shown=False),  # a build that missed it
        TestCase(input='[2, 2]\n"ab"', output="[4, null]", shown=True)])  # a flag set wrongly
    assert [shown_here(problem, test) for test in problem.tests] == [True, False]
    program = shown_outputs_program(problem)
    assert program is not None and "[1, 2]" in program and "[2, 2]" not in program
    # A generated test whose every part appears somewhere in the statement is still no shown answer.
    generated = problem.model_copy(update={"tests": [TestCase(input='[1, 2]\n"ab"', output="[3, null]",
                                                              generated=True)]})
    assert shown_here(generated, generated.tests[0]) and shown_outputs_program(generated) is None
    stdin = Problem(id="s", kind="stdin", prompt="Input\n3   4\nOutput\n7", tests=[TestCase(input="3 4\n", output="7\n")])
    assert shown_here(stdin, stdin.tests[0])
