"""The data pipeline's config: one YAML file read into `PipelineConfig`.

    config = load_build_config("configs/data/shared.yaml")

Each stage has its section (`validate`, `dedup`, ...), every field documented where it is
declared. Relative paths resolve against the repository root (the nearest ancestor of the
config file holding `pyproject.toml`), else the config's folder.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


@dataclass
class SourceConfig:
    """One input: a local file in any loader format, or a Hugging Face dataset."""

    path: str
    """A file (.json, .jsonl, .jsonl.gz) or `hf:NAME[:split]`: NAME is a dataset name
    for `datasets.load_dataset` (`json`, `parquet` with `data_files`, a hub name) or a
    directory written by `Dataset.save_to_disk`."""
    name: str | None = None
    """Short name used in provenance and reports; defaults to the file's stem."""
    format: str = "auto"
    """A loader format (docs/formats.md), `canonical`, or `auto` (detected from fields)."""
    data_files: list[str] | None = None
    """For `hf:json` / `hf:parquet`: the files to read (relative to the repository root)."""
    licence: str | None = None
    """Licence recorded on records that carry none (canonical and hf inputs)."""
    dates: str | None = None
    """A file of publication dates to give this source's undated problems: JSON
    {"two-sum": "2015-08-10", ...} or CSV lines `slug,YYYY-MM-DD`, keyed by the problem's
    `metadata.original_id` (the LeetCode slug for LeetCodeDataset). Dates the source
    already carries win."""


