"""The verdict rule of the experiment pages, on hand-made numbers (expected values derived
in the comments), and the report's use of it on hand-made runs."""

import math

import pytest

from microcoder.experiments.report import finding_result
from microcoder.experiments.spec import ExperimentSpec, Finding
from microcoder.experiments.verdict import (CONTRADICTED, IDLE, INCONCLUSIVE, REPRODUCED, UNTESTABLE,
                                            identical_arms, mechanism_value, paired_verdict, value_at)


def test_a_difference_of_at_least_two_standard_errors_in_the_papers_direction_is_reproduced():
    # d = 0.1, 0.2, 0.3: mean 0.2; sd = sqrt((0.01 + 0 + 0.01) / 2) = 0.1; SE = 0.1 / sqrt(3) = 0.0577
    verdict = paired_verdict([0.1, 0.2, 0.3], "greater")
    assert verdict.verdict == REPRODUCED and verdict.n == 3
    assert verdict.mean == pytest.approx(0.2) and verdict.se == pytest.approx(0.1 / math.sqrt(3))
    assert verdict.mde == pytest.approx(0.2 / math.sqrt(3))  # 0.1155 < 0.2
    # the same numbers against a paper that says "less": 2 SE the other way
    assert paired_verdict([0.1, 0.2, 0.3], "less").verdict == CONTRADICTED
    assert paired_verdict([-0.1, -0.2, -0.3], "less").verdict == REPRODUCED


def test_the_two_standard_error_boundary():
    # d = 0.74, 0.26: mean 0.5; sd = 0.48 / sqrt(2); SE = 0.24; 2 SE = 0.48 < 0.5: reproduced
    assert paired_verdict([0.74, 0.26], "greater").verdict == REPRODUCED
    # d = 0.76, 0.24: mean 0.5; SE = 0.26; 2 SE = 0.52 > 0.5: inconclusive
    verdict = paired_verdict([0.76, 0.24], "greater")
    assert verdict.verdict == INCONCLUSIVE and verdict.se == pytest.approx(0.26)
    assert "within 2 SE" in verdict.reason


def test_seeds_that_disagree_are_inconclusive():
    # d = 0.3, -0.1: mean 0.1; sd = sqrt(0.04 + 0.04) = 0.283; SE = 0.2; 2 SE = 0.4 > 0.1
    verdict = paired_verdict([0.3, -0.1], "greater")
    assert verdict.verdict == INCONCLUSIVE and verdict.mean == pytest.approx(0.1)
    assert verdict.se == pytest.approx(0.2) and verdict.mde == pytest.approx(0.4)
    # arms equal in every seed: mean 0, SE 0: neither direction
    assert paired_verdict([0.0, 0.0], "greater").verdict == INCONCLUSIVE


def test_one_seed_has_no_standard_error_and_no_verdict():
    verdict = paired_verdict([0.5], "greater")
    assert (verdict.verdict, verdict.n, verdict.mean, verdict.se, verdict.mde) == (INCONCLUSIVE, 1, 0.5, None, None)
    assert verdict.reason == "one seed: SE undefined"
    none = paired_verdict([], "less")
    assert (none.verdict, none.n, none.mean, none.se) == (INCONCLUSIVE, 0, None, None)


def test_a_declared_untestable_finding_and_an_idle_mechanism_are_stated_instead_of_a_verdict():
    # the numbers alone would be reproduced (first test): the declared reason wins, numbers kept
    verdict = paired_verdict([0.1, 0.2, 0.3], "greater", untestable="the effect comes after 260 steps")
    assert (verdict.verdict, verdict.reason) == (UNTESTABLE, "the effect comes after 260 steps")
    assert verdict.mean == pytest.approx(0.2)
    idle = paired_verdict([0.1, 0.2, 0.3], "greater", idle="nothing was masked")
    assert (idle.verdict, idle.reason) == (IDLE, "nothing was masked")
    with pytest.raises(ValueError, match="direction must be one of greater, less"):
        paired_verdict([0.1], "up")
    with pytest.raises(ValueError, match="NaN"):
        paired_verdict([0.1, float("nan")], "greater")


def test_a_runs_value_at_a_step_its_end_or_over_a_window():
    rows = [{"step": 0, "acc": 0.2}, {"step": 1, "r": 1.0}, {"step": 2, "r": 2.0}, {"step": 4, "acc": 0.3, "r": 6.0},
            {"step": 8, "acc": float("nan"), "r": 3.0}]
    assert value_at(rows, "acc", 0) == 0.2 and value_at(rows, "acc", 4) == 0.3
    assert value_at(rows, "acc", "last") == 0.3  # step 8 measured nothing (NaN)
    assert value_at([{"step": 0, "acc": 0.2}], "acc", "last") is None  # step 0 never stands for the end
    assert value_at(rows, "r", [1, 4]) == pytest.approx(3.0)  # (1 + 2 + 6) / 3
    assert value_at(rows, "r", [5, 7]) is None and value_at(rows, "acc", 3) is None


