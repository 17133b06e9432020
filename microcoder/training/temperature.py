"""Sampling temperature during training: a staged schedule, or an adaptive controller.

The paper found that continuous temperature changes, even short ramps, shifted diversity
irreversibly, while discrete low-to-high stages with a minimum dwell trained stably. Both
controls here therefore only ever jump between a few fixed temperatures; neither
interpolates. Pure: no I/O, no torch; the trainer asks for T before each rollout step.

Steps are rollout steps numbered from 1, as in metrics.jsonl. `check_temperature_stages` is
the one statement of what a valid schedule is (the config validates with it): stages go low
to high, and under staged control each lasts at least a minimum dwell.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field


def check_temperature_stages(stages: Sequence[tuple[int, float]], min_dwell: int, control: str) -> None:
    """Raise ValueError, naming the config key and the offending stage, unless the schedule is valid.

    Valid: at least one (step, T) stage; the first at step 0; steps strictly increasing;
    every T > 0; T strictly increasing (staged: the schedule goes low to high; adaptive: the
    stages' T's are the ladder it climbs upward); under "staged" control every stage but the
    last lasts at least `min_dwell` steps, since stages closer than that are a ramp, which
    the paper found destabilising. Steps are numbered from 1, so the first stage (at step 0)
    lasts next step - 1 steps and a later one next step - step. `min_dwell` must be >= 1.
    The last stage runs to the end of training and has no dwell to check.

        check_temperature_stages([(0, 0.7), (5, 0.8)], 4, "staged")  -> None (steps 1-4 at 0.7)
        check_temperature_stages([(0, 0.7), (5, 0.8)], 5, "staged")  -> ValueError (dwell 4 < 5)
        check_temperature_stages([(0, 0.8), (5, 0.7)], 5, "adaptive") -> ValueError (T goes down)
    """
    if control not in ("staged", "adaptive"):
        raise ValueError(f"temperature_control: {control!r} is not one of: staged, adaptive")
    if min_dwell < 1:
        raise ValueError(f"temperature_min_dwell: must be >= 1, got {min_dwell}")
    stages = [(int(step), float(temp)) for step, temp in stages]
    if not stages:
        raise ValueError("temperature_stages: needs at least one (step, T) stage")

    def shown(stage: tuple[int, float]) -> str:
        return f"({stage[0]}, {stage[1]:g})"

    if stages[0][0] != 0:
        raise ValueError(f"temperature_stages: the first stage {shown(stages[0])} must start at step 0")
    for index, stage in enumerate(stages):
        step, temp = stage
        if temp <= 0:
            raise ValueError(f"temperature_stages: stage {shown(stage)} has T <= 0: temperatures must be > 0")
        if index == 0:
            continue
        previous_step, previous_temp = stages[index - 1]
        if step <= previous_step:
            raise ValueError(f"temperature_stages: stage {shown(stage)} does not start after the previous stage's "
                             f"step {previous_step}: stage steps must strictly increase")
        if temp <= previous_temp:
            rule = ("staged schedules go low to high" if control == "staged"
                    else "the adaptive ladder climbs low to high")
            raise ValueError(f"temperature_stages: stage {shown(stage)} is not above the previous T "
                             f"{previous_temp:g}: {rule}")
        dwell = step - max(previous_step, 1)  # the first stage starts at step 1 in effect
        if control == "staged" and dwell < min_dwell:
            raise ValueError(f"temperature_stages: stage {shown(stages[index - 1])} lasts {dwell} "
                             f"step(s) before {shown(stage)}, fewer than temperature_min_dwell={min_dwell}: stages "
                             f"closer than that are a ramp, which the paper found destabilising")


class StagedSchedule:
    """T at a step from discrete stages [(start_step, T), ...]; never a ramp.

    Stage (s, T) applies to every step >= s until the next stage starts. The stages must
    pass `check_temperature_stages` with a dwell of 1 (the config enforces its
    `temperature_min_dwell` itself): the first starts at step 0, covering the whole run
    from its start; starts and temperatures strictly increase.

        StagedSchedule([(0, 0.6), (100, 1.0)]).temperature(99)  -> 0.6
        StagedSchedule([(0, 0.6), (100, 1.0)]).temperature(100) -> 1.0
    """

    def __init__(self, stages: Sequence[tuple[int, float]]):
        check_temperature_stages(stages, min_dwell=1, control="staged")
        self.stages = [(int(step), float(temp)) for step, temp in stages]

    def temperature(self, step: int) -> float:
        """T of the last stage whose start is <= step."""
        current = self.stages[0][1]
        for start, temp in self.stages:
            if start > step:
                break
            current = temp
        return current


@dataclass
class AdaptiveTemperature:
    """Climbs a ladder of temperatures, one rung at a time, when diversity stays low.

    After each rollout step the trainer reports that step's diversity (0..1). The
    controller keeps the moving average of the last `average_window` diversities measured
    at the current temperature, and moves one stage up when

        that average is below `floor` for `patience` consecutive steps, and
        at least `min_dwell` steps have passed at the current temperature.

    It never moves down, and stays at the top stage once there. The history restarts at
    every change: diversities sampled at the old T say nothing about the new one. A window
    that is not yet full does not count as below the floor.

    Attributes:
        temperatures: the ladder, low to high (e.g. the T's of the configured stages).
        floor, average_window, patience, min_dwell: see above; steps are rollout steps.
        stage: index of the current temperature in the ladder (state).
        steps_at_stage: steps observed since the last change (state).
        below_count: consecutive steps with the full-window average below the floor (state).
        recent: the last `average_window` diversities at this stage (state).
    """

    temperatures: list[float]
    floor: float
    average_window: int = 5
    patience: int = 5
    min_dwell: int = 10
    stage: int = 0
    steps_at_stage: int = 0
    below_count: int = 0
    recent: deque = field(default_factory=deque)

    def __post_init__(self) -> None:
        if not self.temperatures:
            raise ValueError("the ladder needs at least one temperature")
        if any(later <= earlier for earlier, later in zip(self.temperatures, self.temperatures[1:])):
            raise ValueError(f"the ladder must strictly increase, got {self.temperatures}")
        if self.average_window < 1 or self.patience < 1 or self.min_dwell < 0:
            raise ValueError("need average_window >= 1, patience >= 1, min_dwell >= 0")
        self.recent = deque(self.recent, maxlen=self.average_window)

    @property
    def temperature(self) -> float:
        """The temperature to sample the next step with."""
        return self.temperatures[self.stage]

    def observe(self, diversity: float) -> float:
        """Record one step's diversity; returns the temperature for the next step."""
        self.steps_at_stage += 1
        self.recent.append(float(diversity))
        window_full = len(self.recent) == self.average_window
        average = sum(self.recent) / len(self.recent)
        self.below_count = self.below_count + 1 if window_full and average < self.floor else 0
        at_top = self.stage == len(self.temperatures) - 1
        if not at_top and self.below_count >= self.patience and self.steps_at_stage >= self.min_dwell:
            self.stage += 1
            self.steps_at_stage = 0
            self.below_count = 0
            self.recent.clear()
        return self.temperature

    def state_dict(self) -> dict:
        """The controller's state, JSON-serialisable, for checkpoints."""
        return {"stage": self.stage, "steps_at_stage": self.steps_at_stage,
                "below_count": self.below_count, "recent": list(self.recent)}

    def load_state_dict(self, state: dict) -> None:
        self.stage = int(state["stage"])
        self.steps_at_stage = int(state["steps_at_stage"])
        self.below_count = int(state["below_count"])
        self.recent = deque((float(value) for value in state["recent"]), maxlen=self.average_window)
