"""An experiment spec: a base config, the arms (config overrides each), the seeds, the metrics.

    name: kl_clip
    base: ../microcoder.yaml               # relative to the spec file, or absolute
    overrides: [total_steps=20, eval_every=5]   # for every arm
    arms:
      kl_symmetric: [beta=0.001, eps_high=0.2]
      no_kl_clip_higher: []
      short_then_long:                     # a schedule change at step k is an arm too
        overrides: [max_new_tokens=32]
        then: [{at_step: 10, overrides: [max_new_tokens=64]}]
    seeds: [0, 1, 2]
    metrics: [heldout_accuracy, reward_mean, response_length_mean, diversity]
    x_axis: step                           # or relative_data: prompts seen / the least train_batch_size
    budget_axes: [groups_generated, seconds]   # also figures against the cumulative budget
    findings:                              # the paper's claims; a string is quoted only
      - claim: "No KL with a high clip keeps diversity growing"
        metric: diversity
        arms: [no_kl_clip_higher, kl_symmetric]   # A - B per seed; one arm: at - baseline
        direction: greater                 # the paper's: A > B
        at: last                           # a step, "last", or a window [first, last]
        paper_effect: 0.51                 # the paper's A - B in the metric's units, if known
        untestable: "..."                  # why this scale cannot test it (then no verdict)
        confound: "..."                    # how the arms differ before training (then not scored)
        mechanism: {arm: kl_symmetric, metric: kl, reduce: max, at_least: 0.01}
    vars: {L: 64, S: 8}                    # ${L}, ${L*3/2}, ${S/2} anywhere in overrides and at_step
    share_heldout_start: true              # step 0's held-out evaluated once per seed for the runs root

Runs go to ROOT/<name>/<arm>/seed-<k>/ (ROOT: runs/experiments). At run time, `--var
NAME=VALUE` replaces a variable (lengths, steps, batch that arms derive from) and extra
`key=value` overrides apply after the spec's own and before each arm's; that is how the
same spec runs at paper scale (results/experiments/README.md).
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Sequence
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from microcoder.config_files import first_error, read_mapping
from microcoder.training.config import TrainConfig, load_config

DEFAULT_METRICS = ["heldout_accuracy", "reward_mean", "response_length_mean", "diversity"]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class Phase(BaseModel):
    """From `at_step` on (steps count from 1: the phase's first step is at_step + 1), these overrides too."""

    model_config = ConfigDict(extra="forbid")

    at_step: int | str
    """A step, or an expression of the spec's vars ("${S/2}")."""
    overrides: list[str]


class Arm(BaseModel):
    """An arm: its own base config (else the spec's), overrides for the whole run, then
    schedule changes at given steps."""

    model_config = ConfigDict(extra="forbid")

    base: str | list[str] | None = None
    overrides: list[str] = []
    then: list[Phase] = []


# A phase may not change what a checkpoint's step count means or who the run is.
FIXED_ACROSS_PHASES = ("train_batch_size", "ppo_mini_batch_size", "ppo_epochs", "group_size", "model",
                       "problems", "heldout_problems", "heldout_size", "seed", "run_dir")

X_AXES = ("step", "relative_data")
BUDGET_AXES = ("groups_generated", "responses_judged", "seconds")


class Mechanism(BaseModel):
    """How to tell that what the arms differ in acted: `reduce` over every logged value of
    `metric` in `arm`'s runs must reach `at_least`; below it the finding is "mechanism idle"."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    metric: str
    """A metrics.jsonl key, e.g. fraction_masked, clip_fraction_high, sampling_rounds, temperature."""
    arm: str | None = None
    """The arm whose runs are read; None: the finding's first arm."""
    reduce: str = "mean"
    """"mean", "max", or "range" (max - min: a schedule that moved)."""
    at_least: float
    """The mechanism acted when the reduced value is at least this."""

    @field_validator("reduce")
    @classmethod
    def _reduce(cls, value: str) -> str:
        if value not in ("mean", "max", "range"):
            raise ValueError("must be one of mean, max, range")
        return value


class Finding(BaseModel):
    """One of the paper's claims as a computed comparison (microcoder.experiments.verdict)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    claim: str
    """The paper's words, quoted on the page."""
    metric: str
    """The metrics.jsonl key compared."""
    arms: list[str]
    """[A, B]: A - B per seed; [A]: A at `at` minus A at `baseline`."""
    direction: str
    """The paper's: "greater" (A > B, or the later value is greater) or "less"."""
    at: int | str | list[int] = "last"
    """A step, "last" (the last logged step after 0), or a window [first, last] (the mean over its logged steps)."""
    baseline: int = 0
    """The step a change is measured from: always for one arm, with `change` for two (step 1 for
    training metrics, which start there; 0 for held-out accuracy)."""
    change: bool = False
    """Two arms: compare each arm's change from `baseline` to `at` (growth), not its value at `at`."""
    paper_effect: float | None = None
    """The paper's A - B (or later - earlier) in the metric's units, where it gives one."""
    untestable: str | None = None
    """Why this scale cannot test the claim (e.g. it appears after hundreds of steps); no verdict then."""
    confound: str | None = None
    """How the arms differ before training (two judges of the same responses, two problem sets, two
    limits at step 0): the comparison is shown, and not scored as evidence about training."""
    mechanism: Mechanism | None = None
    """What must have acted for the comparison to test the claim."""

    @field_validator("arms")
    @classmethod
    def _arms(cls, value: list[str]) -> list[str]:
        if len(value) not in (1, 2) or len(set(value)) != len(value):
            raise ValueError("needs one arm (a change within it) or two different arms (A - B)")
        return value

    @field_validator("direction")
    @classmethod
    def _direction(cls, value: str) -> str:
        if value not in ("greater", "less"):
            raise ValueError("must be greater or less")
        return value

    @field_validator("at")
    @classmethod
    def _at(cls, value: int | str | list[int]) -> int | str | list[int]:
        if isinstance(value, str) and value != "last":
            raise ValueError('a step, "last", or a window [first, last]')
        if isinstance(value, list) and (len(value) != 2 or value[0] > value[1]):
            raise ValueError("a window is [first, last] with first <= last")
        return value

    @property
    def label(self) -> str:
        """e.g. "heldout_accuracy: dapo - grpo at last"."""
        at = f"[{self.at[0]}, {self.at[1]}]" if isinstance(self.at, list) else self.at
        if len(self.arms) == 1:
            return f"{self.metric}: {self.arms[0]} at {at} - at {self.baseline}"
        if self.change:
            return f"{self.metric} change from {self.baseline} to {at}: {self.arms[0]} - {self.arms[1]}"
        return f"{self.metric}: {self.arms[0]} - {self.arms[1]} at {at}"


class ExperimentSpec(BaseModel):
    """One comparison: arms x seeds of training runs from one base config."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str
    """Directory name of the grid under the runs root."""
    base: str | list[str] | None = None
    """Base training config (YAML) relative to the spec file, or several layered in order; None: the built-in defaults."""
    overrides: list[str] = []
    """key=value overrides applied to every arm, before the arm's own."""
    arms: dict[str, list[str] | Arm]
    """Arm name -> its key=value overrides (an empty list: the base as it is), or {overrides, then: [{at_step, overrides}]}."""
    seeds: list[int] = [0]
    """Seeds; each arm runs once per seed (the config's `seed`)."""
    metrics: list[str] = DEFAULT_METRICS
    """metrics.jsonl keys the report plots, one panel each; "time_split" is a panel of mean seconds per phase."""
    x_axis: str = "step"
    """"step", or "relative_data" (prompts seen / the smallest train_batch_size of the arms: the batch-size aspect)."""
    findings: list[str | Finding] = []
    """The paper's findings this grid checks: a Finding is computed into a verdict by the
    report's rule; a plain string is only quoted."""
    budget_axes: list[str] = []
    """Also draw the metrics against cumulative training budget, one figure per axis:
    "groups_generated" (DAPO's refill counted), "responses_judged", "seconds"."""
    vars: dict[str, int | float] = {}
    """Numbers that overrides and at_step refer to as ${NAME} or ${expression}; `--var NAME=VALUE` replaces one."""
    share_heldout_start: bool = False
    """Every run's `heldout_start_cache` is ROOT/heldout-start (the runs root the runner writes to, shared by
    every grid under it), so the step-0 held-out evaluation of one starting model runs once per seed and
    decoding setting, not once per arm. A config's own heldout_start_cache wins."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"{value!r} is not a directory name (letters, digits, _ . -)")
        return value

    @field_validator("arms")
    @classmethod
    def _arms(cls, value: dict[str, list[str] | Arm]) -> dict[str, Arm]:
        if not value:
            raise ValueError("needs at least one arm")
        for arm in value:
            if not _NAME.match(arm):
                raise ValueError(f"arm {arm!r} is not a directory name (letters, digits, _ . -)")
        return {arm: spec if isinstance(spec, Arm) else Arm(overrides=spec) for arm, spec in value.items()}

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, value: list[int]) -> list[int]:
        if not value or len(set(value)) != len(value):
            raise ValueError("needs at least one seed, each once")
        return value

    @model_validator(mode="after")
    def _findings_name_arms(self) -> ExperimentSpec:
        for index, finding in enumerate(self.findings):
            if isinstance(finding, str):
                continue
            arms = [*finding.arms] + ([finding.mechanism.arm] if finding.mechanism and finding.mechanism.arm else [])
            unknown = [arm for arm in arms if arm not in self.arms]
            if unknown:
                raise ValueError(f"findings[{index}]: arm {unknown[0]!r} is not one of the spec's arms "
                                 f"({', '.join(self.arms)})")
        return self

    @property
    def computed_findings(self) -> list[Finding]:
        return [finding for finding in self.findings if isinstance(finding, Finding)]

    @field_validator("budget_axes")
    @classmethod
    def _budget_axes(cls, value: list[str]) -> list[str]:
        for axis in value:
            if axis not in BUDGET_AXES:
                raise ValueError(f"{axis!r} is not one of {', '.join(BUDGET_AXES)}")
        return value

    @field_validator("x_axis")
    @classmethod
    def _x_axis(cls, value: str) -> str:
        if value not in X_AXES:
            raise ValueError(f"must be one of {', '.join(X_AXES)}")
        return value


def load_spec(path: str | Path, extra: Sequence[str] = (),
              variables: dict[str, int | float] | None = None) -> tuple[ExperimentSpec, Path]:
    """(spec with its vars substituted, the folder its base paths are relative to); errors
    name the file and the field.

    `extra` overrides apply to every arm after the spec's own, and `variables` replace the
    spec's vars (paper-scale runs). Every arm's configs are built once here, so that a bad
    override fails before any run.
    """
    variables = variables or {}
    path = Path(path)
    raw = read_mapping(path)
    try:
        spec = ExperimentSpec.model_validate(raw)
    except ValidationError as error:
        field, message = first_error(error, whole="(spec)")
        raise ValueError(f"{path}: {field}: {message}") from None
    unknown = [name for name in variables if name not in spec.vars]
    if unknown:
        raise ValueError(f"{path}: vars: --var {unknown[0]}: the spec has no such variable "
                         f"(it has: {', '.join(spec.vars) or 'none'})")
    try:
        spec = substitute(spec.model_copy(update={"overrides": [*spec.overrides, *extra],
                                                  "vars": {**spec.vars, **variables}}))
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    folder = path.parent
    for arm in spec.arms:
        field = f"arms.{arm}.base" if spec.arms[arm].base is not None else "base"
        for base in arm_bases(spec, folder, arm):
            if not base.is_file():
                raise FileNotFoundError(f"{path}: {field}: {base} does not exist")
        try:
            arm_phases(spec, folder, arm, spec.seeds[0], Path("."))
        except ValueError as error:
            raise ValueError(f"{path}: arms.{arm}: {error}") from None
    from microcoder.training.metrics import METRIC_KEYS

    unknown = [key for key in spec.metrics if key not in (*METRIC_KEYS, "time_split")]
    if unknown:
        raise ValueError(f"{path}: metrics: {unknown[0]!r} is not a metrics.jsonl key")
    for index, finding in enumerate(spec.findings):
        if isinstance(finding, str):
            continue
        for field, key in (("metric", finding.metric),
                           ("mechanism.metric", finding.mechanism.metric if finding.mechanism else None)):
            if key is not None and key not in METRIC_KEYS:
                raise ValueError(f"{path}: findings[{index}].{field}: {key!r} is not a metrics.jsonl key")
    return spec, folder


_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.FloorDiv: operator.floordiv}


def evaluate(expression: str, variables: dict[str, int | float]) -> int | float:
    """The value of an arithmetic expression of numbers and variables (+ - * / // and
    parentheses); a whole-number result is an int. Raises ValueError naming what is wrong."""
    def value(node: ast.AST) -> int | float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in variables:
                raise ValueError(f"unknown variable {node.id!r} in ${{{expression}}}")
            return variables[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise ValueError(f"${{{expression}}}: only numbers, variables, + - * / // and parentheses")

    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"${{{expression}}} is not an arithmetic expression") from None
    try:
        result = value(tree.body)
    except ZeroDivisionError:
        raise ValueError(f"${{{expression}}} divides by zero") from None
    return int(result) if float(result).is_integer() else result


def substitute_text(text: str, variables: dict[str, int | float]) -> str:
    """`text` with every ${expression} replaced by its value."""
    return _REFERENCE.sub(lambda match: str(evaluate(match.group(1), variables)), text)


def substitute(spec: ExperimentSpec) -> ExperimentSpec:
    """The spec with its vars substituted into every override and at_step; errors name the field."""
    variables = spec.vars

    def texts(items: list[str], field: str) -> list[str]:
        try:
            return [substitute_text(item, variables) for item in items]
        except ValueError as error:
            raise ValueError(f"{field}: {error}") from None

    arms = {}
    for name, arm in spec.arms.items():
        phases = []
        for index, phase in enumerate(arm.then):
            field = f"arms.{name}.then[{index}]"
            at_step = phase.at_step
            if isinstance(at_step, str):
                try:
                    at_step = yaml.safe_load(substitute_text(at_step, variables))
                except (ValueError, yaml.YAMLError) as error:
                    raise ValueError(f"{field}.at_step: {error}") from None
                if not isinstance(at_step, int) or isinstance(at_step, bool):
                    raise ValueError(f"{field}.at_step: {phase.at_step!r} is {at_step!r}, not a whole step")
            phases.append(Phase(at_step=at_step, overrides=texts(phase.overrides, f"{field}.overrides")))
        arms[name] = Arm(base=arm.base, overrides=texts(arm.overrides, f"arms.{name}"), then=phases)
    return spec.model_copy(update={"overrides": texts(spec.overrides, "overrides"), "arms": arms})


def arm_bases(spec: ExperimentSpec, folder: Path, arm: str) -> list[Path]:
    """The base config files of an arm (its own, else the spec's), resolved against `folder`."""
    bases = spec.arms[arm].base if spec.arms[arm].base is not None else spec.base
    bases = [] if bases is None else [bases] if isinstance(bases, str) else bases
    return [Path(base) if Path(base).is_absolute() else folder / base for base in bases]


def arm_config(spec: ExperimentSpec, folder: Path, arm: str, seed: int, run_dir: Path,
               start_cache: Path | None = None) -> TrainConfig:
    """The training config of one run (its last phase): base, the spec's overrides, the arm's
    (and its phases'), then seed and run_dir."""
    return arm_phases(spec, folder, arm, seed, run_dir, start_cache)[-1]


def arm_phases(spec: ExperimentSpec, folder: Path, arm: str, seed: int, run_dir: Path,
               start_cache: Path | None = None) -> list[TrainConfig]:
    """The configs of a run's phases in order, each with total_steps set to where the phase
    ends (the last: the run's total_steps). One phase for an arm with no `then`.

    `start_cache`: the heldout_start_cache of a run whose configs set none (the runner's
    ROOT/heldout-start for a spec with share_heldout_start)."""
    plan = spec.arms[arm]
    bases = arm_bases(spec, folder, arm)
    run = [f"seed={seed}", f"run_dir={run_dir}"]
    overrides = [*spec.overrides, *plan.overrides]
    configs = [load_config(bases, [*overrides, *run])]
    if start_cache is not None and configs[0].heldout_start_cache is None:
        run.append(f"heldout_start_cache={start_cache}")
        configs = [load_config(bases, [*overrides, *run])]
    for index, phase in enumerate(plan.then):
        overrides = [*overrides, *phase.overrides]
        configs.append(load_config(bases, [*overrides, *run]))
        total = configs[-1].total_steps
        previous = plan.then[index - 1].at_step if index else 0
        if not previous < phase.at_step < total:
            raise ValueError(f"then[{index}].at_step: {phase.at_step} must be after {previous} and before "
                             f"total_steps ({total})")
        changed = [key for key in FIXED_ACROSS_PHASES if getattr(configs[-1], key) != getattr(configs[0], key)]
        if changed:
            raise ValueError(f"then[{index}]: {changed[0]} cannot change within a run")
    ends = [phase.at_step for phase in plan.then] + [configs[-1].total_steps]
    return [TrainConfig.model_validate({**config.model_dump(), "total_steps": end}) for config, end in zip(configs, ends)]
