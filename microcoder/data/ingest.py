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
from collections.abc import Iterable, Iterator
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
    StageSink,
    read_json_lines,
    sha256_of,
    write_json_atomic,
    write_lines_atomic,
    written_atomically,
)
from microcoder.evaluator.sandbox import SandboxFault
from microcoder.problems import DuplicateIdError, Problem, ProblemFormatError, iter_jsonl, parse_problem

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


def _write_hf_records(config: PipelineConfig, source: SourceConfig, path: Path) -> None:
    """Write the rows of a Hugging Face dataset to `path` as JSONL, one at a time: a saved
    dataset directory (`load_from_disk`) or `datasets.load_dataset(NAME, data_files=..., split=...)`."""
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
    with open(path, "w", encoding="utf-8") as handle:
        for row in dataset:
            handle.write(json.dumps(_decode_json_columns(_without_nulls(dict(row))), ensure_ascii=False, default=str) + "\n")


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


class SourceRejected(Exception):
    """A source that fails as a whole: its one reject, at row 0."""

    def __init__(self, reject: Reject):
        super().__init__(str(reject))
        self.reject = reject


def load_source(config: PipelineConfig, source: SourceConfig, context: StageContext) -> tuple[list[Problem], list[Reject]]:
    """Convert one source, whole (`converted_source`). A failure of the whole source is one
    reject at row 0."""
    rejects: list[Reject] = []
    try:
        problems = list(converted_source(config, source, context, rejects))
    except SourceRejected as failure:
        return [], [failure.reject]
    return problems, rejects


def converted_source(config: PipelineConfig, source: SourceConfig, context: StageContext,
                     rejects: list[Reject]) -> Iterator[Problem]:
    """One source's problems, one at a time, with their provenance; its rejects are put in
    `rejects` once the last problem is read. A canonical file is read row by row; a file in
    a loader's format is converted whole (`load_problems`: some rules compare rows), and an
    `hf:` source is first written out row by row. A failure of the whole source raises
    SourceRejected; a fault of the machine is raised as it is."""
    name = source_name(source)
    display = source.path
    table, table_failure = None, None
    if source.dates:
        try:
            table = read_date_table(config.resolve(source.dates))
        except (OSError, ValueError) as error:
            table_failure = Reject(source.dates, 0, "(dates)", "unreadable date table", f"{type(error).__name__}: {error}",
                                   None)
    try:
        with tempfile.TemporaryDirectory() as folder:
            if source.path.startswith("hf:"):
                path = Path(folder) / f"{name}.jsonl"
                _write_hf_records(config, source, path)
            else:
                path = config.resolve(source.path)
                if not path.is_file():
                    raise FileNotFoundError(f"no such file: {path}")
            problems, file_rejects = _load_file(path, source, context)
            for problem in problems:
                if table_failure is None:  # a source that cannot be read is reported before its date table
                    yield _with_provenance(problem, source, name, table)
            if source.path.startswith("hf:"):
                for reject in file_rejects:
                    reject.message = reject.message.replace(str(path), display)
                    reject.path = display
    except Exception as error:  # noqa: BLE001 - one bad source must not stop the build
        # The machine's fault, not the source's: a disk or I/O error, a network error of a
        # hub source, a sandbox that could not record its tests. A damaged .gz is the file's.
        if isinstance(error, SandboxFault) or (isinstance(error, OSError) and not isinstance(error, gzip.BadGzipFile)):
            raise
        raise SourceRejected(Reject(display, 0, "(source)", "unreadable source", f"{type(error).__name__}: {error}",
                                    None)) from error
    if table_failure is not None:
        raise SourceRejected(table_failure)
    rejects.extend(file_rejects)


def _with_provenance(problem: Problem, source: SourceConfig, name: str, table: dict[str, str] | None) -> Problem:
    """The problem with its date from the date table (when it has none) and its provenance."""
    if table is not None:
        found = table.get(str(problem.metadata.get("original_id")))
        if problem.date is None and found is not None:
            problem.date = found
            problem.metadata["date_from"] = f"date table {Path(source.dates).name}"
    metadata = problem.metadata
    if problem.date is not None:
        metadata.setdefault("date_from", "source")
    metadata["pipeline_source"] = name
    metadata["source_path"] = source.path
    metadata.setdefault("licence", source.licence or licence_of(problem.source))
    if source.path.startswith("hf:"):
        metadata["source_file"] = source.path
    return problem


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


