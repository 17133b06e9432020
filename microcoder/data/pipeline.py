"""`microcoder data build`: sources -> a clean, deduplicated, decontaminated corpus.

    config = load_config("configs/data/shared.yaml")
    build(config)                        # every stage, skipping those already done
    run_stage(config, "dedup")           # one stage; its input must exist

Stages, in order (docs/data_pipeline.md says what each removes and why):

    ingest -> validate -> dedup -> decontaminate -> difficulty -> export

Each stage reads the previous stage's `problems.jsonl` and writes, under
`work_dir/<stage>/`: `problems.jsonl` (what it kept), `removed.jsonl` (one `Removal`
per dropped problem, with its reason and match), `rejects.jsonl` (malformed records:
file, row, field) and `manifest.json`. The manifest holds the hash of the stage's
input (the upstream manifests' output hashes) and of its config section; a stage
whose manifest matches is skipped, so a rerun after an interruption or a config edit
redoes only what changed. Files are written to a temporary name and renamed, so an
interrupted stage leaves no half-written output that could be taken for a finished one.

Choices of ours (the paper describes the corpus, not the pipeline):
- Relative paths in a config resolve against the repository root (the nearest
  ancestor of the config file holding `pyproject.toml`), else the config's folder.
- A record that makes a stage raise is rejected with the stage's input file and row,
  never stops the build.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from microcoder.data.loaders import Reject
from microcoder.problems import Problem, ProblemFormatError, iter_jsonl, parse_problems

STAGES = ("ingest", "validate", "dedup", "decontaminate", "difficulty", "export")
PIPELINE_VERSION = 4
"""Part of every stage's config hash: bump when a stage's behaviour changes."""


# ------------------------------------------------------------------------- config


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

    def __post_init__(self) -> None:
        for name in ("time_limit_multiple", "time_limit_floor_s", "time_limit_cap_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"validate.{name} must be a positive number, got {value!r}")
        if self.time_limit_multiple < 1:
            raise ValueError(f"validate.time_limit_multiple must be at least 1 (the reference must pass its own "
                             f"limit), got {self.time_limit_multiple!r}")
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
class DifficultyConfig:
    """Stage 5: labels, optional model pass rate, pass-rate band and date filters."""

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
    """Stage 6: Parquet + JSONL + datasheet."""

    name: str = "microcoder-dataset"
    """File stem of the exported corpus."""
    examples_per_reason: int = 3
    """Removed problems listed per reason in the datasheet."""


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
    difficulty: DifficultyConfig = field(default_factory=DifficultyConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    base_dir: str = "."
    """Folder relative paths resolve against (set by load_config)."""

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
              "difficulty": DifficultyConfig, "export": ExportConfig}
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


def load_config(path: str | Path) -> PipelineConfig:
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


# ------------------------------------------------------------------ stage records


@dataclass
class Removal:
    """A problem a stage dropped on purpose, with the evidence."""

    id: str
    source: str
    stage: str
    reason: str
    """Short category used for counting, e.g. 'near duplicate'."""
    detail: str = ""
    match: str | None = None
    """The problem it matched (duplicate kept, evaluation problem), when there is one."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)


@dataclass
class StageOutput:
    """What a stage function returns; the pipeline writes it."""

    problems: list[Problem]
    removals: list[Removal] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    """Small facts for the manifest and datasheet (e.g. per-source counts)."""


class StageContext:
    """What stages share: the config, progress bars, and one lazily started evaluator."""

    def __init__(self, config: PipelineConfig, generator: Any = None, force: bool = False):
        self.config = config
        self.force = force
        """Ignore the per-source ingest cache (loaders may have changed)."""
        self.generator = generator
        """A `ResponseGenerator` for the difficulty stage; tests inject a fake one."""
        self._evaluator = None

    def evaluator(self):
        if self._evaluator is None:
            from microcoder.evaluator import Evaluator, EvaluatorConfig

            self._evaluator = Evaluator(EvaluatorConfig(workers=self.config.workers, time_limit_s=self.config.time_limit_s,
                                                        record_test_cpu=True))
        return self._evaluator

    def close(self) -> None:
        if self._evaluator is not None:
            self._evaluator.close()
            self._evaluator = None

    @contextmanager
    def progress(self, description: str, total: int) -> Iterator[Callable[[int], None]]:
        """A rich progress bar; yields `advance(n=1)`."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      disable=not self.config.progress, transient=False) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n=1: bar.advance(task, n)


# ------------------------------------------------------------------------- files


def sha256_of(*parts: Any) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else json.dumps(part, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:20]


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:20]


def write_lines_atomic(path: Path, lines: Iterable[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(line + "\n")
    os.replace(temporary, path)


def write_json_atomic(path: Path, data: Any) -> None:
    write_lines_atomic(path, [json.dumps(data, indent=2, ensure_ascii=False, default=str)])


def read_json_lines(path: Path) -> list[dict]:
    """The records of a JSONL file of ours (caches, rejects); none when it is absent. A
    line that is not JSON (cut by an interruption) is skipped: its work is redone."""
    if not path.exists():
        return []
    return [record for _, record in iter_jsonl(path, on_error=lambda error: None)]


def read_stage_problems(path: Path, stage: str) -> tuple[list[Problem], list[Reject]]:
    """Read a stage's input; a malformed line is a Reject (file, row, field), not a crash."""
    rejects: list[Reject] = []

    def on_error(error: ProblemFormatError) -> None:
        rejects.append(Reject(error.path, error.row, error.field, "malformed record", str(error), None))

    from microcoder.evaluator.evaluate import with_checked_time_limits

    rows = with_checked_time_limits(iter_jsonl(path, on_error), path, on_error)
    return parse_problems(rows, path, on_error), rejects


