"""What every stage of the data pipeline shares: its output records, its context, its files.

A stage is a function (problems, config, context) -> `StageOutput`: the problems it keeps,
a `Removal` per problem it drops and a `Reject` per malformed record. Under
`work_dir/<stage>/` the orchestrator (`pipeline.py`) writes them with the helpers here
beside the stage's `manifest.json`. Every file is written whole or not at all: to a
temporary name of its own in the target's folder (so two writers never share one), then
renamed; a write that fails removes its temporary, and its error names the target.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from microcoder.data.config import PipelineConfig
from microcoder.data.records import Reject
from microcoder.problems import Problem, ProblemFormatError, iter_jsonl, parse_problems

STAGES = ("ingest", "validate", "dedup", "decontaminate", "amplify", "difficulty", "export")
"""The stages in order; each reads the previous one's problems.jsonl."""


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
        self._resources: list[Any] = []

    def evaluator(self):
        """The stages' evaluator, started on first use: this machine's sandbox workers
        (`engine: local`), or the Ray cluster's evaluator actors (`engine: ray`,
        ray_engine.RayEvaluator: the same `evaluate`, results in the same order)."""
        if self._evaluator is None:
            if self.config.engine == "ray":
                from microcoder.data.ray_engine import RayEvaluator

                self._evaluator = RayEvaluator(self.config)
            else:
                from microcoder.evaluator import Evaluator, EvaluatorConfig

                self._evaluator = Evaluator(EvaluatorConfig(workers=self.config.workers,
                                                            time_limit_s=self.config.time_limit_s, record_test_cpu=True))
        return self._evaluator

    def map_sandboxed(self, function: Callable[..., Any], arguments: Sequence[tuple]) -> list[Any]:
        """[function(context, *args) for args in arguments], in order: per-item sandbox work
        (`function` runs programs through `context.evaluator()`). Local: `workers` threads
        here; Ray: chunks on the evaluator actors, where `context` is the actor's own (so
        `function` must be a module-level function, found there by name)."""
        evaluator = self.evaluator()
        if hasattr(evaluator, "map_sandboxed"):
            return evaluator.map_sandboxed(function, arguments)
        with ThreadPoolExecutor(max(1, self.config.workers)) as pool:
            return list(pool.map(lambda args: function(self, *args), arguments))

    def keep_open(self, resource: Any) -> Any:
        """`resource`, closed with this context (e.g. a stage's generation actors)."""
        self._resources.append(resource)
        return resource

    def close(self) -> None:
        while self._resources:
            self._resources.pop().close()
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


class MissingInput(RuntimeError):
    """An input the build needs is absent or cannot be read: a file the config names, or the
    output of the stage a single stage reads from. Raised before anything is written."""


def sha256_of(*parts: Any) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else json.dumps(part, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:20]


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, in full (what `sha256sum` prints)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_hash(path: Path) -> str:
    return file_sha256(path)[:20]


TEMPORARY_SUFFIX = ".tmp"


def temporary_name(target: Path) -> Path:
    """A name beside `target` that no other writer uses: `.<name>.<pid>-<random>.tmp`."""
    return target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}{TEMPORARY_SUFFIX}")


def naming_path(error: OSError, path: Path) -> OSError:
    """`error` with `path` as its filename when it names none (a failed write on a full
    disk names no file; pyarrow's errors neither), so its one line says where."""
    if error.filename is not None or error.errno is None:
        return error
    return OSError(error.errno, os.strerror(error.errno), str(path))


@contextmanager
def written_atomically(path: Path, binary: bool = False) -> Iterator[IO]:
    """A file open for writing, synced and renamed onto `path` when the block ends: `path`
    is written whole or not at all. When the block raises, the file is closed and removed
    at once (a removed file still open keeps its space on a full disk), and an OSError
    names `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_name(path)
    try:
        with open(temporary, "wb" if binary else "w", encoding=None if binary else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as error:
        raise naming_path(error, path) from error
    finally:
        temporary.unlink(missing_ok=True)


def write_lines_atomic(path: Path, lines: Iterable[str]) -> None:
    """Write `lines` to `path` whole or not at all."""
    with written_atomically(path) as handle:
        for line in lines:
            handle.write(line + "\n")


def write_json_atomic(path: Path, data: Any) -> None:
    write_lines_atomic(path, [json.dumps(data, indent=2, ensure_ascii=False, default=str)])


def fresh_folder_beside(target: Path) -> Path:
    """A new empty folder beside `target`, to be put in its place by `replace_folder`."""
    folder = temporary_name(target)
    folder.mkdir(parents=True)
    return folder


def replace_folder(folder: Path, target: Path) -> None:
    """Put `folder` at `target` whole: the old `target` is moved aside, `folder` renamed in,
    the old one removed. Between the two renames there is no `target`, never a mix of two."""
    aside = None
    if target.exists():
        aside = temporary_name(target)
        os.rename(target, aside)
    try:
        os.rename(folder, target)
    except OSError:
        if aside is not None:
            os.rename(aside, target)
        raise
    if aside is not None:
        shutil.rmtree(aside)


def remove_leftovers(work_dir: Path) -> None:
    """Remove the temporary files and folders of writers that were killed (a writer that
    fails removes its own). Only under the work_dir's lock: no writer is running then."""
    for leftover in sorted(work_dir.rglob(f".*{TEMPORARY_SUFFIX}"), reverse=True):
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)


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

    return parse_problems(iter_jsonl(path, on_error), path, on_error), rejects


def read_manifest(config: PipelineConfig, stage: str) -> dict[str, Any] | None:
    path = config.stage_dir(stage) / "manifest.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
