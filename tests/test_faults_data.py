"""Fault injection for the data tools: damaged files keep every readable row.

Each case damages a file the way disks, downloads and editors do (a .gz cut at several
offsets, a byte that is not UTF-8, rows in other encodings, a row of 100 MB) and checks
the promise of docs/data_pipeline.md ("Resuming, caching, errors"): every readable row is
kept, only what cannot be read is rejected, named by file and row; outputs are written
whole or not at all; the same inputs give the same bytes under any hash seed.

    python -m tests.test_faults_data        # every case, then "N cases, F failures"
    pytest tests/test_faults_data.py        # the same cases as tests (the 100 MB row is slow)
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
import traceback
import zlib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from microcoder.data.config import load_build_config
from microcoder.data.loaders import load_problems
from microcoder.data.pipeline import run_stage
from microcoder.data.records import read_records
from microcoder.problems import read_problems

ROWS = 400


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
            except Exception:  # noqa: BLE001 - a failed case is reported and counted
                failures += 1
                print(f"FAIL  {name}\n{traceback.format_exc()}")
    print(f"{len(CASES)} cases, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
