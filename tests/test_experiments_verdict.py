"""The verdict rule of the experiment pages, on hand-made numbers (expected values derived
in the comments), and the report's use of it on hand-made runs."""

import math

import numpy as np
import pytest

from microcoder.experiments.analysis import finding_result
from microcoder.experiments.spec import ExperimentSpec, Finding
from microcoder.experiments.verdict import (ALPHA, CONFOUNDED, CONTRADICTED, IDLE, INCONCLUSIVE, POWER, REPRODUCED,
                                            UNTESTABLE, holm, holm_verdicts, identical_arms, mechanism_value,
                                            detectable_in_se, paired_verdict, power, seeds_for_power,
                                            value_at)


def test_one_verdict_and_its_p_value_derived_by_hand():
    # d = 0.1, 0.2, 0.3: mean 0.2; sd = sqrt((0.01 + 0 + 0.01) / 2) = 0.1; SE = 0.1 / sqrt(3) = 0.0577;
    # t = 0.2 / 0.0577 = sqrt(12) = 3.464 on 2 degrees of freedom. Student's t with 2 df has
    # P(T > t) = (1 - t / sqrt(t^2 + 2)) / 2 = (1 - 3.464 / sqrt(14)) / 2 = (1 - 0.92582) / 2 = 0.03709 <= 0.05
    verdict = paired_verdict([0.1, 0.2, 0.3], "greater")
    assert verdict.verdict == REPRODUCED and verdict.n == 3
    assert verdict.mean == pytest.approx(0.2) and verdict.se == pytest.approx(0.1 / math.sqrt(3))
    assert verdict.t == pytest.approx(math.sqrt(12)) and verdict.p == pytest.approx(0.03709, abs=1e-5)
    # the same numbers against a paper that says "less": t = -3.464, p = 1 - 0.03709; the other way 0.037
    against = paired_verdict([0.1, 0.2, 0.3], "less")
    assert against.verdict == CONTRADICTED and against.p == pytest.approx(1 - 0.03709, abs=1e-5)
    assert paired_verdict([-0.1, -0.2, -0.3], "less").verdict == REPRODUCED


def test_the_five_percent_boundary_with_two_seeds():
    # 2 seeds: 1 df, Student's t is Cauchy: P(T > t) = 1/2 - atan(t) / pi; the 5% critical value is
    # tan(0.45 pi) = 6.314. d = 0.575, 0.425: mean 0.5, SE = |0.575 - 0.425| / 2 = 0.075, t = 6.667:
    # p = 1/2 - atan(6.667) / pi = 1/2 - 1.42186 / pi = 0.0474: reproduced
    verdict = paired_verdict([0.575, 0.425], "greater")
    assert verdict.verdict == REPRODUCED and verdict.p == pytest.approx(0.0474, abs=1e-4)
    # d = 0.58, 0.42: SE 0.08, t = 6.25: p = 1/2 - atan(6.25) / pi = 1/2 - 1.41207 / pi = 0.0505: not at 5%
    verdict = paired_verdict([0.58, 0.42], "greater")
    assert verdict.verdict == INCONCLUSIVE and verdict.se == pytest.approx(0.08)
    assert verdict.p == pytest.approx(0.0505, abs=1e-4) and "p 0.051 > 0.05" in verdict.reason
    # the old rule's 2 SE (t = 2.08 on 1 df, p = 1/2 - atan(2.083) / pi = 0.148) is no longer a verdict
    assert paired_verdict([0.74, 0.26], "greater").verdict == INCONCLUSIVE


def test_seeds_that_disagree_are_inconclusive():
    # d = 0.3, -0.1: mean 0.1; sd = sqrt(0.04 + 0.04) = 0.283; SE = 0.2; t = 0.5, p = 1/2 - atan(0.5)/pi = 0.352
    verdict = paired_verdict([0.3, -0.1], "greater")
    assert verdict.verdict == INCONCLUSIVE and verdict.mean == pytest.approx(0.1)
    assert verdict.se == pytest.approx(0.2) and verdict.p == pytest.approx(0.3524, abs=1e-4)
    # arms equal in every seed: mean 0, SE 0: neither direction
    assert paired_verdict([0.0, 0.0], "greater").verdict == INCONCLUSIVE


def test_the_detectable_effect_and_one_power_figure_derived_by_hand():
    # The t-quantile approximation of the effect detected with 80% power is (t_{0.95,df} + t_{0.80,df}) SE;
    # from t tables at 4 df: 2.132 + 0.941 = 3.073 SE. The non-central t gives a little less (3.04 SE):
    # the approximation is what the exact figure must sit near.
    five = paired_verdict([0.01, 0.03, 0.05, 0.02, 0.04], "greater")  # mean 0.03, sd 0.0158, SE 0.00707
    assert five.se == pytest.approx(math.sqrt(0.00025) / math.sqrt(5))
    assert five.mde / five.se == pytest.approx(3.073, abs=0.05) and five.mde / five.se < 3.073
    # Power at the effect the design detects with 80% power is 0.80, by construction
    assert power(five.mde, five.se, 5) == pytest.approx(POWER, abs=1e-6)
    # With many seeds the t's become normal: power(delta) = Phi(delta / SE - z_0.95). At delta =
    # (1.6449 + 0.8416) SE = 2.4865 SE, Phi(0.8416) = 0.800 (normal tables); at delta = 1.6449 SE, Phi(0) = 0.5
    assert power(2.4865, 1.0, 10_000) == pytest.approx(0.800, abs=2e-3)
    assert power(1.6449, 1.0, 10_000) == pytest.approx(0.5, abs=2e-3)
    assert power(0.0, 1.0, 5) == pytest.approx(ALPHA)  # no effect: called 5% of the time, the test's level
    # Seeds for 80% power with a per-seed sd of 1 at an effect of 0.5: the normal approximation
    # n = ((1.6449 + 0.8416) / 0.5)^2 = 24.7, and the t's heavier tails ask for one or two more
    assert seeds_for_power(0.5, 1.0) in (26, 27)
    assert power(0.5, 1.0 / math.sqrt(seeds_for_power(0.5, 1.0)), seeds_for_power(0.5, 1.0)) >= POWER



