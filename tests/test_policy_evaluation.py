"""`microcoder eval-model` with a fake generator of canned responses, so that judging and the
pass@1 aggregation are checked against numbers worked out by hand."""

import json

import pytest

from microcoder.policy.evaluation import ModelEvalConfig, ResultRow, cut_to_length, evaluate_model, pass_at_1_table
from microcoder.policy.generation import GeneratedText
from tests.helpers import call_problem, stdin_problem

SUM = stdin_problem([("1 2\n", "3\n"), ("5 7\n", "12\n")], problem_id="sum", source="alpha", difficulty="easy")
DOUBLE = stdin_problem([("4\n", "8\n")], problem_id="double", source="beta", difficulty="hard")
SQUARE = call_problem([("3", "9"), ("-2", "4")], entry_point="square", problem_id="square", source="alpha",
                      difficulty="hard")
PROBLEMS = [SUM, DOUBLE, SQUARE]


def block(code):
    return f"```python\n{code}\n```"


RIGHT_SUM = block("a, b = map(int, input().split())\nprint(a + b)")
WRONG_SUM = block("a, b = map(int, input().split())\nprint(a - b)")
RIGHT_DOUBLE = block("print(2 * int(input()))")
RIGHT_SQUARE = block("def square(x):\n    return x * x")
# Right, but long: cut to 50 characters it loses its closing fence, so it has no code.
LONG_SQUARE = block("# " + "a comment that runs on " * 3 + "\ndef square(x):\n    return x ** 2")

CANNED = {
    "sum": [RIGHT_SUM, WRONG_SUM, RIGHT_SUM, "I cannot solve this."],  # 2 of 4 right
    "double": [RIGHT_DOUBLE, block("print(int(input()) + 2)"), block("print(8)"), WRONG_SUM],  # 2 of 4 (8 == 8)
    "square": [RIGHT_SQUARE, LONG_SQUARE, RIGHT_SQUARE, LONG_SQUARE],  # 4 of 4; 2 of 4 at 50 tokens
}


class CannedGenerator:
    """One token per character; response j of a problem is CANNED[id][j], cut at the limit."""

    def __init__(self, fail_on_call=None):
        self.calls = []
        self.fail_on_call = fail_on_call

    def generate(self, problems, n, max_new_tokens, seed):
        self.calls.append(([problem.id for problem in problems], seed))
        if self.fail_on_call is not None and len(self.calls) == self.fail_on_call:
            raise KeyboardInterrupt("simulated interruption")
        groups = []
        for problem in problems:
            group = []
            for text in CANNED[problem.id][:n]:
                ids = [ord(char) for char in text]
                group.append(GeneratedText(ids[:max_new_tokens], self.decode(ids[:max_new_tokens]),
                                           truncated=len(ids) > max_new_tokens))
            groups.append(group)
        return groups

    def decode(self, token_ids):
        return "".join(chr(token) for token in token_ids)


def config(tmp_path, **fields):
    defaults = dict(out=tmp_path / "eval", n=4, max_new_tokens=(50, 4096), problems_per_chunk=1, workers=2)
    return ModelEvalConfig(**(defaults | fields))