# ------------------------------------------------------------------------ running


def stage_config(config: PipelineConfig, stage: str) -> dict[str, Any]:
    """The part of the config a stage depends on (its cache key)."""
    common = {"version": PIPELINE_VERSION, "stage": stage}
    if stage == "ingest":
        return {**common, "sources": [asdict(s) for s in config.sources]}
    if stage == "validate":
        settings = asdict(config.validate)
        settings.pop("batch_size")  # how often verdicts are cached, not what they are
        return {**common, **settings, "time_limit_s": config.time_limit_s}
    if stage == "difficulty":
        return {**common, **asdict(config.difficulty), "time_limit_s": config.time_limit_s}
    section = getattr(config, stage)
    return {**common, **(asdict(section) if is_dataclass(section) else {})}


def read_manifest(config: PipelineConfig, stage: str) -> dict[str, Any] | None:
    path = config.stage_dir(stage) / "manifest.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _input_hash(config: PipelineConfig, stage: str) -> str | None:
    """Ingest: the sources' contents. Later stages: the output hashes of every upstream
    stage (None when one has not run)."""
    if stage == "ingest":
        from microcoder.data.ingest import sources_fingerprint

        return sources_fingerprint(config)
    hashes = []
    for upstream in STAGES[: STAGES.index(stage)]:
        manifest = read_manifest(config, upstream)
        if manifest is None:
            return None
        hashes.append(manifest["output_hash"])
    return sha256_of(hashes)


def is_done(config: PipelineConfig, stage: str) -> bool:
    manifest = read_manifest(config, stage)
    if manifest is None:
        return False
    outputs_exist = all((config.stage_dir(stage) / name).exists() for name in manifest.get("outputs", []))
    return (outputs_exist and manifest.get("input_hash") == _input_hash(config, stage)
            and manifest.get("config_hash") == sha256_of(stage_config(config, stage)))


class MissingInput(RuntimeError):
    """A single stage was asked to run before the stage it reads from."""


def run_stage(config: PipelineConfig, stage: str, force: bool = False, context: StageContext | None = None,
              log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run one stage (unless its manifest says it is done) and return its manifest."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)}")
    if not force and is_done(config, stage):
        manifest = read_manifest(config, stage)
        log(f"{stage}: up to date ({manifest['counts']['out']} problems), skipped")
        return manifest
    input_hash = _input_hash(config, stage)
    if input_hash is None:
        previous = STAGES[STAGES.index(stage) - 1]
        raise MissingInput(f"{stage} reads the output of {previous}, which has not run: "
                           f"run `microcoder data {previous}` or `microcoder data build` first")
    own_context = context is None
    context = context or StageContext(config, force=force)
    started = time.monotonic()
    out_dir = config.stage_dir(stage)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        if stage == "ingest":
            from microcoder.data.ingest import ingest

            result = ingest(config, context)
            count_in = len(result.problems) + len(result.rejects)
        else:
            previous_dir = config.stage_dir(STAGES[STAGES.index(stage) - 1])
            problems, input_rejects = read_stage_problems(previous_dir / "problems.jsonl", stage)
            result = _run_on_problems(stage, problems, config, context)
            result.rejects[:0] = input_rejects
            count_in = len(problems) + len(input_rejects)
    finally:
        if own_context:
            context.close()
    outputs = ["problems.jsonl", "removed.jsonl", "rejects.jsonl"]
    write_lines_atomic(out_dir / "problems.jsonl", (p.model_dump_json() for p in result.problems))
    write_lines_atomic(out_dir / "removed.jsonl", (r.to_json() for r in result.removals))
    write_lines_atomic(out_dir / "rejects.jsonl", (r.to_json() for r in result.rejects))
    if stage == "export":
        outputs += result.extra.pop("files", [])
    manifest = {
        "stage": stage,
        "input_hash": input_hash,
        "config_hash": sha256_of(stage_config(config, stage)),
        "output_hash": sha256_of(*(file_hash(out_dir / name) for name in outputs[:3])),
        "outputs": outputs,
        "counts": {"in": count_in, "out": len(result.problems), "removed": len(result.removals),
                   "rejected": len(result.rejects)},
        "seconds": round(time.monotonic() - started, 1),
        "extra": result.extra,
    }
    write_json_atomic(out_dir / "manifest.json", manifest)
    log(f"{stage}: {count_in} in, {len(result.problems)} out, {len(result.removals)} removed, "
        f"{len(result.rejects)} rejected ({manifest['seconds']} s)")
    return manifest


def _run_on_problems(stage: str, problems: list[Problem], config: PipelineConfig, context: StageContext) -> StageOutput:
    if stage == "validate":
        from microcoder.data.validate import validate

        return validate(problems, config, context)
    if stage == "dedup":
        from microcoder.data.dedup import deduplicate

        return deduplicate(problems, config.dedup, context)
    if stage == "decontaminate":
        from microcoder.data.decontaminate import decontaminate

        return decontaminate(problems, config, context)
    if stage == "difficulty":
        from microcoder.data.difficulty import difficulty

        return difficulty(problems, config, context)
    if stage == "export":
        from microcoder.data.export import export

        return export(problems, config, context)
    raise ValueError(f"unknown stage {stage!r}")


def build(config: PipelineConfig, force: bool = False, generator: Any = None,
          log: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:
    """Run every stage in order, skipping those already done; returns their manifests.
    `force` reruns all of them and re-reads every source (the content-keyed caches of
    reference verdicts and pass rates still apply)."""
    context = StageContext(config, generator=generator, force=force)
    manifests = {}
    try:
        for stage in STAGES:
            manifests[stage] = run_stage(config, stage, force=force, context=context, log=log)
    finally:
        context.close()
    return manifests
