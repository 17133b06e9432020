"""Staged schedule and adaptive temperature controller, on hand-built diversity sequences; the
schedule rules (low to high, minimum dwell) through the config."""

import pytest

from microcoder.training.config import TrainConfig, build_config, load_config
from microcoder.training.temperature import AdaptiveTemperature, StagedSchedule, check_temperature_stages


def test_staged_schedule_jumps_at_stage_starts_and_never_interpolates():
    schedule = StagedSchedule([(0, 0.6), (10, 1.0), (20, 1.4)])
    assert [schedule.temperature(step) for step in (0, 1, 9)] == [0.6, 0.6, 0.6]
    assert [schedule.temperature(step) for step in (10, 15, 19)] == [1.0, 1.0, 1.0]
    assert [schedule.temperature(step) for step in (20, 1000)] == [1.4, 1.4]
    # Every step's T is one of the stage temperatures: no ramp values in between.
    assert {schedule.temperature(step) for step in range(30)} == {0.6, 1.0, 1.4}


@pytest.mark.parametrize("stages", [[], [(1, 1.0)], [(0, 1.0), (0, 1.2)], [(0, 1.0), (5, 0.0)],
                                    [(0, 1.0), (5, 0.6)]])
def test_staged_schedule_rejects_bad_stages(stages):
    with pytest.raises(ValueError):
        StagedSchedule(stages)


def run(controller, diversities):
    """The temperature used at each step: T before observing that step's diversity."""
    used = []
    for diversity in diversities:
        used.append(controller.temperature)
        controller.observe(diversity)
    return used


def test_adaptive_moves_up_after_window_plus_patience_of_low_diversity():
    controller = AdaptiveTemperature([0.6, 1.0, 1.4], floor=0.3, average_window=2, patience=2, min_dwell=0)
    # Step 1: window not full -> not below. Steps 2, 3: averages 0.1, 0.1 < 0.3 -> count 1, 2 -> move up.
    used = run(controller, [0.1, 0.1, 0.1, 0.5])
    assert used == [0.6, 0.6, 0.6, 1.0]
    assert controller.stage == 1 and controller.steps_at_stage == 1


def test_adaptive_high_diversity_never_moves():
    controller = AdaptiveTemperature([0.6, 1.0], floor=0.3, average_window=2, patience=1, min_dwell=0)
    assert set(run(controller, [0.5, 0.4, 0.9, 0.31] * 5)) == {0.6}


def test_adaptive_one_good_step_resets_patience_through_the_average():
    controller = AdaptiveTemperature([0.6, 1.0], floor=0.3, average_window=2, patience=3, min_dwell=0)
    # Moving averages from step 2: 0.1, 0.1 (count 1, 2), then 0.5, 0.5 (steps 4, 5: count 0),
    # then 0.1 at steps 6, 7, 8 (count 1, 2, 3) -> move after step 8; step 9 samples at 1.0.
    used = run(controller, [0.1, 0.1, 0.1, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1])
    assert used == [0.6] * 8 + [1.0] * 2


def test_adaptive_min_dwell_delays_the_move_and_spaces_changes():
    controller = AdaptiveTemperature([0.6, 1.0, 1.4], floor=0.3, average_window=1, patience=1, min_dwell=4)
    used = run(controller, [0.0] * 9)
    # Low from step 1, but each stage is held for 4 steps.
    assert used == [0.6] * 4 + [1.0] * 4 + [1.4]


def test_adaptive_stays_at_top_and_history_restarts_on_change():
    controller = AdaptiveTemperature([0.6, 1.0], floor=0.3, average_window=3, patience=1, min_dwell=0)
    run(controller, [0.0, 0.0, 0.0])
    assert controller.stage == 1 and len(controller.recent) == 0
    run(controller, [0.0] * 10)
    assert controller.stage == 1 and controller.temperature == 1.0


def test_adaptive_state_round_trips():
    first = AdaptiveTemperature([0.6, 1.0, 1.4], floor=0.3, average_window=2, patience=2, min_dwell=0)
    run(first, [0.1, 0.2, 0.5])
    second = AdaptiveTemperature([0.6, 1.0, 1.4], floor=0.3, average_window=2, patience=2, min_dwell=0)
    second.load_state_dict(first.state_dict())
    tail = [0.1, 0.1, 0.1, 0.1, 0.1]
    assert run(first, tail) == run(second, tail)


