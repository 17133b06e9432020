"""Staged schedule and adaptive temperature controller, on hand-built diversity sequences."""

import pytest

from microcoder.training.temperature import AdaptiveTemperature, StagedSchedule


def test_staged_schedule_jumps_at_stage_starts_and_never_interpolates():
    schedule = StagedSchedule([(0, 0.6), (10, 1.0), (20, 1.4)])
    assert [schedule.temperature(step) for step in (0, 1, 9)] == [0.6, 0.6, 0.6]
    assert [schedule.temperature(step) for step in (10, 15, 19)] == [1.0, 1.0, 1.0]
    assert [schedule.temperature(step) for step in (20, 1000)] == [1.4, 1.4]
    # Every step's T is one of the stage temperatures: no ramp values in between.
    assert {schedule.temperature(step) for step in range(30)} == {0.6, 1.0, 1.4}


@pytest.mark.parametrize("stages", [[], [(1, 1.0)], [(0, 1.0), (0, 1.2)], [(0, 1.0), (5, 0.0)]])
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