def test_how_much_a_mechanism_acted():
    runs = [[{"step": 1, "m": 0.0}, {"step": 2, "m": 0.1}], [{"step": 1, "m": 0.2}, {"step": 2}]]
    assert mechanism_value(runs, "m", "mean") == pytest.approx(0.1)  # (0 + 0.1 + 0.2) / 3
    assert mechanism_value(runs, "m", "max") == 0.2 and mechanism_value(runs, "m", "range") == 0.2
    assert mechanism_value(runs, "other", "mean") is None


def test_two_arms_equal_but_for_their_timing_are_identical():
    a = {0: [{"step": 1, "reward_mean": 0.5, "seconds_rollout": 3.0}], 1: [{"step": 1, "reward_mean": 0.25}]}
    b = {0: [{"step": 1, "reward_mean": 0.5, "seconds_rollout": 9.0}], 1: [{"step": 1, "reward_mean": 0.25}]}
    assert identical_arms(a, b)
    b[1][0]["reward_mean"] = 0.3
    assert not identical_arms(a, b)
    assert not identical_arms(a, {0: a[0]})  # a seed the other did not run


def spec_with(*findings) -> ExperimentSpec:
    return ExperimentSpec(name="s", arms={"on": [], "off": []}, seeds=[0, 1], findings=list(findings))


def rows(masked: float, accuracy: float) -> list[dict]:
    return [{"step": 0, "acc": 0.1}, {"step": 1, "masked": masked, "acc": None}, {"step": 2, "masked": masked,
                                                                                  "acc": accuracy}]


def test_the_report_pairs_seeds_and_finds_an_idle_mechanism_or_identical_arms():
    finding = Finding(claim="c", metric="acc", arms=["on", "off"], direction="greater",
                      mechanism={"metric": "masked", "at_least": 0.05})
    spec_with(finding)  # the arms exist
    # on - off at the last step per seed: 0.5 - 0.1 = 0.4 and 0.6 - 0.1 = 0.5; mean 0.45, SE 0.05
    runs = {"on": {0: rows(0.1, 0.5), 1: rows(0.1, 0.6)}, "off": {0: rows(0.0, 0.1), 1: rows(0.0, 0.1)}}
    verdict, differences = finding_result(finding, runs)
    assert differences == pytest.approx({0: 0.4, 1: 0.5}) and verdict.verdict == REPRODUCED
    # the same gap with the mask acting on 2% of responses: idle (mean 0.02 < 0.05)
    runs["on"] = {0: rows(0.02, 0.5), 1: rows(0.02, 0.6)}
    verdict, _ = finding_result(finding, runs)
    assert verdict.verdict == IDLE and "on's mean masked is 0.02, under 0.05" in verdict.reason
    # two arms equal in every non-timing value: idle whatever the threshold says
    same = {0: rows(0.1, 0.5), 1: rows(0.1, 0.6)}
    verdict, _ = finding_result(finding, {"on": same, "off": same})
    assert verdict.verdict == IDLE and "equal in every non-timing value" in verdict.reason
    # a change within one arm: acc at last - at 0 = 0.4 and 0.5
    growth = Finding(claim="c", metric="acc", arms=["on"], direction="less")
    verdict, differences = finding_result(growth, {"on": {0: rows(0.1, 0.5), 1: rows(0.1, 0.6)}})
    assert differences == pytest.approx({0: 0.4, 1: 0.5}) and verdict.verdict == CONTRADICTED
    # two arms' changes: (0.5 - 0.1) - (0.1 - 0.1) per seed; here the same as the values' difference
    changed = Finding(claim="c", metric="acc", arms=["on", "off"], direction="greater", change=True)
    _, differences = finding_result(changed, {"on": {0: rows(0.1, 0.5)}, "off": {0: rows(0.0, 0.2)}})
    assert differences == pytest.approx({0: 0.3})


def test_a_finding_must_name_the_specs_arms():
    with pytest.raises(ValueError, match=r"findings\[0\]: arm 'gone' is not one of the spec's arms \(on, off\)"):
        spec_with(Finding(claim="c", metric="acc", arms=["on", "gone"], direction="greater"))
    with pytest.raises(ValueError, match="one arm .* or two different arms"):
        Finding(claim="c", metric="acc", arms=["on", "on"], direction="greater")
