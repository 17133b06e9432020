"""Stage 1, ingest: every source -> canonical problems with provenance.

A source is a local file in any loader format (docs/formats.md), a canonical JSONL file,
or `hf:NAME[:split]` read with `datasets` (rows are written to a temporary JSONL file
and go through the same loaders, so a Hugging Face copy of LiveCodeBench converts like
the file). Each source is cached on its own under `ingest/sources/`, keyed by its
content and settings: a rerun after adding a source converts only that one. A file the
config names that is missing or unreadable stops the build before it starts
(`pipeline.check_inputs`); a source that fails as a whole otherwise (a format no loader
detects, a hub dataset that does not load) becomes one reject instead of stopping the
build. A full or read-only disk stops the build.

Provenance added to every problem's metadata: `pipeline_source` (the source's name in
the config) and `source_path` (the path or `hf:` spec as configured); the loaders
already set `original_id`, `licence`, `source_file`, `source_row`. Ids repeated across
sources (the same LeetCode slug in two releases) get `@<source name>` appended, so ids
stay unique; duplicates are the dedup stage's business.
"""

from __future__ import annotations

import gzip
import json
import re
import tempfile
from pathlib import Path
from typing import Any

from microcoder.data.config import PipelineConfig, SourceConfig
from microcoder.data.loaders import detect_format, load_problems
from microcoder.data.sources import SOURCES, licence_of
from microcoder.data.records import Reject, read_records
from microcoder.data.stages import (
    StageContext,
    StageOutput,
    file_hash,
    read_json_lines,
    sha256_of,
    write_json_atomic,
    write_lines_atomic,
)
from microcoder.evaluator.sandbox import SandboxFault
from microcoder.problems import DuplicateIdError, Problem, ProblemFormatError, parse_problems

CANONICAL_FIELDS = {"id", "prompt", "kind", "tests"}