@dataclass
class ValidateConfig:
    """Stage 2: tests that belong to their problem, references that pass, checkers."""

    check_input_format: bool = True
    """Drop stdin tests whose first line does not fit the statement's input format."""
    infer_checkers: bool = True
    """Set `checker` from statement phrases (float tolerance, any letter case)."""
    run_references: bool = True
    """Run `metadata.reference_solution` through the evaluator; drop problems it fails."""
    batch_size: int = 50
    """Problems per evaluator call; verdicts are cached after each batch."""
    min_tests: int = 1
    """Problems left with fewer tests than this (after the drops above) are removed, with
    the reason: few tests let wrong programs pass (DeepCoder keeps problems with 5 or more)."""
    max_tests: int | None = None
    """Tests kept per problem in the corpus (None: all): the ones with the longest inputs,
    ties in the source's order, kept in that order. Storage and build time only; the
    reward's own test budget is a training setting."""
    retime_runs: int = 3
    """A reference run that times out, whose slowest test takes `retime_above` of the
    per-test limit or more, or whose time sets a derived limit above the floor or comes
    within `retime_margin` of doing so, is run this
    many times in all; it passes if one run passes, and each test's CPU time is its least
    over the passing runs (load only ever adds time), so one noisy run does not change the
    corpus. 1 runs every reference once."""
    reference_timings_from: str | None = None
    """Another build's `validate/reference_verdicts.jsonl`: each reference whose content key
    (code, tests, checker, limits) is found there takes that build's verdict and CPU times
    instead of running, so a rebuild reproduces its limits exactly; the others run. CPU time
    is a measurement: two builds from nothing differ in the few limits whose reference sits
    within noise of a step's edge (docs/data_pipeline.md, "Two builds in a row").
    References already in this build's own cache keep it: to reproduce a build, start from
    an empty work_dir."""
    retime_above: float = 0.5
    """Fraction of the reference limit (`time_limit_s`) from which a passing run is re-timed."""
    retime_margin: float = 1.5
    """A passing run whose slowest test is within this factor below the time at which its
    derived limit leaves the floor (floor / multiple) is re-timed too, so a reference near
    that edge is timed the same way (least of `retime_runs`) in every build, whichever side
    of the edge its first run falls. 1.5 covers the 1.41x rerun variation measured on tests
    of 100 ms or more (docs/data_pipeline.md, "Time limits"). Cached verdicts are not
    re-timed when it changes."""
    time_limits_from_reference: bool = True
    """Set the `time_limit_s` of each problem whose reference passes to
    time_limit_multiple x its slowest test's CPU time, within [floor, cap] (validate.py);
    problems without a reference keep the source's limit, or none (the judge's default)."""
    time_limit_multiple: float = 3.0
    """Limit / the reference's slowest test. Rerun on the loaded 2-core VMs, no reference's
    slowest test took over 2.2x its recorded time, none of 100 ms or more over 1.41x
    (docs/data_pipeline.md, "Time limits": the measurements behind all three defaults)."""
    time_limit_floor_s: float = 1.0
    """The least limit; it decides nearly every problem (99.5% of references take under
    0.1 s). Of LeetCodeDataset's model responses accepted at 2 s, 99.9% take under 0.06 s
    on their slowest test; 1 s leaves room for a slower machine and a worse constant."""
    time_limit_cap_s: float = 6.0
    """The greatest limit, what an infinite loop may cost per test: 1.5x the 4 s a
    reference may take (`time_limit_s`), above the 1.41x rerun variation measured."""
    time_limit_step_s: float = 0.5
    """Derived limits are rounded up to a multiple of this, as judges publish coarse limits,
    so CPU-time noise moves a limit only when it crosses a step (docs/data_pipeline.md,
    "Two builds in a row")."""

    def __post_init__(self) -> None:
        for name in ("time_limit_multiple", "time_limit_floor_s", "time_limit_cap_s", "time_limit_step_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"validate.{name} must be a positive number, got {value!r}")
        if self.time_limit_multiple < 1:
            raise ValueError(f"validate.time_limit_multiple must be at least 1 (the reference must pass its own "
                             f"limit), got {self.time_limit_multiple!r}")
        if isinstance(self.retime_margin, bool) or not isinstance(self.retime_margin, (int, float)) \
                or not math.isfinite(self.retime_margin) or self.retime_margin < 1:
            raise ValueError(f"validate.retime_margin must be a finite number >= 1, got {self.retime_margin!r}")
        if self.reference_timings_from is not None and (not isinstance(self.reference_timings_from, str)
                                                        or not self.reference_timings_from):
            raise ValueError(f"validate.reference_timings_from must be a path (a string) or null, "
                             f"got {self.reference_timings_from!r}")
        for name in ("min_tests", "retime_runs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"validate.{name} must be an integer >= 1, got {value!r}")
        if self.max_tests is not None and (isinstance(self.max_tests, bool) or not isinstance(self.max_tests, int)
                                           or self.max_tests < self.min_tests):
            raise ValueError(f"validate.max_tests must be null or an integer >= min_tests ({self.min_tests}), "
                             f"got {self.max_tests!r}")
        if isinstance(self.retime_above, bool) or not isinstance(self.retime_above, (int, float)) \
                or not 0 < self.retime_above <= 1:
            raise ValueError(f"validate.retime_above must be in (0, 1], got {self.retime_above!r}")
        if self.time_limit_floor_s > self.time_limit_cap_s:
            raise ValueError(f"validate.time_limit_floor_s ({self.time_limit_floor_s}) is above "
                             f"validate.time_limit_cap_s ({self.time_limit_cap_s})")


@dataclass
class DedupConfig:
    """Stage 3: exact and near duplicates, within and across sources."""

    near: bool = True
    """Also find near duplicates (MinHash LSH over statement shingles)."""
    threshold: float = 0.7
    """Jaccard similarity of statement shingle sets at or above which two problems are one."""
    shingle_words: int = 3
    """Words per shingle."""
    num_perm: int = 128
    """MinHash permutations."""
    keep_constraint_variants: bool = True
    """Keep near-identical statements whose numbers differ (other constraints, e.g. LeetCode I / II)."""


@dataclass
class DecontaminateConfig:
    """Stage 4: remove training problems that are (copies of) evaluation problems."""

    eval_sets: list[SourceConfig] = field(default_factory=list)
    """Named evaluation sets, read with the same loaders as the sources."""
    ngram: int = 8
    """Words per statement n-gram."""
    overlap_threshold: float = 0.5
    """Shared n-grams / n-grams of the shorter statement at or above which a problem is contaminated."""
    common_ngram_max: int = 5
    """An n-gram found in more eval problems than this is boilerplate and ignored."""
    min_tests_for_identical: int = 2
    """Identical test sets count only with at least this many tests (one trivial test is chance)."""


@dataclass
class AmplifyConfig:
    """Stage 5: shown and hidden tests; inputs generated from each reference problem's
    stored ones, answered by its reference (amplify.py)."""

    enabled: bool = True
    """Generate tests (off: only mark shown tests and apply the two removals below)."""
    tests_per_problem: int = 100
    """Inputs generated per `call` problem with a reference (fewer when the input space is
    small); those the reference answers become hidden tests. More catch more wrong programs
    and cost amplify time and corpus size in proportion (benchmarks/corpus_adequacy.py
    measures what a build's tests catch; docs/benchmarks.md, "Corpus adequacy", has 50
    against 100)."""
    seed: int = 0
    """Seed of the generated inputs (with each problem's id)."""
    max_items: int = 60
    """Most items a generated list may have (the statement's limit is often 10^5)."""
    max_chars: int = 60
    """Most characters a generated string may have."""
    max_input_chars: int = 4000
    """Most characters of one generated test's input (its JSON lines)."""
    keep_unverified: bool = False
    """Keep problems with no reference solution (marked `metadata.verified: false`): their
    tests cannot be checked or extended, and most are the statement's examples."""
    batch_size: int = 500
    """Reference runs between two writes of the answer cache."""
    answers_from: str | None = None
    """Another build's `amplify/reference_answers.jsonl`: answers (and their CPU times) found
    there are taken instead of run, so a rebuild reproduces that build's limits exactly
    (as `validate.reference_timings_from` does for stored tests)."""

    def __post_init__(self) -> None:
        for name in ("tests_per_problem", "max_items", "max_chars", "max_input_chars", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "tests_per_problem" else 1):
                raise ValueError(f"amplify.{name} must be a non-negative integer"
                                 f"{'' if name == 'tests_per_problem' else ' >= 1'}, got {value!r}")
        for name in ("enabled", "keep_unverified"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"amplify.{name} must be true or false, got {getattr(self, name)!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"amplify.seed must be an integer, got {self.seed!r}")


@dataclass
class DifficultyConfig:
    """Stage 6: labels, optional model pass rate, pass-rate band and date filters."""

    estimate_pass_rate: bool = False
    """Sample the model and judge its answers (slow on CPU; off unless asked for)."""
    model: str = "default"
    """Model for the pass rate: `default` (SmolLM2 checkpoint), a directory, or a hub id."""
    samples_per_problem: int = 4
    """n: samples per problem; the pass rate is accepted / n."""
    max_new_tokens: int = 512
    """Generation limit per sample."""
    temperature: float = 1.0
    """Sampling temperature."""
    seed: int = 0
    """Sampling seed."""
    batch_size: int = 16
    """Sequences per generate call."""
    pass_rate_band: list[float] = field(default_factory=lambda: [0.0, 1.0])
    """[low, high]: keep problems whose estimated pass rate lies in it (inclusive);
    e.g. [0.01, 0.99] drops problems the model always or never solves."""
    date_cutoff: str | None = None
    """YYYY-MM-DD: keep problems dated on or after it (freshness); None keeps all."""
    keep_undated: bool = True
    """With a cutoff, keep problems that have no date."""


@dataclass
class ExportConfig:
    """Stage 7: Parquet + JSONL + datasheet."""

    name: str = "microcoder-dataset"
    """File stem of the exported corpus."""
    examples_per_reason: int = 3
    """Removed problems listed per reason in the datasheet."""
    validation_fraction: float = 0.05
    """Share of problems in the validation split (verl/ and trl/ files, split.json)."""
    split_seed: int = 0
    """Seed of the split (with each problem's id, through sha256)."""

    def __post_init__(self) -> None:
        if isinstance(self.validation_fraction, bool) or not isinstance(self.validation_fraction, (int, float)) \
                or not 0 <= self.validation_fraction < 1:
            raise ValueError(f"export.validation_fraction must be in [0, 1), got {self.validation_fraction!r}")
        if isinstance(self.split_seed, bool) or not isinstance(self.split_seed, int):
            raise ValueError(f"export.split_seed must be an integer, got {self.split_seed!r}")


@dataclass
class PipelineConfig:
    """One build: where the sources are, what each stage does, where outputs go."""

    sources: list[SourceConfig]
    """Inputs, in priority order (an earlier source wins ties between equally rich duplicates)."""
    work_dir: str = "build/data"
    """Stage outputs and caches (relative to the repository root)."""
    workers: int = 2
    """Sandbox workers for recording tests, reference runs and pass rates."""
    time_limit_s: float = 4.0
    """CPU seconds per test for reference runs (the most a reference may take), and for model
    samples on problems with no limit of their own (judges' limits are set for C++)."""
    progress: bool = True
    """Show a progress bar per stage."""
    validate: ValidateConfig = field(default_factory=ValidateConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    decontaminate: DecontaminateConfig = field(default_factory=DecontaminateConfig)
    amplify: AmplifyConfig = field(default_factory=AmplifyConfig)
    difficulty: DifficultyConfig = field(default_factory=DifficultyConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    base_dir: str = "."
    """Folder relative paths resolve against (set by load_build_config)."""

    def resolve(self, path: str) -> Path:
        candidate = Path(path).expanduser()
        return candidate if candidate.is_absolute() else Path(self.base_dir) / candidate

    def stage_dir(self, stage: str) -> Path:
        return self.resolve(self.work_dir) / stage


def _from_dict(cls: type, data: Any, where: str) -> Any:
    """Build dataclass `cls` from a YAML mapping; unknown keys are an error naming the valid ones."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping, got {type(data).__name__}")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; valid keys: {sorted(known)}")
    nested = {"validate": ValidateConfig, "dedup": DedupConfig, "decontaminate": DecontaminateConfig,
              "amplify": AmplifyConfig, "difficulty": DifficultyConfig, "export": ExportConfig}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("sources", "eval_sets"):
            if not isinstance(value, list):
                raise ValueError(f"{where}.{key}: expected a list")
            values[key] = [
                _from_dict(SourceConfig, {"path": item} if isinstance(item, str) else item, f"{where}.{key}[{i}]")
                for i, item in enumerate(value)
            ]
        elif key in nested and cls is PipelineConfig:
            values[key] = _from_dict(nested[key], value or {}, f"{where}.{key}")
        elif key == "data_files" and isinstance(value, str):
            values[key] = [value]
        else:
            values[key] = value
    try:
        return cls(**values)
    except TypeError as error:
        raise ValueError(f"{where}: {error}") from None


def repo_root_of(path: Path) -> Path:
    """Nearest ancestor holding pyproject.toml, else the path's own folder."""
    for folder in [path.parent, *path.parent.parents]:
        if (folder / "pyproject.toml").exists():
            return folder
    return path.parent


def load_build_config(path: str | Path) -> PipelineConfig:
    """The data config at `path` (YAML), relative paths resolved (see `base_dir`)."""
    import yaml

    path = Path(path).resolve()
    data = yaml.safe_load(path.read_text()) or {}
    if "sources" not in data:
        raise ValueError(f"{path}: a data config needs `sources`")
    config = _from_dict(PipelineConfig, data, path.name)
    if "base_dir" in data:
        config.base_dir = str((path.parent / data["base_dir"]).resolve())
    else:
        config.base_dir = str(repo_root_of(path))
    return config
