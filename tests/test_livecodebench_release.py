"""LiveCodeBench's published release format, built by hand: both test encodings, both
problem kinds, jsonl and parquet, the date windows, and pickles that must never run."""

import base64
import json
import os
import pickle
import zlib

import pytest

from microcoder.data.livecodebench import (
    RELEASE_WINDOWS,
    UnsafePickleError,
    decode_private_tests,
    window_dates,
)
from microcoder.data.loaders import detect_format, load_problems


def encode_private(tests) -> str:
    """As the release stores private tests: base64(zlib(pickle(json text)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def stdin_test(given, expected):
    return {"input": given, "output": expected, "testtype": "stdin"}


def call_test(given, expected):
    return {"input": given, "output": expected, "testtype": "functional"}


def release_row(question_id, date, difficulty, public, private, starter="", func_name=None, encode=True,
                platform="atcoder"):
    return {
        "question_title": f"title of {question_id}",
        "question_content": f"Statement of {question_id}.",
        "platform": platform,
        "question_id": question_id,
        "contest_id": question_id.split("_")[0],
        "contest_date": f"{date}T00:00:00",
        "starter_code": starter,
        "difficulty": difficulty,
        "public_test_cases": json.dumps(public),
        "private_test_cases": encode_private(private) if encode else json.dumps(private),
        "metadata": json.dumps({"func_name": func_name} if func_name else {}),
    }


LEETCODE_STARTER = "class Solution:\n    def helper(self, x: int) -> int:\n        pass\n    def maxSum(self, nums: List[int], k: int) -> int:\n        "
ROWS = [
    release_row("abc390_a", "2025-01-25", "easy", [stdin_test("1 2\n", "3\n")],
                [stdin_test("5 7\n", "12\n"), stdin_test("0 0\n", "0\n")]),
    release_row("3485", "2025-02-15", "medium", [call_test("[1, 2, 3]\n2", "5")], [call_test("[4]\n1", "4")],
                starter=LEETCODE_STARTER, func_name="maxSum", platform="leetcode"),
    release_row("abc395_c", "2025-03-01", "hard", [stdin_test("4\n", "8\n")], [stdin_test("1\n", "2\n")],
                encode=False),
    release_row("abc402_b", "2025-05-03", "easy", [stdin_test("2\n", "4\n")], [stdin_test("3\n", "6\n")]),
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_release_rows_become_problems_with_every_test_in_order(tmp_path):
    path = write_jsonl(tmp_path / "test6.jsonl", ROWS)
    assert detect_format(path) == "livecodebench_release"
    problems, rejects = load_problems(path)
    assert rejects == []
    by_id = {problem.id: problem for problem in problems}
    atcoder = by_id["livecodebench/abc390_a"]
    assert atcoder.kind == "stdin" and atcoder.difficulty == "easy" and atcoder.date == "2025-01-25"
    assert atcoder.time_limit_s == 6.0  # LiveCodeBench's per-test limit
    # Public tests first, then the decoded private ones.
    assert [(test.input, test.output) for test in atcoder.tests] == [("1 2\n", "3\n"), ("5 7\n", "12\n"),
                                                                       ("0 0\n", "0\n")]
    assert atcoder.metadata["public_tests"] == 1 and atcoder.metadata["platform"] == "atcoder"
    assert atcoder.metadata["contest_date"] == "2025-01-25T00:00:00"
    leetcode = by_id["livecodebench/3485"]
    # metadata.func_name chooses the method, not the starter's last one.
    assert leetcode.kind == "call" and leetcode.entry_point == "Solution().maxSum"
    assert leetcode.starter_code == LEETCODE_STARTER and leetcode.prelude is None
    assert [(test.input, test.output) for test in leetcode.tests] == [("[1, 2, 3]\n2", "5"), ("[4]\n1", "4")]
    # Private tests given as plain JSON (LiveCodeBench tries JSON first) read as well.
    assert [test.output for test in by_id["livecodebench/abc395_c"].tests] == ["8\n", "2\n"]


def test_converted_problems_judge_programs_on_public_and_private_tests(tmp_path):
    """The real path from release row to verdict, under both judges: LiveCodeBench's call
    convention (a method of Solution, `List` without an import) and the decoded private
    tests, which reject a program that passes the public ones only."""
    from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample

    problems, _ = load_problems(write_jsonl(tmp_path / "test6.jsonl", ROWS))
    by_id = {problem.id: problem for problem in problems}
    samples = [
        Sample("livecodebench/abc390_a", code="a, b = map(int, input().split())\nprint(a + b)"),
        Sample("livecodebench/3485", code="class Solution:\n    def maxSum(self, nums: List[int], k: int) -> int:\n"
                                          "        return sum(sorted(nums)[-k:])"),
        Sample("livecodebench/abc395_c", code="print(2 * int(input()))"),
        Sample("livecodebench/abc395_c", code="print(int(input()) + 4)"),  # right on the public test only
    ]
    with Evaluator(EvaluatorConfig(workers=1)) as evaluator:
        for mode in ("robust", "strict"):
            verdicts = [result.verdict for result in evaluator.judging(mode).evaluate(by_id, samples)]
            assert verdicts == ["accepted", "accepted", "accepted", "wrong_answer"], mode


def test_a_statement_that_accepts_several_outputs_is_kept(tmp_path):
    # The training loaders reject such statements; the benchmark's problem set is fixed.
    row = release_row("abc400_d", "2025-04-05", "medium", [stdin_test("1\n", "1\n")], [])
    row["question_content"] = "Find a path. If there are multiple solutions, print any of them."
    problems, rejects = load_problems(write_jsonl(tmp_path / "r.jsonl", [row]))
    assert rejects == [] and [problem.id for problem in problems] == ["livecodebench/abc400_d"]


def test_parquet_reads_like_jsonl(tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as parquet

    path = tmp_path / "test6.parquet"
    parquet.write_table(pyarrow.Table.from_pylist(ROWS), path)
    from_parquet, rejects = load_problems(path)
    assert rejects == []
    from_jsonl, _ = load_problems(write_jsonl(tmp_path / "test6.jsonl", ROWS))
    strip = lambda problem: problem.model_dump(exclude={"metadata": {"source_file"}})  # noqa: E731
    assert [strip(problem) for problem in from_parquet] == [strip(problem) for problem in from_jsonl]


class RunsACommand:
    """Unpickling this calls os.system: what a hostile release file would carry."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class Opaque:
    """An ordinary object: its pickle names its class, which unpickling would import."""

    def __init__(self):
        self.value = 1