def test_pass_at_1_overall_by_source_and_difficulty_at_two_lengths(tmp_path):
    summary = evaluate_model(config(tmp_path), generator=CannedGenerator(), problems=PROBLEMS)
    full = summary["pass@1"]["4096"]
    # Per problem at 4096 tokens: sum 2/4, double 2/4, square 4/4.
    assert full["all"]["pass@1"] == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    # Standard error of the mean of (0.5, 0.5, 1): deviations -1/6, -1/6, 1/3 square to 1/6,
    # over m - 1 = 2 is 1/12, over m = 3 is 1/36; its root is 1/6.
    assert full["all"] == {"pass@1": pytest.approx(2 / 3), "stderr": pytest.approx(1 / 6), "problems": 3,
                           "samples": 12}
    # A group of one problem has no standard error; hard = (0.5, 1): sqrt(0.125 / 2) = 0.25.
    assert full["difficulty"]["easy"]["stderr"] is None
    assert full["difficulty"]["hard"]["stderr"] == pytest.approx(0.25)
    # alpha = {sum, square}: (0.5 + 1) / 2; beta = {double}: 0.5.
    assert full["source"]["alpha"]["pass@1"] == pytest.approx(0.75)
    assert full["source"]["beta"]["pass@1"] == pytest.approx(0.5)
    # easy = {sum}: 0.5; hard = {double, square}: (0.5 + 1) / 2; easy listed first.
    assert list(full["difficulty"]) == ["easy", "hard"]
    assert full["difficulty"]["easy"]["pass@1"] == pytest.approx(0.5)
    assert full["difficulty"]["hard"]["pass@1"] == pytest.approx(0.75)
    assert full["fraction_truncated"] == 0.0
    # At 50 tokens (one per character) every response longer than 50 is cut, loses its
    # closing fence and has no code: RIGHT_SUM and WRONG_SUM (59), LONG_SQUARE (118).
    # RIGHT_DOUBLE (37), the other double answers (37, 22) and RIGHT_SQUARE (45) are kept.
    assert [len(text) for text in (RIGHT_SUM, WRONG_SUM, LONG_SQUARE)] == [59, 59, 118]
    assert max(len(text) for text in (RIGHT_DOUBLE, RIGHT_SQUARE, *CANNED["double"][1:3])) <= 50
    short = summary["pass@1"]["50"]
    # sum: 3 cut + the prose answer -> 0/4; double: WRONG_SUM cut -> still 2/4; square: 2/4.
    assert short["all"]["pass@1"] == pytest.approx((0.0 + 0.5 + 0.5) / 3)
    assert short["source"]["alpha"]["pass@1"] == pytest.approx((0.0 + 0.5) / 2)
    assert short["difficulty"]["easy"]["pass@1"] == 0.0
    assert short["fraction_truncated"] == pytest.approx(6 / 12)  # 3 sum + 1 double + 2 square
    assert short["verdicts"]["no_code"] == 7  # the 6 cut + "I cannot solve this."
    out = tmp_path / "eval"
    assert len((out / "samples.jsonl").read_text().splitlines()) == 12
    assert len((out / "results.jsonl").read_text().splitlines()) == 24
    assert json.loads((out / "summary.json").read_text())["pass@1"]["4096"]["all"]["problems"] == 3


def test_judge_errors_are_left_out_of_pass_at_1():
    rows = [ResultRow("sum", 0, 8, "accepted", 1.0, 3, False), ResultRow("sum", 1, 8, "judge_error", 0.0, 3, False),
            ResultRow("sum", 2, 8, "wrong_answer", 0.0, 3, False),
            ResultRow("double", 0, 8, "judge_error", 0.0, 3, False)]
    table = pass_at_1_table(rows, {problem.id: problem for problem in PROBLEMS})
    # sum: 1 right of 2 judged; double has no judged sample and is left out.
    assert table[8]["all"] == {"pass@1": 0.5, "stderr": None, "problems": 1, "samples": 2}


