"""Fault injection for the data tools: damaged files keep every readable row.

Each case damages a file the way disks, downloads and editors do (a .gz cut at several
offsets, a byte that is not UTF-8, rows in other encodings, a row of 100 MB), or the
machine under a build (a full disk, a read-only one, a second build on the same work_dir,
an evaluation set that is not there), and checks the promise of docs/data_pipeline.md
("Resuming, caching, errors"): every readable row is kept, only what cannot be read is
rejected, named by file and row; outputs are written whole or not at all; the same inputs
give the same bytes under any hash seed; a fault of the machine or a missing input stops
the build with one line naming what failed, and leaves no output that looks finished.
The tmpfs cases mount one (they need root) and are skipped, saying why, where that fails;
the simulated full disk runs everywhere.

    python -m tests.test_faults_data        # every case, then "N cases, F failures"
    pytest tests/test_faults_data.py        # the same cases as tests (the 100 MB row is slow)
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
import zlib
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from microcoder.data.config import load_build_config
from microcoder.data.loaders import load_problems
from microcoder.data.pipeline import LOCK_FILE, run_stage
from microcoder.data.records import read_records
from microcoder.problems import read_problems

ROWS = 400
REPO = Path(__file__).resolve().parent.parent
EVAL_SET = REPO / "tests" / "fixtures" / "data" / "evalset.jsonl"


def codeforces_rows(count: int = ROWS) -> list[bytes]:
    """JSONL lines of a loader format (codeforces), each with a test of its own (a test
    shared by many rows would be dropped as belonging to none)."""
    return [json.dumps({"name": f"cf-{index}", "problem": f"Print the number {index} back. Sample: {index}.",
                        "tests": [{"input": f"{index}\n", "output": f"{index}\n"}]}).encode() + b"\n"
            for index in range(count)]


def canonical_rows(count: int = ROWS) -> list[bytes]:
    return [json.dumps({"id": f"p{index}", "prompt": f"Print {index}.", "kind": "stdin", "source": "fixture",
                        "tests": [{"input": "", "output": f"{index}\n"}]}).encode() + b"\n" for index in range(count)]


def complete_lines_before_cut(compressed: bytes) -> int:
    """How many whole lines the readable part of a cut .gz holds (what a reader can keep)."""
    readable = zlib.decompressobj(wbits=31).decompress(compressed)
    return readable.count(b"\n")


# ------------------------------------------------------------------------ the cases


def truncated_gz(folder: Path, fraction: float) -> None:
    compressed = gzip.compress(b"".join(codeforces_rows()))
    cut = compressed[:max(20, int(len(compressed) * fraction))] if fraction < 1 else compressed[:-4]  # -4: the size trailer
    path = folder / "cut.jsonl.gz"
    path.write_bytes(cut)
    kept_lines = complete_lines_before_cut(cut)
    problems, rejects = load_problems(path, format="codeforces")
    assert [problem.id for problem in problems] == [f"codeforces/cf-{index}" for index in range(kept_lines)]
    assert len(rejects) == 1, rejects
    reject = rejects[0]
    assert (reject.path, reject.row, reject.field) == (str(path), kept_lines + 1, "(json)"), reject
    assert f"cannot be read past line {kept_lines}" in reject.message, reject.message


def convert_names_file_row_and_cause(folder: Path) -> None:
    from microcoder.cli import app

    compressed = gzip.compress(b"".join(codeforces_rows()))
    path = folder / "cut.jsonl.gz"
    path.write_bytes(compressed[: len(compressed) // 2])
    kept_lines = complete_lines_before_cut(path.read_bytes())
    out = folder / "out.jsonl"
    result = CliRunner().invoke(app, ["data", "convert", str(path), "--format", "codeforces", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Aborted" not in result.output
    assert f"{path}: row {kept_lines + 1}: field '(json)': the file cannot be read past line {kept_lines}" in \
        result.output, result.output
    assert f"{kept_lines} converted, 1 rejected" in result.output
    assert len(read_problems(out)) == kept_lines


def non_utf8_bytes(folder: Path) -> None:
    rows = codeforces_rows()
    rows[2] = rows[2].replace(b"Print", b"Pr\xffint")               # a stray byte
    rows[6] = rows[6].replace(b"Print", "Imprimé".encode("latin-1"))  # another encoding
    rows[250] = rows[250].replace(b"Print", b"Pr\xed\xa0\x80int")    # an encoded surrogate (CESU, WTF-8)
    data = b"".join(rows)
    for name, payload in (("bad.jsonl", data), ("bad.jsonl.gz", gzip.compress(data))):
        path = folder / name
        path.write_bytes(payload)
        problems, rejects = load_problems(path, format="codeforces")
        assert len(problems) == ROWS - 3
        assert [(reject.path, reject.row, reject.field) for reject in rejects] == [
            (str(path), 3, "(json)"), (str(path), 7, "(json)"), (str(path), 251, "(json)")], rejects
        where = "of the uncompressed data" if name.endswith(".gz") else "of the file"
        # The offset named is the file's (or the uncompressed stream's), not a decoder chunk's.
        stray, latin = data.index(b"\xff"), data.index(b"\xe9")
        assert f"byte {stray} {where}" in rejects[0].message, rejects[0].message
        assert f"byte {latin} {where}" in rejects[1].message, rejects[1].message
        assert "not UTF-8" in rejects[2].message


def mixed_encodings(folder: Path) -> None:
    # One file, rows written by different tools: UTF-8, UTF-8 with a BOM, UTF-16, cp1252.
    rows = codeforces_rows(8)
    damaged = {1: b"\xef\xbb\xbf" + rows[1],
               3: rows[3].decode().encode("utf-16-le"),
               5: rows[5].replace(b"Print", "“Print”".encode("cp1252"))}
    data = b"".join(damaged.get(index, row) for index, row in enumerate(rows))
    path = folder / "mixed.jsonl"
    path.write_bytes(data)
    records = list(read_records(path))
    good = [row for row, record, error in records if error is None]
    bad = {row: error for row, record, error in records if error is not None}
    # cp1252's curly quotes are not UTF-8; a UTF-16 row is not either, and its newline
    # ("\n\x00") leaves a NUL at the start of the next line, which is damaged with it.
    assert set(bad) == {4, 5, 6}, bad
    assert set(good) == {1, 2, 3, 7, 8}  # UTF-8 rows, one with a byte-order mark, are kept
    for row in bad:
        assert "not UTF-8" in bad[row] or "not JSON" in bad[row], bad[row]
    # Whatever the UTF-16 row became, it is rejected by row, never read as garbage text.
    assert not any(record is not None and "P\x00" in json.dumps(record) for _, record, _ in records)


def ingest_keeps_the_readable_rows(folder: Path) -> None:
    # `data ingest` (build's first stage) on a cut canonical .jsonl.gz and a file with one
    # non-UTF-8 row: the readable rows go on, each unreadable one is a reject by file and row.
    rows = canonical_rows()
    compressed = gzip.compress(b"".join(rows))
    cut = folder / "cut.jsonl.gz"
    cut.write_bytes(compressed[: len(compressed) * 2 // 3])
    kept_lines = complete_lines_before_cut(cut.read_bytes())
    bad_rows = canonical_rows(20)
    bad_rows[9] = bad_rows[9].replace(b"Print", b"Pr\xffint")
    bad = folder / "bad.jsonl"
    bad.write_bytes(b"".join(bad_rows).replace(b'"id": "p', b'"id": "q'))
    config_path = folder / "data.yaml"
    config_path.write_text(yaml.safe_dump({"work_dir": str(folder / "work"), "progress": False,
                                           "sources": [{"path": str(cut), "name": "cut"},
                                                       {"path": str(bad), "name": "bad"}]}))
    config = load_build_config(config_path)
    manifest = run_stage(config, "ingest", log=lambda _: None)
    assert manifest["extra"]["per_source"] == {"cut": {"problems": kept_lines, "rejected": 1},
                                               "bad": {"problems": 19, "rejected": 1}}
    problems = read_problems(config.stage_dir("ingest") / "problems.jsonl")
    assert len(problems) == kept_lines + 19
    rejects = [json.loads(line) for line in (config.stage_dir("ingest") / "rejects.jsonl").read_text().splitlines()]
    assert sorted((Path(r["path"]).name, r["row"], r["field"]) for r in rejects) == [
        ("bad.jsonl", 10, "(json)"), ("cut.jsonl.gz", kept_lines + 1, "(json)")]


def convert_is_atomic(folder: Path) -> None:
    # A conversion that fails while writing (here: the 3rd problem cannot be serialised)
    # leaves the previous --out whole, not the new one's first two rows over it.
    from microcoder.cli import app
    from microcoder.problems import Problem

    source = folder / "rows.jsonl"
    source.write_bytes(b"".join(codeforces_rows(10)))
    out = folder / "out.jsonl"
    previous = b"".join(canonical_rows(5))
    out.write_bytes(previous)
    original, calls = Problem.model_dump_json, [0]

    def failing(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == 3:
            raise OSError(28, "No space left on device")
        return original(self, *args, **kwargs)

    Problem.model_dump_json = failing
    try:
        result = CliRunner().invoke(app, ["data", "convert", str(source), "--format", "codeforces", "--out", str(out)])
    finally:
        Problem.model_dump_json = original
    assert result.exit_code != 0 and calls[0] == 3
    assert out.read_bytes() == previous
    assert sorted(path.name for path in folder.iterdir()) == ["out.jsonl", "rows.jsonl"]  # no temporary left
    result = CliRunner().invoke(app, ["data", "convert", str(source), "--format", "codeforces", "--out", str(out)])
    assert result.exit_code == 0 and len(read_problems(out)) == 10


HASH_SEED_SCRIPT = """
import json
from microcoder.data.decontaminate import ContaminationIndex
from microcoder.problems import Problem, TestCase