class EvaluatesCode:
    def __reduce__(self):
        return eval, ("__import__('os').getpid()",)


@pytest.mark.parametrize("payload, named", [
    (lambda marker: RunsACommand(marker), "system"),
    (lambda marker: EvaluatesCode(), "builtins.eval"),
    # An object nested in plain data, with no __reduce__ of its own, still names its class.
    (lambda marker: [1, {"tests": Opaque()}], "Opaque"),
])
def test_a_pickle_naming_a_global_is_refused_and_never_runs(tmp_path, payload, named):
    marker = tmp_path / "ran"
    hostile = base64.b64encode(zlib.compress(pickle.dumps(payload(marker)))).decode()
    with pytest.raises(UnsafePickleError, match=named):
        decode_private_tests(hostile)
    rows = [ROWS[0], {**ROWS[2], "private_test_cases": hostile}]
    path = write_jsonl(tmp_path / "hostile.jsonl", rows)
    problems, rejects = load_problems(path)
    assert not marker.exists()
    assert [problem.id for problem in problems] == ["livecodebench/abc390_a"]
    [reject] = rejects
    assert (reject.row, reject.field, reject.reason) == (2, "private_test_cases", "unsafe pickle")
    text = str(reject)
    assert text.startswith(f"{path}: row 2: field 'private_test_cases':") and named in text and "refused" in text


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_plain_data_pickles_still_load(protocol):
    # The refusing unpickler must not refuse the data the release holds, whichever protocol
    # wrote it: a JSON string, long enough for protocol 4's framing and 8-byte lengths.
    tests = [stdin_test("x" * 70000 + "\n", "é\n"), call_test('[1, 2]\n"a"', "true")]
    text = json.dumps(tests)
    blob = base64.b64encode(zlib.compress(pickle.dumps(text, protocol=protocol))).decode()
    assert decode_private_tests(blob) == tests


@pytest.mark.parametrize("value, message", [
    ("not base64 !", "neither JSON nor base64"),
    (base64.b64encode(b"not zlib").decode(), "not zlib"),
    (base64.b64encode(zlib.compress(b"not a pickle")).decode(), "not a pickle"),
    (base64.b64encode(zlib.compress(pickle.dumps([1, 2]))).decode(), "holds a list"),
])
def test_undecodable_private_tests_name_the_step(tmp_path, value, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [{**ROWS[0], "private_test_cases": value}])
    _, [reject] = load_problems(path)
    assert reject.field == "private_test_cases" and message in reject.message


