"""An experiment spec: a base config, the arms (config overrides each), the seeds, the metrics.

    name: kl_clip
    base: configs/microcoder.yaml          # relative to the spec file, or absolute
    overrides: [total_steps=20, eval_every=5]   # for every arm
    arms:
      kl_symmetric: [beta=0.001, eps_high=0.2]
      no_kl_clip_higher: []
    seeds: [0, 1, 2]
    metrics: [heldout_accuracy, reward_mean, response_length_mean, diversity]
    finding: "No KL with high clip keeps diversity and length growing ..."   # quoted in the report

Runs go to ROOT/<name>/<arm>/seed-<k>/ (ROOT: runs/experiments).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from microcoder.training.config import TrainConfig, load_config

DEFAULT_METRICS = ["heldout_accuracy", "reward_mean", "response_length_mean", "diversity"]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class ExperimentSpec(BaseModel):
    """One comparison: arms x seeds of training runs from one base config."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str
    """Directory name of the grid under the runs root."""
    base: str | None = None
    """Base training config (YAML), relative to the spec file; None: the built-in defaults."""
    overrides: list[str] = []
    """key=value overrides applied to every arm, before the arm's own."""
    arms: dict[str, list[str]]
    """Arm name -> its key=value overrides (an empty list: the base as it is)."""
    seeds: list[int] = [0]
    """Seeds; each arm runs once per seed (the config's `seed`)."""
    metrics: list[str] = DEFAULT_METRICS
    """metrics.jsonl keys the report plots, one panel each."""
    finding: str = ""
    """The paper's finding this grid checks, quoted in the report."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"{value!r} is not a directory name (letters, digits, _ . -)")
        return value

    @field_validator("arms")
    @classmethod
    def _arms(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        if not value:
            raise ValueError("needs at least one arm")
        for arm in value:
            if not _NAME.match(arm):
                raise ValueError(f"arm {arm!r} is not a directory name (letters, digits, _ . -)")
        return value

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, value: list[int]) -> list[int]:
        if not value or len(set(value)) != len(value):
            raise ValueError("needs at least one seed, each once")
        return value


def load_spec(path: str | Path) -> tuple[ExperimentSpec, Path | None]:
    """(spec, resolved base config path or None); errors name the file and the field.

    Every arm's config is built once here, so that a bad override fails before any run.
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not YAML: {error}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping, got {type(raw).__name__}")
    try:
        spec = ExperimentSpec.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(spec)"
        raise ValueError(f"{path}: {field}: {first['msg'].removeprefix('Value error, ')}") from None
    base = None
    if spec.base is not None:
        base = (path.parent / spec.base) if not Path(spec.base).is_absolute() else Path(spec.base)
        if not base.is_file():
            raise FileNotFoundError(f"{path}: base: {base} does not exist")
    for arm in spec.arms:
        try:
            arm_config(spec, base, arm, spec.seeds[0], Path("."))
        except ValueError as error:
            raise ValueError(f"{path}: arms.{arm}: {error}") from None
    from microcoder.training.trainer import METRIC_KEYS

    unknown = [key for key in spec.metrics if key not in METRIC_KEYS]
    if unknown:
        raise ValueError(f"{path}: metrics: {unknown[0]!r} is not a metrics.jsonl key")
    return spec, base


def arm_config(spec: ExperimentSpec, base: Path | None, arm: str, seed: int, run_dir: Path) -> TrainConfig:
    """The training config of one run: base, the spec's overrides, the arm's, then seed and run_dir."""
    return load_config(base, [*spec.overrides, *spec.arms[arm], f"seed={seed}", f"run_dir={run_dir}"])