def source_name(source: SourceConfig) -> str:
    if source.name:
        return source.name
    if source.path.startswith("hf:"):
        return source.path[3:].replace("/", "_").replace(":", "_") or "hf"
    name = Path(source.path).name
    for suffix in (".gz", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return name


def parse_hf_spec(spec: str) -> tuple[str, str | None]:
    """`hf:NAME[:split]` -> (NAME, split or None)."""
    body = spec.removeprefix("hf:")
    if not body:
        raise ValueError(f"{spec!r}: expected hf:NAME[:split]")
    name, _, split = body.rpartition(":") if ":" in body else (body, "", "")
    return (name, split or None) if name else (body, None)


def source_files(config: PipelineConfig, source: SourceConfig) -> list[Path]:
    """The local files a source is read from: its file, or an `hf:` source's data files and
    the files of its saved-dataset folder (none for a hub name)."""
    if not source.path.startswith("hf:"):
        return [config.resolve(source.path)]
    name, _ = parse_hf_spec(source.path)
    paths = [config.resolve(f) for f in source.data_files or []]
    local = config.resolve(name)
    if local.is_dir():
        paths += sorted(p for p in local.rglob("*") if p.is_file())
    return paths


def source_inputs(config: PipelineConfig, source: SourceConfig, field: str) -> list[tuple[str, Path]]:
    """(what the config calls it, path) for each file the config names for `source` (read
    by `field`): its file or data files, and its date table."""
    if source.path.startswith("hf:"):
        named = [(f"{field}.data_files[{index}]", config.resolve(path)) for index, path in enumerate(source.data_files or [])]
    else:
        named = [(f"{field}.path", config.resolve(source.path))]
    if source.dates:
        named.append((f"{field}.dates", config.resolve(source.dates)))
    return named


def _source_fingerprint(config: PipelineConfig, source: SourceConfig) -> str:
    """Hash of a source's settings and content (file bytes, data files, saved dataset files)."""
    parts: list[Any] = [source.path, source.format, source.licence, source.name, source.dates]
    if source.dates:
        table = config.resolve(source.dates)
        parts.append(file_hash(table) if table.is_file() else f"missing:{table}")
    for path in source_files(config, source):
        parts.append(file_hash(path) if path.is_file() else f"missing:{path}")
    return sha256_of(*parts)


def sources_fingerprint(config: PipelineConfig, sources: list[SourceConfig]) -> str:
    """Hash of the settings and contents of `sources` (the config's sources or eval sets)."""
    return sha256_of(*(_source_fingerprint(config, source) for source in sources))


# ------------------------------------------------------------------------ reading


def _hf_records(config: PipelineConfig, source: SourceConfig) -> list[dict[str, Any]]:
    """Rows of a Hugging Face dataset: a saved dataset directory (`load_from_disk`) or
    `datasets.load_dataset(NAME, data_files=..., split=...)`."""
    import datasets

    name, split = parse_hf_spec(source.path)
    local = config.resolve(name)
    if local.is_dir() and ((local / "dataset_info.json").exists() or (local / "dataset_dict.json").exists()):
        dataset = datasets.load_from_disk(str(local))
    else:
        kwargs: dict[str, Any] = {}
        if source.data_files:
            kwargs["data_files"] = [str(config.resolve(f)) for f in source.data_files]
        dataset = datasets.load_dataset(name, split=split or "train", **kwargs)
    if isinstance(dataset, datasets.DatasetDict):
        dataset = dataset[split or next(iter(dataset))]
    return [_decode_json_columns(_without_nulls(dict(row))) for row in dataset]


def _without_nulls(value: Any) -> Any:
    """Drop null-valued keys, recursively. Arrow gives every row every column, filling
    absent ones with null (a row without `metadata.reference_solution` gets one set to
    None); the original record did not have them."""
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def _decode_json_columns(row: dict[str, Any]) -> dict[str, Any]:
    """Our own Parquet export stores `metadata` and `checker` as JSON text; undo that."""
    if CANONICAL_FIELDS <= set(row):
        for key in ("metadata", "checker"):
            if isinstance(row.get(key), str):
                try:
                    row[key] = json.loads(row[key])
                except json.JSONDecodeError:
                    pass
    return row


def _first_record(path: Path) -> Any:
    return next((record for _, record, _ in read_records(path) if record is not None), None)


def load_source(config: PipelineConfig, source: SourceConfig, context: StageContext) -> tuple[list[Problem], list[Reject]]:
    """Convert one source. A failure of the whole source is one reject at row 0."""
    name = source_name(source)
    display = source.path
    try:
        if source.path.startswith("hf:"):
            records = _hf_records(config, source)
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / f"{name}.jsonl"
                path.write_text("".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records))
                problems, rejects = _load_file(path, source, context)
            for reject in rejects:
                reject.message = reject.message.replace(str(path), display)
                reject.path = display
        else:
            path = config.resolve(source.path)
            if not path.is_file():
                raise FileNotFoundError(f"no such file: {path}")
            problems, rejects = _load_file(path, source, context)
    except Exception as error:  # noqa: BLE001 - one bad source must not stop the build
        # The machine's fault, not the source's: a disk or I/O error, a network error of a
        # hub source, a sandbox that could not record its tests. A damaged .gz is the file's.
        if isinstance(error, SandboxFault) or (isinstance(error, OSError) and not isinstance(error, gzip.BadGzipFile)):
            raise
        return [], [Reject(display, 0, "(source)", "unreadable source", f"{type(error).__name__}: {error}", None)]
    if source.dates:
        try:
            table = read_date_table(config.resolve(source.dates))
        except (OSError, ValueError) as error:
            return [], [Reject(source.dates, 0, "(dates)", "unreadable date table", f"{type(error).__name__}: {error}", None)]
        for problem in problems:
            found = table.get(str(problem.metadata.get("original_id")))
            if problem.date is None and found is not None:
                problem.date = found
                problem.metadata["date_from"] = f"date table {Path(source.dates).name}"
    for problem in problems:
        metadata = problem.metadata
        if problem.date is not None:
            metadata.setdefault("date_from", "source")
        metadata["pipeline_source"] = name
        metadata["source_path"] = display
        metadata.setdefault("licence", source.licence or licence_of(problem.source))
        if source.path.startswith("hf:"):
            metadata["source_file"] = display
    return problems, rejects