def test_the_two_sided_detectable_effect_derived_by_hand():
    # A question without a direction (do two engines differ?) is tested two-sided: critical value
    # t_{0.975,df}. From t tables at 4 df the approximation is t_{0.975,4} + t_{0.80,4} = 2.776 + 0.941
    # = 3.717 SE, which the exact figure must sit near. With many degrees of freedom both become normal:
    # z_0.975 + z_0.80 = 1.9600 + 0.8416 = 2.8016 (normal tables), against 2.4865 one-sided.
    five = detectable_in_se(4, two_sided=True)
    assert five == pytest.approx(3.717, abs=0.08)
    # And by simulation: 5 normal differences with mean five / sqrt(5) and sd 1; the two-sided t test
    # at 5% calls |t| > t_{0.975,4} = 2.776 in 80% of draws (100,000 draws: SE of the share 0.0013)
    draws = np.random.default_rng(0).normal(five / math.sqrt(5), 1.0, (100_000, 5))
    t = draws.mean(axis=1) / (draws.std(axis=1, ddof=1) / math.sqrt(5))
    assert float(np.mean(np.abs(t) > 2.776)) == pytest.approx(POWER, abs=0.006)
    assert detectable_in_se(100_000, two_sided=True) == pytest.approx(2.8016, abs=2e-3)
    assert detectable_in_se(100_000) == pytest.approx(2.4865, abs=2e-3)
    assert detectable_in_se(4, two_sided=True) > detectable_in_se(4)

def test_holm_correction_across_a_record_by_hand():
    # p = 0.01, 0.04, 0.03 (m = 3): sorted 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> running max 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    # a reproduced finding at p 0.037 (first test) beside two inconclusive ones: Holm multiplies it by 3
    record = [paired_verdict([0.1, 0.2, 0.3], "greater"), paired_verdict([0.3, -0.1], "greater"),
              paired_verdict([0.1, 0.2, 0.3], "greater", untestable="not at this scale")]
    corrected = holm_verdicts(record)
    # family: the two scored findings (the untestable one is not scored); 0.03709 x 2 = 0.0742 > 0.05
    assert corrected[0][0] == INCONCLUSIVE and corrected[0][1] == pytest.approx(2 * 0.03709, abs=1e-4)
    assert corrected[1][0] == INCONCLUSIVE and corrected[2] == (UNTESTABLE, None)
    # alone in its family, the reproduced one keeps its verdict
    assert holm_verdicts(record[:1]) == [(REPRODUCED, pytest.approx(0.03709, abs=1e-5))]


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
    # arms that differ before training: the numbers and the test are kept, the verdict is not scored
    confounded = paired_verdict([0.1, 0.2, 0.3], "greater", confound="two judges of the same responses")
    assert (confounded.verdict, confounded.reason) == (CONFOUNDED, "two judges of the same responses")
    assert confounded.p == pytest.approx(0.03709, abs=1e-5)
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
    # the running totals of a current run: its wall-clock total differs between identical runs
    a[1][0]["seconds_total"], b[1][0]["seconds_total"] = 12.5, 13.25
    a[1][0]["groups_generated_total"] = b[1][0]["groups_generated_total"] = 4
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
    # arms declared different before training: the same numbers, not scored
    confounded = Finding(claim="c", metric="acc", arms=["on", "off"], direction="greater", confound="two judges")
    verdict, _ = finding_result(confounded, {"on": {0: rows(0.1, 0.5), 1: rows(0.1, 0.6)},
                                             "off": {0: rows(0.0, 0.1), 1: rows(0.0, 0.1)}})
    assert (verdict.verdict, verdict.reason) == (CONFOUNDED, "two judges") and verdict.mean == pytest.approx(0.45)
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


def test_sd_range_is_the_chi_square_interval_on_the_variance():
    # 5 seeds, 4 df: chi2_{0.975,4} = 11.143, chi2_{0.025,4} = 0.4844 (tables), so the sd's
    # 95% range is sqrt(4 / 11.143) = 0.599 to sqrt(4 / 0.4844) = 2.874 times the measured one.
    from microcoder.experiments.verdict import sd_range

    low, high = sd_range(1.0, 5)
    assert abs(low - 0.5991) < 1e-3 and abs(high - 2.8735) < 1e-3
    assert sd_range(0.05, 5) == pytest.approx((0.05 * low, 0.05 * high))
