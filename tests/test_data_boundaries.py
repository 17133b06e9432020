"""Boundary inputs: at the edges the statement and the stored inputs define, never outside them."""

from __future__ import annotations

import calendar
import datetime
import json
import re
from collections import Counter

from microcoder.data.amplify import input_space, stored_arguments
from microcoder.data.boundaries import boundary_inputs, fits
from microcoder.data.config import AmplifyConfig, load_build_config
from microcoder.data.constraints import infer_domain
from microcoder.data.pipeline import build
from microcoder.problems import Problem, TestCase, read_problems
from tests.test_data_amplify import write_config

GRID = """Shift the grid k times: each element moves one place right, the last of a row to the next row.

Constraints:

m == grid.length
n == grid[i].length
1 <= m <= 5
1 <= n <= 5
-10 <= grid[i][j] <= 10
0 <= k <= 100
"""


def grid_problem() -> Problem:
    return Problem(id="t/shift", kind="call", entry_point="Solution().shiftGrid", prompt=GRID, source="t",
                   starter_code="class Solution:\n    def shiftGrid(self, grid: List[List[int]], k: int):\n",
                   tests=[TestCase(input="[[1, 2, 3], [4, 5, 6]]\n1", output="[[6, 1, 2], [3, 4, 5]]"),
                          TestCase(input="[[3, 8], [1, 9]]\n4", output="[[3, 8], [1, 9]]")],
                   metadata={"reference_solution": ""})


def edges_of(problem: Problem, count: int = 200) -> list[tuple[str, list]]:
    space = input_space(problem, AmplifyConfig())
    return boundary_inputs(space.domains, space.admits, stored_arguments(problem), problem.prompt,
                           bool(space.promises), count, 0, problem.id, 4000)


def test_grid_edges_reach_the_stated_sizes_and_values_and_a_shift_by_the_whole_grid():
    edges = edges_of(grid_problem())
    kinds = Counter(kind for kind, _ in edges)
    assert {"min size", "max size", "min value", "max value", "shift = size", "range end"} <= set(kinds)
    for kind, (grid, k) in edges:  # every input inside the statement's constraints, checked by hand here
        assert 1 <= len(grid) <= 5 and len({len(row) for row in grid}) == 1 and 1 <= len(grid[0]) <= 5, kind
        assert all(-10 <= cell <= 10 for row in grid for cell in row) and 0 <= k <= 100, kind
    grids = [grid for _, (grid, _) in edges]
    assert [[-10]] in grids or any(all(cell == -10 for row in g for cell in row) for g in grids)
    assert any(len(g) == 5 and len(g[0]) == 5 for g in grids)  # the stated largest grid
    assert any(len(g) == 1 and len(g[0]) == 1 for g in grids)  # and the smallest
    assert any(k == len(g) * len(g[0]) for kind, (g, k) in edges if kind == "shift = size")
    assert edges_of(grid_problem()) == edges  # seeded: the same inputs every build


DATES = """Count the days between two dates, given as YYYY-MM-DD.
Constraints:
The given dates are valid dates between the years 1971 and 2100.
"""


def test_dates_cross_leap_days_and_stay_valid_and_in_the_stated_years():
    problem = Problem(id="t/days", kind="call", entry_point="Solution().daysBetweenDates", prompt=DATES, source="t",
                      starter_code="class Solution:\n    def daysBetweenDates(self, date1: str, date2: str) -> int:\n",
                      tests=[TestCase(input='"2019-06-29"\n"2019-06-30"', output="1"),
                             TestCase(input='"2020-01-15"\n"2019-12-31"', output="15")])
    edges = edges_of(problem)
    assert edges and {kind for kind, _ in edges} == {"leap-year date"}
    for _, dates in edges:
        for text in dates:
            day = datetime.date.fromisoformat(text)  # a valid date, or this raises
            assert 1971 <= day.year <= 2100
    days = [text for _, dates in edges for text in dates]
    assert any(text.endswith("-02-29") and calendar.isleap(int(text[:4])) for text in days)
    assert "2100-03-01" in days or "2100-02-28" in days  # a century year that is not a leap year


def test_stated_distinct_and_sorted_lists_get_no_equal_items_and_keep_their_order():
    statement = ("Find the target in nums.\nConstraints:\n1 <= nums.length <= 6\n-50 <= nums[i] <= 50\n"
                 "All the integers of nums are unique.\nnums is sorted in ascending order.\n-50 <= target <= 50\n")
    problem = Problem(id="t/search", kind="call", entry_point="Solution().search", prompt=statement, source="t",
                      starter_code="class Solution:\n    def search(self, nums: List[int], target: int) -> int:\n",
                      tests=[TestCase(input="[-1, 0, 3, 5]\n3", output="2"), TestCase(input="[2, 7]\n1", output="-1"),
                             TestCase(input="[1, 4, 9]\n9", output="2")])
    edges = edges_of(problem)
    kinds = {kind for kind, _ in edges}
    assert {"min size", "max size", "min value", "max value", "zero"} <= kinds and "equal elements" not in kinds
    for _, (nums, target) in edges:
        assert nums == sorted(set(nums)) and 1 <= len(nums) <= 6 and all(-50 <= x <= 50 for x in nums)
        assert -50 <= target <= 50
    assert any(len(nums) == 6 for _, (nums, _) in edges) and any(target == -50 for _, (_, target) in edges)


