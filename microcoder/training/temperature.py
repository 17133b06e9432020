"""Sampling temperature during training: a staged schedule, or an adaptive controller.

The paper found that continuous temperature changes, even short ramps, shifted diversity
irreversibly, while discrete low-to-high stages with a minimum dwell trained stably. Both
controls here therefore only ever jump between a few fixed temperatures; neither
interpolates. Pure: no I/O, no torch; the trainer asks for T before each rollout step.

Steps are rollout steps numbered from 1, as in metrics.jsonl.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field


class StagedSchedule:
    """T at a step from discrete stages [(start_step, T), ...]; never a ramp.

    Stage (s, T) applies to every step >= s until the next stage starts. The first stage
    must start at step 0 (covering the whole run from its start); starts strictly increase.

        StagedSchedule([(0, 0.6), (100, 1.0)]).temperature(99)  -> 0.6
        StagedSchedule([(0, 0.6), (100, 1.0)]).temperature(100) -> 1.0
    """

    def __init__(self, stages: Sequence[tuple[int, float]]):
        stages = [(int(step), float(temp)) for step, temp in stages]
        if not stages:
            raise ValueError("a schedule needs at least one (step, T) stage")
        if stages[0][0] != 0:
            raise ValueError(f"the first stage must start at step 0, got {stages[0][0]}")
        starts = [step for step, _ in stages]
        if any(later <= earlier for earlier, later in zip(starts, starts[1:])):
            raise ValueError(f"stage starts must strictly increase, got {starts}")
        if any(temp <= 0 for _, temp in stages):
            raise ValueError(f"temperatures must be > 0, got {[temp for _, temp in stages]}")
        self.stages = stages

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