def test_the_strict_judge_is_reported_beside_the_robust_one(tmp_path):
    # "3.0" for "3": the robust judge wants an expected integer printed exactly; the strict
    # judge (LiveCodeBench's Decimal equality) accepts it.
    float_sum = block("a, b = map(int, input().split())\nprint(float(a + b))")
    CANNED["sum_as_float"] = [float_sum, RIGHT_SUM, WRONG_SUM, float_sum]
    problem = stdin_problem([("1 2\n", "3\n")], problem_id="sum_as_float", difficulty="medium")
    summary = evaluate_model(config(tmp_path, max_new_tokens=(4096,)), generator=CannedGenerator(), problems=[problem])
    assert summary["pass@1"]["4096"]["difficulty"]["medium"]["pass@1"] == 0.25
    assert summary["pass@1_strict"]["4096"]["difficulty"]["medium"]["pass@1"] == 0.75
    assert summary["pass@1_strict"]["4096"]["verdicts"] == {"accepted": 3, "wrong_answer": 1}
    rows = [json.loads(line) for line in (tmp_path / "eval" / "results.jsonl").read_text().splitlines()]
    assert [(row["verdict"], row["strict_verdict"]) for row in rows] == [
        ("wrong_answer", "accepted"), ("accepted", "accepted"), ("wrong_answer", "wrong_answer"),
        ("wrong_answer", "accepted")]
    # Without the strict judge nothing is judged twice and no strict table is written.
    alone = evaluate_model(config(tmp_path, out=tmp_path / "robust", max_new_tokens=(4096,), strict_judge=False),
                           generator=CannedGenerator(), problems=[problem])
    assert "pass@1_strict" not in alone and alone["pass@1"] == summary["pass@1"]


def test_a_date_window_keeps_the_problems_dated_within_it(tmp_path):
    dated = [SUM.model_copy(update={"date": "2025-01-31"}), DOUBLE.model_copy(update={"date": "2025-02-01"}),
             SQUARE.model_copy(update={"date": "2025-04-30"})]
    generator = CannedGenerator()
    summary = evaluate_model(config(tmp_path, since="2025-02-01", until="2025-04-30"), generator=generator,
                             problems=[*dated, stdin_problem([("1\n", "1\n")], problem_id="undated")])
    # Both ends are inclusive; the day before and the undated problem are left out.
    assert summary["problems"] == 2 and sorted(id for ids, _ in generator.calls for id in ids) == ["double", "square"]
    assert summary["config"]["since"] == "2025-02-01" and summary["config"]["until"] == "2025-04-30"
    with pytest.raises(ValueError, match="dated within 2026-01-01"):
        evaluate_model(config(tmp_path, out=tmp_path / "none", since="2026-01-01"), generator=CannedGenerator(),
                       problems=dated)
    with pytest.raises(ValueError, match="since must be a date"):
        ModelEvalConfig(since="Feb 2025")


def test_problems_with_a_platform_are_grouped_by_it():
    atcoder = SUM.model_copy(update={"metadata": {"platform": "atcoder"}})
    leetcode = SQUARE.model_copy(update={"metadata": {"platform": "leetcode"}})
    rows = [ResultRow("sum", 0, 8, "accepted", 1.0, 3, False), ResultRow("sum", 1, 8, "wrong_answer", 0.0, 3, False),
            ResultRow("square", 0, 8, "accepted", 1.0, 3, False), ResultRow("double", 0, 8, "accepted", 1.0, 3, False)]
    table = pass_at_1_table(rows, {problem.id: problem for problem in (atcoder, leetcode, DOUBLE)})
    # double names no platform: it counts in "all" only.
    assert table[8]["platform"] == {"atcoder": {"pass@1": 0.5, "stderr": None, "problems": 1, "samples": 2},
                                    "leetcode": {"pass@1": 1.0, "stderr": None, "problems": 1, "samples": 1}}
    assert table[8]["all"]["problems"] == 3


def test_cut_to_length_marks_truncation_and_keeps_short_responses():
    decode = lambda ids: "".join(chr(token) for token in ids)  # noqa: E731
    ended = GeneratedText([104, 105, 0], "hi", truncated=False)
    assert cut_to_length(ended, 3, decode) is ended
    cut = cut_to_length(ended, 2, decode)
    assert cut.token_ids == [104, 105] and cut.text == "hi" and cut.truncated