def test_fits_checks_every_property_of_a_domain():
    sorted_distinct = infer_domain([[1, 2, 5], [0, 3, 4, 9]])
    assert fits(sorted_distinct, [1, 4, 7]) and not fits(sorted_distinct, [4, 1, 7])
    assert not fits(sorted_distinct, [1, 1, 7]) and not fits(sorted_distinct, [1, 2, 3, 4, 5])  # longest stored: 4
    permutation = infer_domain([[2, 0, 1], [1, 3, 0, 2]])
    assert fits(permutation, [2, 1, 0]) and not fits(permutation, [1, 2, 3])
    word = infer_domain(["abc", "cab"])
    assert fits(word, "bca") and not fits(word, "abd") and not fits(word, True)
    assert not fits(infer_domain([1, 5]), 1.5) and not fits(infer_domain([1, 5]), True)


TIE = """Return the sum of the multiples of 3 in [low, high].
Constraints:
1 <= low <= high <= 1000
"""
SUM_OF_MULTIPLES = ("class Solution:\n    def total(self, low: int, high: int) -> int:\n"
                    "        return sum(x for x in range(low, high + 1) if x % 3 == 0)\n")


def test_the_stage_answers_boundary_inputs_with_the_reference_and_counts_them(tmp_path):
    # No random inputs at all: every generated test is a boundary one, so ties and range
    # ends (low == high, high at the stated 1000) must come from the boundary set.
    problem = Problem(id="t/multiples", kind="call", entry_point="Solution().total", prompt=TIE, source="t",
                      starter_code="class Solution:\n    def total(self, low: int, high: int) -> int:\n",
                      tests=[TestCase(input="1\n10", output="18"), TestCase(input="4\n9", output="15"),
                             TestCase(input="5\n7", output="6")],
                      metadata={"reference_solution": SUM_OF_MULTIPLES})
    config = load_build_config(write_config(tmp_path, [problem], tests_per_problem=0, boundary_inputs=20))
    build(config, log=lambda _: None)
    (built,) = read_problems(config.stage_dir("export") / "microcoder-dataset.jsonl")
    generated = [[json.loads(line) for line in test.input.split("\n")] + [json.loads(test.output)]
                 for test in built.tests if test.generated]
    assert generated and all(answer == sum(x for x in range(low, high + 1) if x % 3 == 0)
                             for low, high, answer in generated)
    assert all(1 <= low <= high <= 1000 for low, high, _ in generated)
    assert any(low == high for low, high, _ in generated) and any(high == 1000 for _, high, _ in generated)
    made = built.metadata["amplified"]["boundary"]
    assert sum(made.values()) == len(generated) and made.get("tie", 0) >= 1
    datasheet = (config.stage_dir("export") / "datasheet.md").read_text()
    assert "## Boundary inputs" in datasheet and "| problems | 1 | 1 | " in datasheet  # the source named by its file


def test_strings_of_one_shape_around_their_integers_keep_it():
    import random

    from microcoder.data.amplify import draw

    problem = Problem(id="t/complex", kind="call", entry_point="Solution().multiply", prompt="Multiply.", source="t",
                      starter_code="class Solution:\n    def multiply(self, num1: str, num2: str) -> str:\n",
                      tests=[TestCase(input='"1+1i"\n"1+1i"', output='"0+2i"'),
                             TestCase(input='"1+-1i"\n"1+-1i"', output='"0+-2i"')])
    space = input_space(problem, AmplifyConfig())
    first = space.domains[0]
    assert first.number_shape == "#+#i" and first.low < -1 and first.high > 1  # the integers' range, widened
    drawn = [draw(first, random.Random(seed)) for seed in range(30)]
    assert all(re.fullmatch(r"-?\d+\+-?\d+i", value) for value in drawn) and len(set(drawn)) > 10
    assert {value for _, (value, _) in edges_of(problem)} >= {f"{first.low}+{first.low}i", "0+0i"}
    assert infer_domain(["12", "345"]).number_shape is None  # plain numbers: their digits have their own rules
    assert infer_domain(["1-2", "10-20"]).number_shape is None  # a minus or a separator: unknown
