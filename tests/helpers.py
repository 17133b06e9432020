"""Small builders shared by the evaluator tests."""

from microcoder.problems import Problem


def stdin_problem(tests, problem_id="p", **fields):
    """A stdin problem from (input, output) pairs."""
    return Problem(id=problem_id, prompt="", kind="stdin",
                   tests=[{"input": given, "output": expected} for given, expected in tests], **fields)


def call_problem(tests, entry_point="Solution().solve", problem_id="c", **fields):
    """A call problem from (argument JSON lines, output JSON) pairs."""
    return Problem(id=problem_id, prompt="", kind="call", entry_point=entry_point,
                   tests=[{"input": given, "output": expected} for given, expected in tests], **fields)
