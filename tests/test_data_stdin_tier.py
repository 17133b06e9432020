"""Stdin problems: what they lack, said in the datasheet, and the opt-in unverified_hidden tier."""

from __future__ import annotations

import json

from microcoder.data.amplify import UNVERIFIED, trivial_program_shares
from microcoder.data.config import load_build_config
from microcoder.data.pipeline import build
from microcoder.problems import Problem, TestCase, read_problems
from tests.test_data_amplify import write_config


def stdin_problems() -> list[Problem]:
    statement = "Print the sum of the two numbers.\nInput\n1 2\nOutput\n3\n"
    hidden = [TestCase(input=f"{a} {b}\n", output=f"{a + b}\n") for a, b in ((5, 9), (10, 20), (7, 7), (0, 4),
                                                                             (100, 1), (8, 8))]
    many = Problem(id="s/sum", kind="stdin", prompt=statement, source="t",
                   tests=[TestCase(input="1 2\n", output="3\n")] + hidden)
    few = Problem(id="s/few", kind="stdin", prompt=statement.replace("sum", "total"), source="t",
                  tests=[TestCase(input="1 2\n", output="3\n"), TestCase(input="4 4\n", output="8\n")])
    return [many, few]


def test_unverified_hidden_is_opt_in_labelled_and_estimated(tmp_path):
    default = load_build_config(write_config(tmp_path / "default", stdin_problems()))
    build(default, log=lambda _: None)
    assert read_problems(default.stage_dir("export") / "microcoder-dataset.jsonl") == []
    removed = [json.loads(line) for line in (default.stage_dir("amplify") / "removed.jsonl").read_text().splitlines()]
    assert {r["reason"] for r in removed} == {UNVERIFIED}
    datasheet = (default.stage_dir("export") / "datasheet.md").read_text()
    assert "## Stdin problems" in datasheet
    section = datasheet.split("## Stdin problems", 1)[1]
    row = next(line for line in section.splitlines() if line.startswith("| problems | 2 |"))
    assert "a reference solution (2 of 2)" in row and "5+ hidden tests for the unverified_hidden tier (1 of 2)" in row

    opted = load_build_config(write_config(tmp_path / "opted", stdin_problems(), unverified_hidden=True))
    build(opted, log=lambda _: None)
    (kept,) = read_problems(opted.stage_dir("export") / "microcoder-dataset.jsonl")
    assert kept.id == "s/sum" and kept.metadata["tier"] == "unverified_hidden" and kept.metadata["verified"] is False
    # 6 hidden tests: outputs 14, 30, 14, 4, 101, 16 -> the best constant (14) passes 2 of 6.
    assert kept.metadata["unverified_hidden"] == {"hidden_tests": 6, "constant_output_share": 0.3333,
                                                  "empty_output_share": 0.0, "echo_share": 0.0}
    assert "**unverified_hidden**" in (opted.stage_dir("export") / "datasheet.md").read_text()


def test_trivial_program_shares_read_the_hidden_outputs():
    problem = Problem(id="e", kind="stdin", prompt="Echo.", tests=[
        TestCase(input="a b\n", output="a  b\n"), TestCase(input="x\n", output="\n"), TestCase(input="q\n", output="a b"),
        TestCase(input="3\n", output="3\n", shown=True)])
    assert trivial_program_shares(problem) == {"hidden_tests": 3, "constant_output_share": 0.6667,
                                               "empty_output_share": 0.3333, "echo_share": 0.3333}