def test_adaptive_rejects_a_decreasing_ladder():
    with pytest.raises(ValueError):
        AdaptiveTemperature([1.0, 0.6], floor=0.3)


# ---- schedule rules, through the config (load_config / build_config) --------------------------


@pytest.mark.parametrize("overrides, message", [
    # Downward: 0.8 then 0.7.
    (["temperature_stages=[[0, 0.8], [5, 0.7]]"],
     "temperature_stages: stage (5, 0.7) is not above the previous T 0.8: staged schedules go low to high"),
    # A repeated T is not a step up either.
    (["temperature_stages=[[0, 0.7], [5, 0.7]]"],
     "temperature_stages: stage (5, 0.7) is not above the previous T 0.7"),
    # Steps are numbered from 1: a second stage at step 1 leaves the first none at all.
    (["temperature_stages=[[0, 0.6], [1, 0.7], [6, 0.8]]"],
     "temperature_stages: stage (0, 0.6) lasts 0 step(s) before (1, 0.7), fewer than temperature_min_dwell=4"),
    # A second stage at step 5 leaves the first steps 1-4: 4 < 5.
    (["temperature_stages=[[0, 0.6], [5, 0.7]]", "temperature_min_dwell=5"],
     "temperature_stages: stage (0, 0.6) lasts 4 step(s) before (5, 0.7), fewer than temperature_min_dwell=5"),
    # One step apart: a ramp; 1 < 2.
    (["temperature_stages=[[0, 0.6], [3, 0.7], [4, 0.8]]", "temperature_min_dwell=2"],
     "temperature_stages: stage (3, 0.7) lasts 1 step(s) before (4, 0.8), fewer than temperature_min_dwell=2"),
    (["temperature_stages=[[3, 0.7]]"], "temperature_stages: the first stage (3, 0.7) must start at step 0"),
    (["temperature_stages=[[0, 0.7], [0, 0.8]]"], "temperature_stages: stage (0, 0.8) does not start after"),
    (["temperature_stages=[[0, 0.0]]"], "temperature_stages: stage (0, 0) has T <= 0"),
    (["temperature_stages=[]"], "temperature_stages: needs at least one"),
    (["temperature_min_dwell=0"], "temperature_min_dwell: must be >= 1, got 0"),
    # Adaptive: the stages are a ladder climbed upward, so it must ascend too (steps do not matter).
    (["temperature_control=adaptive", "temperature_stages=[[0, 1.0], [10, 0.6]]"],
     "temperature_stages: stage (10, 0.6) is not above the previous T 1: the adaptive ladder climbs low to high"),
])
def test_bad_schedules_are_refused_naming_the_key(overrides, message):
    with pytest.raises(ValueError) as caught:
        load_config(None, overrides)
    assert str(caught.value).startswith(message), str(caught.value)


def test_build_config_gives_the_same_message():
    with pytest.raises(ValueError, match=r"^temperature_stages: stage \(5, 0.7\) is not above the previous T 0.8"):
        build_config({"temperature_stages": [[0, 0.8], [5, 0.7]]})


def test_low_to_high_schedules_with_the_dwell_are_accepted():
    # Stages of 4 steps (1-4) and 10 steps (5-14) against the default dwell 4 (equal counts).
    config = load_config(None, ["temperature_stages=[[0, 0.6], [5, 0.8], [15, 1.0]]"])
    assert config.temperature_stages == [(0, 0.6), (5, 0.8), (15, 1.0)] and config.temperature_min_dwell == 4
    # A shorter dwell when asked for: one step at 0.7 with dwell 1 (the tiny presets).
    assert load_config(None, ["temperature_stages=[[0, 0.7], [2, 0.9]]", "temperature_min_dwell=1"])
    # Adaptive control has no step dwell (adaptive_min_dwell spaces its moves): an ascending ladder one step apart.
    assert load_config(None, ["temperature_control=adaptive", "temperature_stages=[[0, 0.6], [1, 1.0]]"])
    # One stage: nothing to dwell on.
    assert TrainConfig(temperature_stages=[(0, 0.9)]).temperature_stages == [(0, 0.9)]


def test_check_temperature_stages_refuses_an_unknown_control():
    with pytest.raises(ValueError, match="temperature_control: 'ramp' is not one of: staged, adaptive"):
        check_temperature_stages([(0, 0.7)], 5, "ramp")