def _load_file(path: Path, source: SourceConfig, context: StageContext) -> tuple[Iterable[Problem], list[Reject]]:
    """(problems, rejects) of one file: a canonical file's problems lazily (its rejects put
    in the list once they are read), another format's converted whole."""
    format = source.format
    first = _first_record(path)
    if format == "canonical" or (format == "auto" and isinstance(first, dict) and CANONICAL_FIELDS <= set(first)):
        rejects: list[Reject] = []
        return _canonical_problems(path, rejects), rejects
    if format == "auto":
        format = detect_format(path, first)
    needs_sandbox = format in SOURCES and SOURCES[format].assert_tests  # an unknown format: load_problems says so
    sandbox = context.evaluator().sandbox if needs_sandbox else None
    return load_problems(path, format=format, sandbox=sandbox, workers=context.config.workers)


def _canonical_problems(path: Path, rejects: list[Reject]) -> Iterator[Problem]:
    """A canonical file's problems (JSONL, or one JSON list), row by row; at the end its
    rejects go to `rejects`: the rows that are not JSON, then the invalid records and
    repeated ids, each in row order. Holds the ids seen."""
    unparseable: list[Reject] = []
    invalid: list[Reject] = []
    seen: set[str] = set()
    for row, record, error in read_records(path):
        if error is not None:
            failure = ProblemFormatError(path, row, "(json)", error)
            unparseable.append(Reject(str(path), row, "(json)", "unparseable row", str(failure), None))
            continue
        try:
            problem = parse_problem(record, path, row)
            if problem.id in seen:
                raise DuplicateIdError(path, row, "id", f"duplicate id {problem.id!r}")
        except ProblemFormatError as failure:
            reason = "duplicate id" if isinstance(failure, DuplicateIdError) else "invalid record"
            invalid.append(Reject(str(path), failure.row, failure.field, reason, str(failure), None))
            continue
        seen.add(problem.id)
        yield problem
    rejects.extend(unparseable + invalid)


# ------------------------------------------------------------------------- stage


def ingest_source_cached(config: PipelineConfig, source: SourceConfig, context: StageContext,
                         cache_dir: Path) -> tuple[Iterable[Problem], list[Reject], bool]:
    """A source's problems (read lazily from its cache file) and rejects, converted into
    `cache_dir` first, row by row, unless its fingerprint matches. Returns (problems,
    rejects, was_cached)."""
    name = source_name(source)
    problems_path = cache_dir / f"{name}.jsonl"
    rejects_path = cache_dir / f"{name}.rejects.jsonl"
    manifest_path = cache_dir / f"{name}.manifest.json"
    fingerprint = _source_fingerprint(config, source)
    try:
        cached = json.loads(manifest_path.read_text()).get("fingerprint") == fingerprint
    except (OSError, json.JSONDecodeError):
        cached = False
    if cached and not context.force:
        rejects = [Reject(**record) for record in read_json_lines(rejects_path)]
        return _cached_problems(problems_path), rejects, True
    rejects: list[Reject] = []
    count = 0
    try:
        with written_atomically(problems_path) as handle:
            for problem in converted_source(config, source, context, rejects):
                handle.write(problem.model_dump_json() + "\n")
                count += 1
    except SourceRejected as failure:
        write_lines_atomic(problems_path, [])
        rejects, count = [failure.reject], 0
    write_lines_atomic(rejects_path, (r.to_json() for r in rejects))
    write_json_atomic(manifest_path, {"fingerprint": fingerprint, "problems": count, "rejects": len(rejects)})
    return _cached_problems(problems_path), rejects, False


def _cached_problems(path: Path) -> Iterator[Problem]:
    """The problems of a source's cache file, one at a time (a line cut by an interruption
    is skipped: the source is converted again when its manifest does not match)."""
    for _, record in iter_jsonl(path, on_error=lambda error: None):
        yield Problem.model_validate(record)


def ingest_sources(config: PipelineConfig, context: StageContext, out: StageSink | None = None) -> StageSink:
    """The stage: each source's problems, in config order, one at a time. Held across
    problems: the ids seen (an id repeated across sources gets `@<source name>`); a source
    in a loader's format is converted whole first (its own size)."""
    out = StageOutput() if out is None else out
    cache_dir = config.stage_dir("ingest") / "sources"
    names = [source_name(source) for source in config.sources]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"source names must be unique; repeated: {repeated} (set `name:` on each)")
    per_source: dict[str, dict[str, int]] = {}
    seen: set[str] = set()
    with context.progress("ingest", len(config.sources)) as advance:
        for source, name in zip(config.sources, names):
            loaded, rejected, _ = ingest_source_cached(config, source, context, cache_dir)
            count = 0
            for problem in loaded:
                if problem.id in seen:
                    problem.id = f"{problem.id}@{name}"
                seen.add(problem.id)
                out.keep(problem)
                count += 1
            for reject in rejected:
                out.reject(reject)
            per_source[name] = {"problems": count, "rejected": len(rejected)}
            advance()
    out.extra = {"per_source": per_source}
    return out