def read_date_table(path: Path) -> dict[str, str]:
    """A user's table of publication dates: JSON {"slug": "YYYY-MM-DD"} or CSV lines
    `slug,YYYY-MM-DD` (a header line without a date is skipped). A malformed entry raises
    ValueError naming the file and line."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        entries = json.loads(text)
        if not isinstance(entries, dict):
            raise ValueError(f"{path}: expected a JSON object of slug -> date")
        rows = [(key, value, f"key {key!r}") for key, value in entries.items()]
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            slug, _, date = line.partition(",")
            rows.append((slug.strip(), date.strip(), f"line {number}"))
        if rows and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(rows[0][1])):
            rows = rows[1:]  # a header
    table = {}
    for slug, date, where in rows:
        if not isinstance(date, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date) or not slug:
            raise ValueError(f"{path}: {where}: expected a slug and a YYYY-MM-DD date, got {slug!r}: {date!r}")
        table[slug] = date
    return table


def _load_file(path: Path, source: SourceConfig, context: StageContext) -> tuple[list[Problem], list[Reject]]:
    format = source.format
    first = _first_record(path)
    if format == "canonical" or (format == "auto" and isinstance(first, dict) and CANONICAL_FIELDS <= set(first)):
        rejects: list[Reject] = []

        def on_error(error: ProblemFormatError) -> None:
            reason = ("unparseable row" if error.field == "(json)" else
                      "duplicate id" if isinstance(error, DuplicateIdError) else "invalid record")
            rejects.append(Reject(str(path), error.row, error.field, reason, str(error), None))

        rows = []
        for row, record, error in read_records(path):  # JSONL, or one JSON list
            if error is not None:
                on_error(ProblemFormatError(path, row, "(json)", error))
            else:
                rows.append((row, record))
        return parse_problems(rows, path, on_error), rejects
    if format == "auto":
        format = detect_format(path, first)
    needs_sandbox = format in SOURCES and SOURCES[format].assert_tests  # an unknown format: load_problems says so
    sandbox = context.evaluator().sandbox if needs_sandbox else None
    return load_problems(path, format=format, sandbox=sandbox, workers=context.config.workers)


# ------------------------------------------------------------------------- stage


def ingest_source_cached(config: PipelineConfig, source: SourceConfig, context: StageContext,
                         cache_dir: Path) -> tuple[list[Problem], list[Reject], bool]:
    """A source's problems and rejects, from `cache_dir` when its fingerprint matches.
    Returns (problems, rejects, was_cached)."""
    name = source_name(source)
    stem = cache_dir / name
    fingerprint = _source_fingerprint(config, source)
    manifest_path = stem.with_name(name + ".manifest.json")
    try:
        cached = json.loads(manifest_path.read_text()).get("fingerprint") == fingerprint
    except (OSError, json.JSONDecodeError):
        cached = False
    if cached and not context.force:
        problems = [Problem.model_validate(record) for record in read_json_lines(stem.with_name(name + ".jsonl"))]
        rejects = [Reject(**record) for record in read_json_lines(stem.with_name(name + ".rejects.jsonl"))]
        return problems, rejects, True
    problems, rejects = load_source(config, source, context)
    write_lines_atomic(stem.with_name(name + ".jsonl"), (p.model_dump_json() for p in problems))
    write_lines_atomic(stem.with_name(name + ".rejects.jsonl"), (r.to_json() for r in rejects))
    write_json_atomic(manifest_path, {"fingerprint": fingerprint, "problems": len(problems), "rejects": len(rejects)})
    return problems, rejects, False


def ingest_sources(config: PipelineConfig, context: StageContext) -> StageOutput:
    cache_dir = config.stage_dir("ingest") / "sources"
    names = [source_name(source) for source in config.sources]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"source names must be unique; repeated: {repeated} (set `name:` on each)")
    problems: list[Problem] = []
    rejects: list[Reject] = []
    per_source: dict[str, dict[str, int]] = {}
    seen: set[str] = set()
    with context.progress("ingest", len(config.sources)) as advance:
        for source, name in zip(config.sources, names):
            loaded, rejected, _ = ingest_source_cached(config, source, context, cache_dir)
            for problem in loaded:
                if problem.id in seen:
                    problem.id = f"{problem.id}@{name}"
                seen.add(problem.id)
            problems.extend(loaded)
            rejects.extend(rejected)
            per_source[name] = {"problems": len(loaded), "rejected": len(rejected)}
            advance()
    return StageOutput(problems, [], rejects, extra={"per_source": per_source})