def test_resume_skips_done_problems_and_reproduces_the_summary(tmp_path):
    uninterrupted = evaluate_model(config(tmp_path, out=tmp_path / "whole"), generator=CannedGenerator(),
                                   problems=PROBLEMS)
    interrupted = CannedGenerator(fail_on_call=3)
    with pytest.raises(KeyboardInterrupt):
        evaluate_model(config(tmp_path), generator=interrupted, problems=PROBLEMS)
    # A half-written chunk: one stray row for the third problem must be dropped on resume.
    with open(tmp_path / "eval" / "results.jsonl", "a") as handle:
        handle.write(json.dumps(vars(ResultRow("square", 0, 50, "accepted", 1.0, 30, False))) + "\n")
    resumed = CannedGenerator()
    summary = evaluate_model(config(tmp_path), generator=resumed, problems=PROBLEMS)
    whole = CannedGenerator()
    evaluate_model(config(tmp_path, out=tmp_path / "again"), generator=whole, problems=PROBLEMS)
    # Only the unfinished problem is generated again, with the seed of its chunk.
    assert resumed.calls == [whole.calls[2]]
    assert summary["pass@1"] == uninterrupted["pass@1"]
    assert len((tmp_path / "eval" / "results.jsonl").read_text().splitlines()) == 24
    # A finished directory generates nothing.
    idle = CannedGenerator()
    evaluate_model(config(tmp_path), generator=idle, problems=PROBLEMS)
    assert idle.calls == []


def test_resume_refuses_other_settings(tmp_path):
    evaluate_model(config(tmp_path, n=2), generator=CannedGenerator(), problems=PROBLEMS)
    with pytest.raises(ValueError, match="n: 2 there, 4 now"):
        evaluate_model(config(tmp_path, n=4), generator=CannedGenerator(), problems=PROBLEMS)


def test_a_directory_judged_once_resumes_only_without_the_strict_judge(tmp_path):
    evaluate_model(config(tmp_path, strict_judge=False), generator=CannedGenerator(), problems=PROBLEMS)
    # Its rows have no strict verdicts: asking for the strict table there is refused ...
    with pytest.raises(ValueError, match="strict_judge: None there, True now"):
        evaluate_model(config(tmp_path), generator=CannedGenerator(), problems=PROBLEMS)
    # ... and the same settings resume it with nothing to generate.
    idle = CannedGenerator()
    evaluate_model(config(tmp_path, strict_judge=False), generator=idle, problems=PROBLEMS)
    assert idle.calls == []


def test_eval_model_command_with_the_tiny_model(tmp_path):
    """The real path: load a checkpoint, render chat prompts, sample, judge. A random model
    writes no code, so every sample is `no_code` and truncated at both lengths."""
    from typer.testing import CliRunner

    from microcoder.cli import app
    from microcoder.problems import write_problems
    from microcoder.policy.model import save_tiny_model

    model_dir = save_tiny_model(tmp_path / "tiny")
    write_problems(tmp_path / "problems.jsonl", [SUM, SQUARE])
    out = tmp_path / "eval"
    arguments = ["--model", str(model_dir), "--problems", str(tmp_path / "problems.jsonl"), "--n", "2",
                 "--max-new-tokens", "3", "--max-new-tokens", "6", "--temperature", "1.0", "--out", str(out),
                 "--workers", "1"]
    result = CliRunner().invoke(app, ["eval-model", *arguments])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["pass@1"]) == {"3", "6"}
    for length in ("3", "6"):
        assert summary["pass@1"][length]["all"] == {"pass@1": 0.0, "stderr": 0.0, "problems": 2, "samples": 4}
        assert summary["pass@1"][length]["fraction_truncated"] == 1.0
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [len(sample["token_ids"]) for sample in samples] == [6, 6, 6, 6]

    # Run again, it resumes the finished run: nothing redone, the same summary.
    again = CliRunner().invoke(app, ["eval-model", *arguments])
    assert again.exit_code == 0, again.output
    assert "2 already done" in again.output
    assert json.loads((out / "summary.json").read_text()) == summary