def problem(id, prompt):
    return Problem(id=id, prompt=prompt, kind="stdin", tests=[TestCase(input="", output=id)])

shared = "given an array of integers find the longest strictly increasing subsequence and print its length"
evals = [("lcb", problem("e1", shared + " then stop")), ("lcb", problem("e2", "read " + shared)),
         ("he", problem("e3", "completely different words about trees graphs and paths in a city"))]
index = ContaminationIndex(evals, ngram=5, common_ngram_max=10, min_tests_for_identical=3)
for training in ("you are " + shared + " quickly", shared, "nothing in common here at all"):
    print(json.dumps(index.match(problem("t", training), 0.3)))
"""


def decontaminate_same_under_any_hash_seed(folder: Path) -> None:
    # removed.jsonl carries each match's detail ("e.g. '<an n-gram>'") and the evaluation
    # problem matched; both come out the same whatever PYTHONHASHSEED is.
    outputs = set()
    for seed in ("0", "1", "2", "3", "4", "5"):
        done = subprocess.run([sys.executable, "-c", HASH_SEED_SCRIPT], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed})
        outputs.add(done.stdout)
    assert len(outputs) == 1, outputs
    matches = [json.loads(line) for line in outputs.pop().splitlines()]
    assert matches[0] is not None and matches[1] is not None and matches[2] is None


def row_of_100_mb(folder: Path) -> None:
    # A row of 100 MB between two small ones, once whole and once cut in the middle.
    rows = canonical_rows(3)
    big = json.dumps({"id": "big", "prompt": "x" * (100 * 1024 * 1024), "kind": "stdin",
                      "tests": [{"input": "", "output": "1"}]}).encode() + b"\n"
    path = folder / "big.jsonl"
    path.write_bytes(rows[0] + big + rows[1])
    records = list(read_records(path))
    assert [(row, error) for row, _, error in records] == [(1, None), (2, None), (3, None)]
    assert len(records[1][1]["prompt"]) == 100 * 1024 * 1024
    del records
    path.write_bytes(rows[0] + big[: len(big) // 2] + b"\n" + rows[1])
    records = list(read_records(path))
    assert [(row, record is not None) for row, record, _ in records] == [(1, True), (2, False), (3, True)]
    assert "not JSON" in records[1][2]


# ------------------------------------------------------- faults of the machine under a build


def build_config(folder: Path, work: Path, eval_set: Path = EVAL_SET, **sections) -> Path:
    """A build config over 12 canonical problems with one hidden test each, no sandbox run
    (no references), so that every stage runs in a second and the export holds them all."""
    source = folder / "rows.jsonl"
    source.write_text("".join(json.dumps({"id": f"task-{index}", "prompt": f"Task {index}: print the hidden value.",
                                          "kind": "stdin", "source": "fixture",
                                          "tests": [{"input": "", "output": f"{1000003 + 7919 * index}\n"}]}) + "\n"
                              for index in range(12)))
    config = {"work_dir": str(work), "progress": False, "sources": [{"path": str(source), "name": "rows"}],
              "validate": {"run_references": False}, "amplify": {"keep_unverified": True},
              "decontaminate": {"eval_sets": [{"name": "evalset", "path": str(eval_set)}]}, **sections}
    path = folder / "data.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def data_command(*arguments: str, env: dict[str, str] | None = None):
    from microcoder.cli import app

    return CliRunner().invoke(app, ["data", *arguments], env=env)


def one_error_line(result) -> str:
    """The command's error: exit 2 and one line, its last (after the logs of stages that
    ran), no traceback."""
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and lines[-1].startswith("error: ") and "Traceback" not in result.output \
        and sum(line.startswith("error") for line in lines) == 1, (result.exit_code, result.output, result.exception)
    return lines[-1]


def temporaries(work: Path) -> list[str]:
    return sorted(str(path.relative_to(work)) for path in work.rglob("*") if path.name.endswith(".tmp"))


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@contextmanager
def mounted_tmpfs(path: Path, options: str):
    """A tmpfs mounted at `path` (mounting needs root, CAP_SYS_ADMIN); the case is skipped,
    saying why, where it cannot be mounted."""
    path.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no `mount` command here; the simulated full disk still runs")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (uid {os.getuid()}: {done.stderr.strip()}); the simulated full disk still runs")
    try:
        yield path
    finally:
        done = subprocess.run(["umount", str(path)], capture_output=True, text=True)
        if done.returncode != 0:  # busy: a file left open on it (whose space a full disk does not get back)
            subprocess.run(["umount", "--lazy", str(path)], check=True)
            raise AssertionError(f"{path} was still in use after the case: {done.stderr.strip()}")


@contextmanager
def filled(disk: Path, leave: int):
    """`disk` filled with a file of zeros, to `leave` free bytes."""
    status = os.statvfs(disk)
    filler = disk / "filler"
    with open(filler, "wb") as handle:
        handle.write(bytes(status.f_bavail * status.f_frsize - leave))
    try:
        yield
    finally:
        filler.unlink()


@contextmanager
def parquet_writes_fail():
    """Every Parquet write puts part of a file down, then fails as a full disk does."""
    import pyarrow.parquet as pq

    original = pq.write_table

    def failing(table, where, *args, **kwargs):
        part = b"PAR1 and no more"
        Path(where).write_bytes(part) if isinstance(where, (str, os.PathLike)) else where.write(part)
        raise OSError(errno.ENOSPC, "No space left on device")

    pq.write_table = failing
    try:
        yield
    finally:
        pq.write_table = original


def export_fails_whole(folder: Path, work: Path, full_disk) -> None:
    """The export of a build, on a disk that `full_disk()` makes full: with no export before,
    it leaves none; rerun over a finished export, it leaves that export as it was; the
    error is one line naming the file it could not write; no temporary is left. With room,
    it is written whole."""
    config = build_config(folder, work)
    result = data_command("build", "--config", str(config))
    assert result.exit_code == 0, result.output
    export = work / "export"
    shutil.rmtree(export)  # every stage done but the export
    with full_disk():
        result = data_command("export", "--config", str(config))
    assert not export.exists() and temporaries(work) == [], (sorted(files_of(export)) if export.exists() else None,
                                                              temporaries(work))
    line = one_error_line(result)
    assert "No space left on device" in line and f"error: {work}/" in line, line
    result = data_command("export", "--config", str(config))
    assert result.exit_code == 0 and "export: 12 in, 12 out" in result.output, result.output
    manifest = json.loads((export / "manifest.json").read_text())
    assert all((export / name).is_file() for name in manifest["outputs"])
    before = files_of(export)
    config = build_config(folder, work, export={"validation_fraction": 0.5})  # the export alone reruns
    with full_disk():
        result = data_command("export", "--config", str(config))
    assert files_of(export) == before and temporaries(work) == []
    assert "No space left on device" in one_error_line(result)
    result = data_command("export", "--config", str(config))
    assert result.exit_code == 0 and json.loads((export / "split.json").read_text())["validation_fraction"] == 0.5


def export_on_a_full_tmpfs(folder: Path) -> None:
    with mounted_tmpfs(folder / "disk", "size=4m") as disk:
        # 24 KiB free: the corpus's small files fit, a Parquet file or a figure does not
        export_fails_whole(folder, disk / "work", lambda: filled(disk, leave=24 * 1024))


def export_when_a_write_fails(folder: Path) -> None:
    export_fails_whole(folder, folder / "work", parquet_writes_fail)


def read_only_work_dir(folder: Path) -> None:
    # A real read-only mount as root (root writes through file modes), a folder without
    # write permission otherwise.
    if os.getuid() == 0:
        with mounted_tmpfs(folder / "disk", "size=1m,ro") as disk:
            read_only_build(folder, disk / "work", "Read-only file system")
    else:
        (folder / "disk").mkdir(mode=0o555)
        read_only_build(folder, folder / "disk" / "work", "Permission denied")


def read_only_build(folder: Path, work: Path, cause: str) -> None:
    config = build_config(folder, work)
    assert one_error_line(data_command("build", "--config", str(config))) == f"error: {work}: {cause}"
    result = data_command("build", "--config", str(config), env={"MICROCODER_TRACEBACK": "1"})
    assert result.exit_code == 2 and "Traceback" in result.output and f"error: {work}: {cause}" in result.output


HOLD_LOCK = """
import fcntl, os, sys
descriptor = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(descriptor, fcntl.LOCK_EX)
os.write(descriptor, f"{os.getpid()}\\n".encode())
print("held", flush=True)
sys.stdin.read()
"""


def second_build_is_refused(folder: Path) -> None:
    # Another process holds the work_dir's lock: a build is refused, naming its pid, and
    # writes nothing; once it ends, the build runs.
    work = folder / "work"
    work.mkdir()
    config = build_config(folder, work)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(work / LOCK_FILE)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        line = one_error_line(data_command("build", "--config", str(config)))
        assert f"{work} is in use by another build (pid {holder.pid}" in line, line
        assert sorted(os.listdir(work)) == [LOCK_FILE]
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    result = data_command("build", "--config", str(config))
    assert result.exit_code == 0 and "built 12 problems" in result.output, result.output


def build_waits_for_the_lock_when_asked(folder: Path) -> None:
    # This process holds the lock; a build with --wait-lock says whom it waits for, and
    # runs when the lock is released.
    work = folder / "work"
    work.mkdir()
    config = build_config(folder, work)
    descriptor = os.open(work / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    os.write(descriptor, f"{os.getpid()}\n".encode())
    waiter = subprocess.Popen([sys.executable, "-m", "microcoder.cli", "data", "build", "--config", str(config),
                               "--wait-lock"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        first = waiter.stdout.readline()
        assert first.startswith(f"waiting for the build of pid {os.getpid()} to release"), first
        assert not (work / "ingest").exists()
    finally:
        os.close(descriptor)
    rest = waiter.stdout.read()
    assert waiter.wait(timeout=120) == 0 and "built 12 problems" in rest, rest


def missing_eval_set_stops_before_ingest(folder: Path) -> None:
    work = folder / "work"
    missing = folder / "gone" / "HumanEval.jsonl.gz"
    config = build_config(folder, work, eval_set=missing)
    line = one_error_line(data_command("build", "--config", str(config)))
    assert line == f"error: decontaminate.eval_sets[0].path (evalset): {missing}: No such file or directory; " \
                   "no stage was run", line
    assert not work.exists()


def unusable_eval_set_stops_decontaminate(folder: Path) -> None:
    # An evaluation set that is there but gives no problem (no loader reads its rows) stops
    # the build at decontaminate: nothing after it claims a decontaminated corpus.
    work = folder / "work"
    eval_set = folder / "not_problems.jsonl"
    eval_set.write_text('{"question": "what?"}\n')
    config = build_config(folder, work, eval_set=eval_set)
    line = one_error_line(data_command("build", "--config", str(config)))
    assert line.startswith("error: decontaminate.eval_sets[0] (evalset): ") and \
        line.endswith("; nothing was decontaminated"), line
    assert (work / "dedup" / "manifest.json").exists()
    assert not (work / "decontaminate" / "manifest.json").exists() and not (work / "export").exists()


def writers_of_one_file(folder: Path) -> None:
    # Two writers of one file at once (here one inside the other) each write a temporary
    # of their own: both finish, and the file is the last one renamed, whole.
    from microcoder.data.stages import write_lines_atomic

    path = folder / "out.jsonl"

    def outer_lines():
        yield "outer 1"
        write_lines_atomic(path, ["inner"])
        yield "outer 2"

    write_lines_atomic(path, outer_lines())
    assert path.read_text() == "outer 1\nouter 2\n" and os.listdir(folder) == ["out.jsonl"]

    # A write that fails leaves the file as it was, removes its temporary and names the file.
    def cut_lines():
        yield "new 1"
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as raised:
        write_lines_atomic(path, cut_lines())
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(path))
    assert path.read_text() == "outer 1\nouter 2\n" and os.listdir(folder) == ["out.jsonl"]


CASES = {
    **{f"truncated .jsonl.gz at {fraction:.0%}": (lambda folder, fraction=fraction: truncated_gz(folder, fraction))
       for fraction in (0.02, 0.25, 0.5, 0.75, 0.99, 1.0)},
    "convert names file, row and cause": convert_names_file_row_and_cause,
    "non-UTF-8 bytes in rows": non_utf8_bytes,
    "mixed encodings": mixed_encodings,
    "ingest keeps the readable rows": ingest_keeps_the_readable_rows,
    "convert is atomic": convert_is_atomic,
    "decontaminate is the same under any hash seed": decontaminate_same_under_any_hash_seed,
    "a row of 100 MB": row_of_100_mb,
    "two writers of one file": writers_of_one_file,
    "export on a full tmpfs": export_on_a_full_tmpfs,
    "export when a write fails (simulated full disk)": export_when_a_write_fails,
    "read-only work_dir": read_only_work_dir,
    "a second build on a locked work_dir is refused": second_build_is_refused,
    "a build waits for the lock when asked": build_waits_for_the_lock_when_asked,
    "a missing evaluation set stops the build before ingest": missing_eval_set_stops_before_ingest,
    "an evaluation set that gives no problem stops decontaminate": unusable_eval_set_stops_decontaminate,
}
SLOW = {"a row of 100 MB"}


@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.slow] if name in SLOW else [])
                                  for name in CASES])
def test_fault(name, tmp_path):
    CASES[name](tmp_path)


def main() -> int:
    failures = 0
    for name, case in CASES.items():
        with tempfile.TemporaryDirectory() as folder:
            try:
                case(Path(folder))
                print(f"ok    {name}")
            except pytest.skip.Exception as skipped:
                print(f"skip  {name}: {skipped.msg}")
            except Exception:  # noqa: BLE001 - a failed case is reported and counted
                failures += 1
                print(f"FAIL  {name}\n{traceback.format_exc()}")
    print(f"{len(CASES)} cases, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