def zlib_bomb(inflated_bytes: int) -> str:
    """base64 of zlib of `inflated_bytes` zero bytes (a few hundred KB for hundreds of MB)."""
    deflater, zeros = zlib.compressobj(9), bytes(4 << 20)
    parts = [deflater.compress(zeros) for _ in range(inflated_bytes // len(zeros))]
    return base64.b64encode(b"".join(parts) + deflater.flush()).decode()


def test_a_zlib_bomb_is_refused_after_inflating_at_most_its_bound(tmp_path, monkeypatch):
    from microcoder.data import livecodebench

    inflated = []
    real_decompressobj = zlib.decompressobj

    class CountingInflater:
        def __init__(self):
            self.inner = real_decompressobj()

        def decompress(self, data, max_length=0):
            chunk = self.inner.decompress(data, max_length)
            inflated.append(len(chunk))
            return chunk

        def __getattr__(self, name):
            return getattr(self.inner, name)

    monkeypatch.setattr(livecodebench.zlib, "decompressobj", CountingInflater)
    bomb = zlib_bomb(320 << 20)  # ~320 KB of zlib: its ratio bound is the 64 MiB free size
    assert len(bomb) < 1 << 20
    path = write_jsonl(tmp_path / "bomb.jsonl", [{**ROWS[0], "private_test_cases": bomb}])
    _, [reject] = load_problems(path)
    assert reject.field == "private_test_cases" and "decompresses to more than" in reject.message
    assert sum(inflated) <= livecodebench.PRIVATE_TESTS_FREE_BYTES + livecodebench.INFLATE_CHUNK_BYTES


def test_tests_that_compress_well_under_the_free_size_still_load():
    tests = [{"input": "1 " * 200_000 + "\n", "output": "1\n", "testtype": "stdin"}] * 20  # ~8 MB, ratio > 100
    blob = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()
    assert decode_private_tests(blob) == tests


def test_broken_fields_are_named(tmp_path):
    no_name = {**ROWS[1], "metadata": "{}"}
    bad_call = release_row("3486", "2025-02-15", "easy", [call_test("[1, 2\n", "3")], [],
                           starter=LEETCODE_STARTER, func_name="maxSum")
    no_date = {key: value for key, value in ROWS[0].items() if key != "question_content"}
    path = write_jsonl(tmp_path / "broken.jsonl", [no_name, bad_call, no_date])
    problems, rejects = load_problems(path, format="livecodebench_release")
    assert problems == []
    assert [(reject.row, reject.field) for reject in rejects] == [
        (1, "metadata.func_name"), (2, "public_test_cases.0.input"), (3, "question_content")]


def test_windows_are_ordered_dates():
    for name, (since, until) in RELEASE_WINDOWS.items():
        assert since < until, name
    assert window_dates("v6") == ("2025-02-01", "2025-04-30")
    with pytest.raises(ValueError, match="release_v6"):
        window_dates("v7")


@pytest.mark.slow  # loads and samples a model: ~20 s
def test_eval_model_on_a_release_file_in_a_window_under_both_judges(tmp_path):
    """The real path: `microcoder eval-model` reads the release file, keeps the v6 window
    (2025-02-01 .. 2025-04-30: rows 2 and 3), samples the tiny model and prints pass@1 per
    difficulty under both judges. A random model writes no code, so every value is 0."""
    from typer.testing import CliRunner

    from microcoder.cli import app
    from microcoder.policy.model import save_tiny_model

    model_dir = save_tiny_model(tmp_path / "tiny")
    release = write_jsonl(tmp_path / "test6.jsonl", ROWS)
    out = tmp_path / "eval"
    arguments = ["--model", str(model_dir), "--problems", str(release), "--window", "v6", "--n", "2",
                 "--max-new-tokens", "4", "--temperature", "1.0", "--out", str(out), "--workers", "1"]
    result = CliRunner().invoke(app, ["eval-model", *arguments], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "2 of 4 problems dated within 2025-02-01 .. 2025-04-30" in result.output
    header = next(line for line in result.output.splitlines() if "4 robust" in line)
    assert "4 strict" in header
    assert "difficulty: medium" in result.output and "difficulty: hard" in result.output
    assert "platform: leetcode" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["problems"] == 2
    for table in ("pass@1", "pass@1_strict"):
        assert list(summary[table]["4"]["difficulty"]) == ["medium", "hard"]
        assert list(summary[table]["4"]["platform"]) == ["atcoder", "leetcode"]
        assert summary[table]["4"]["all"] == {"pass@1": 0.0, "stderr": 0.0, "problems": 2, "samples": 4}
    judged = {json.loads(line)["problem_id"] for line in (out / "results.jsonl").read_text().splitlines()}
    assert judged == {"livecodebench/3485", "livecodebench/abc395_c"}


def test_eval_model_refuses_a_release_file_with_a_hostile_pickle(tmp_path):
    from typer.testing import CliRunner

    from microcoder.cli import app

    marker = tmp_path / "ran"
    hostile = base64.b64encode(zlib.compress(pickle.dumps(RunsACommand(marker)))).decode()
    release = write_jsonl(tmp_path / "test6.jsonl", [ROWS[0], {**ROWS[1], "private_test_cases": hostile}])
    result = CliRunner().invoke(app, ["eval-model", "--problems", str(release), "--out", str(tmp_path / "eval")],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    assert f"{release}: row 2: field 'private_test_cases':" in output and "system" in output
    assert not marker.exists() and not (tmp_path / "eval").exists()
