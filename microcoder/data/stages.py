"""What every stage of the data pipeline shares: its output records, its context, its files.

A stage is a function (problems, config, context, out) -> out: it reads its problems one at
a time and hands `out` each problem it keeps (`keep`), a `Removal` per problem it drops
(`remove`) and a `Reject` per malformed record (`reject`), and sets `out.extra`. Two kinds
of `out`: `StageFiles`, which the orchestrator (`pipeline.py`) gives, writes each line as it
comes into the stage's files under `work_dir/<stage>/`; `StageOutput` collects them in lists
(what a caller with a list of problems gets back). The pipeline's `problems` is a
`StageInput`: the previous stage's problems.jsonl, read lazily, each pass over it a new read
of the file, so a stage holds one problem at a time (or a batch, for sandbox work) and only
the small facts it needs across problems; a stage that needs two passes iterates it twice.

Every file is written whole or not at all: to a temporary name of its own in the target's
folder (so two writers never share one), then renamed; a write that fails removes its
temporary, and its error names the target.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from microcoder.data.config import PipelineConfig
from microcoder.data.records import Reject
from microcoder.problems import (DuplicateIdError, Problem, ProblemFormatError, iter_jsonl, parse_problem,
                                remember_data_directory)

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
    """A stage's outputs collected in lists: what a stage function called on a list of
    problems returns (the pipeline gives stages a `StageFiles` instead)."""

    problems: list[Problem] = field(default_factory=list)
    removals: list[Removal] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    """Small facts for the manifest and datasheet (e.g. per-source counts)."""

    def keep(self, problem: Problem) -> None:
        self.problems.append(problem)

    def remove(self, removal: Removal) -> None:
        self.removals.append(removal)

    def reject(self, reject: Reject) -> None:
        self.rejects.append(reject)


class StageFiles:
    """A stage's outputs written as they come: `problems.jsonl` and `removed.jsonl` a line
    per `keep` and `remove`, into temporaries renamed into place when the block ends without
    an error (removed when it raises), so the files are whole or absent. Rejects (malformed
    records: few, and reported after the input's own) are held and written at the end:
    `input_rejects` (the malformed lines of the stage's input) first, then the stage's.

        with StageFiles(out_dir) as out:
            stage(problems, config, context, out)
    """

    OUTPUTS = ("problems.jsonl", "removed.jsonl", "rejects.jsonl")

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.kept = 0
        self.removed = 0
        self.rejects: list[Reject] = []
        self.input_rejects: list[Reject] = []
        self.extra: dict[str, Any] = {}
        self._stack = ExitStack()
        self._handles: dict[str, IO] = {}

    def __enter__(self) -> StageFiles:
        with ExitStack() as opening:
            for name in self.OUTPUTS:
                self._handles[name] = opening.enter_context(written_atomically(self.out_dir / name))
            self._stack = opening.pop_all()
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        if kind is None:
            try:
                for reject in [*self.input_rejects, *self.rejects]:
                    self._handles["rejects.jsonl"].write(reject.to_json() + "\n")
            except BaseException as failure:
                if not self._stack.__exit__(type(failure), failure, failure.__traceback__):
                    raise
                return False
        return self._stack.__exit__(kind, error, traceback)

    @property
    def rejected(self) -> int:
        return len(self.input_rejects) + len(self.rejects)

    def keep(self, problem: Problem) -> None:
        self._handles["problems.jsonl"].write(problem.model_dump_json() + "\n")
        self.kept += 1

    def remove(self, removal: Removal) -> None:
        self._handles["removed.jsonl"].write(removal.to_json() + "\n")
        self.removed += 1

    def reject(self, reject: Reject) -> None:
        self.rejects.append(reject)


StageSink = StageOutput | StageFiles
"""Where a stage puts what it keeps, removes and rejects."""


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
    def progress(self, description: str, total: int | None) -> Iterator[Callable[[int], None]]:
        """A rich progress bar (`total` None: a count without an end); yields `advance(n=1)`."""
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


class Spool:
    """(problem, payload) pairs held in a temporary file beside `beside` while a stage makes
    several passes over them, instead of in memory: `write` files the pairs (yielding each as
    it is written, so that the caller notes what it needs of it), each iteration reads them
    all back in order (a fresh pass), and leaving the `with` block removes the file. A payload
    is anything JSON holds."""

    def __init__(self, beside: Path):
        self.path = temporary_name(beside)

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.path.unlink(missing_ok=True)

    def write(self, pairs: Iterable[tuple[Problem, Any]]) -> Iterator[tuple[Problem, Any]]:
        try:
            with open(self.path, "w", encoding="utf-8") as handle:
                for problem, payload in pairs:
                    handle.write(problem.model_dump_json() + "\n" + json.dumps(payload) + "\n")
                    yield problem, payload
        except OSError as error:  # a full disk: one line naming the spool
            raise naming_path(error, self.path) from None

    def __iter__(self) -> Iterator[tuple[Problem, Any]]:
        with open(self.path, encoding="utf-8") as handle:
            for line in handle:
                yield Problem.model_validate_json(line), json.loads(handle.readline())


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


class StageInput:
    """A stage's input file (the previous stage's problems.jsonl), read lazily: each
    iteration is a new pass over the file that yields one `Problem` at a time. A malformed
    line is a Reject (file, row, field), not a crash, and so is a repeated id; the first
    complete pass records them in `rejects` and counts the rows read (`rows`: problems and
    rejects). A pass holds the ids it has seen (for the repeated-id check). `located` also yields each problem's byte offset, which `at` reads it back from
    (for a stage that visits problems in an order of its own, e.g. dedup's richest first)."""

    def __init__(self, path: Path):
        self.path = path
        self.rejects: list[Reject] = []
        self.rows: int | None = None
        """Problems and rejects in the file; None until a pass has read it to the end."""

    def __iter__(self) -> Iterator[Problem]:
        return (problem for _, problem in self.located())

    def located(self) -> Iterator[tuple[int, Problem]]:
        """(byte offset of its line, problem) for each problem, in file order."""
        remember_data_directory(self.path)  # hidden from the programs any sandbox here runs
        rejects: list[Reject] = []
        seen: set[str] = set()
        count = 0
        with open(self.path, "rb") as handle:
            row, offset = 0, 0
            for line in handle:
                row, start, offset = row + 1, offset, offset + len(line)
                if not line.strip():
                    continue
                try:
                    problem = parse_problem(_json_of(line, self.path, row), self.path, row)
                    if problem.id in seen:
                        raise DuplicateIdError(self.path, row, "id", f"duplicate id {problem.id!r}")
                except ProblemFormatError as error:
                    rejects.append(Reject(error.path, error.row, error.field, "malformed record", str(error), None))
                    continue
                seen.add(problem.id)
                count += 1
                yield start, problem
        if self.rows is None:
            self.rejects[:] = rejects
            self.rows = count + len(rejects)

    def at(self, offset: int) -> Problem:
        """The problem whose line starts at byte `offset` (an offset `located` gave)."""
        with open(self.path, "rb") as handle:
            handle.seek(offset)
            return parse_problem(_json_of(handle.readline(), self.path, 0), self.path, 0)


def _json_of(line: bytes, path: Path, row: int) -> Any:
    try:
        return json.loads(line.decode("utf-8"))
    except json.JSONDecodeError as error:
        raise ProblemFormatError(path, row, "(json)", error.msg) from None


def read_stage_problems(path: Path, stage: str) -> tuple[list[Problem], list[Reject]]:
    """A stage's input whole: its problems and its malformed lines' rejects (`StageInput`)."""
    stream = StageInput(path)
    problems = list(stream)
    return problems, stream.rejects


def passes_over(problems: Iterable[Problem], stage: str) -> Iterable[Problem]:
    """`problems`, checked to be read again on each iteration (a list or a `StageInput`): a
    stage that reads its input twice must not be handed a one-shot iterator."""
    if iter(problems) is problems:
        raise TypeError(f"{stage} reads its problems twice: pass a list or a StageInput, not an iterator")
    return problems


def read_manifest(config: PipelineConfig, stage: str) -> dict[str, Any] | None:
    path = config.stage_dir(stage) / "manifest.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
