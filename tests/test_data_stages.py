"""Data pipeline stages as pure functions: test checks, input-format shapes, dedup and
contamination matching, pass-rate band and date filters. No sandbox, no ../shared."""

from __future__ import annotations

import errno
import gzip
import json

import pytest

from microcoder.data.decontaminate import ContaminationIndex
from microcoder.data.dedup import deduplicate, exact_key, jaccard, shingles
from microcoder.data.difficulty import filter_by_difficulty, passes_band
from microcoder.data import ingest
from microcoder.data.config import DedupConfig, PipelineConfig, SourceConfig
from microcoder.data.stages import StageContext
from microcoder.data.validate import check_tests, first_line_shape, fits_first_line, judge_flags
from microcoder.evaluator.sandbox import SandboxFault
from microcoder.problems import Problem

STATEMENT = ("You are given t test cases. In each test case you are given two integers a and b, the number of "
             "apples in two baskets. Print how many apples there are in total for every test case.\n\nInput\n\n"
             "The first line contains a single integer t (1 <= t <= 100). Each of the next t lines contains "
             "two integers a and b.")


def stdin(id: str, prompt: str, tests: list[tuple[str, str]], **fields) -> Problem:
    return Problem(id=id, prompt=prompt, kind="stdin", tests=[{"input": i, "output": o} for i, o in tests], **fields)


def quiet_context(**overrides) -> StageContext:
    return StageContext(PipelineConfig(sources=[], progress=False, **overrides))


def test_first_line_shape_reads_codeforces_and_atcoder_styles():
    assert first_line_shape(STATEMENT) == (1, True)
    assert first_line_shape("The first line contains two integers n and m (1 <= n, m <= 10).") == (2, True)
    atcoder = "The input is given from Standard Input in the following format:\nN M\nA_1 ...\n\n- All input values are integers."
    assert first_line_shape(atcoder) == (2, True)
    assert first_line_shape("The input is given in the following format:\nS\n") == (1, False)
    # a line that also holds a string, a variable-length first line, no stated format: not checked
    assert first_line_shape("The first line contains an integer n and a string s.") is None
    assert first_line_shape("in the following format:\nA_1 A_2 \\ldots A_N\n") is None
    assert first_line_shape("Read the numbers and print their sum.") is None
    assert fits_first_line("\n3\n1 2\n", (1, True)) and not fits_first_line("hello world\n", (1, True))
    assert fits_first_line("abc\n", (1, False)) and not fits_first_line("1 2\n", (1, False))


def test_check_tests_drops_empty_repeated_conflicting_and_misaligned():
    problem = stdin("p", STATEMENT, [
        ("1\n1 2\n", "3\n"), ("1\n1 2\n", "3\n"),      # repeat
        ("", ""), ("1\n0 0\n", " \n"),               # empty test, empty expected output
        ("1\n5 5\n", "10\n"), ("1\n5 5 \n", "11\n"),  # same input (modulo spaces), two outputs
        ("hello\n", "olleh\n"),                       # belongs to another problem
    ])
    kept, dropped = check_tests(problem)
    assert [(t.input, t.output) for t in kept] == [("1\n1 2\n", "3\n")]
    assert dropped == {"duplicate test": 1, "empty test": 1, "empty expected output": 1,
                       "same input, different outputs": 2, "input does not fit the stated input format": 1}
    kept, dropped = check_tests(problem, check_input_format=False)
    assert len(kept) == 2 and "input does not fit the stated input format" not in dropped


def test_check_tests_call_signature():
    problem = Problem(id="c", prompt="larger", kind="call", entry_point="larger",
                      starter_code="def larger(x: int, y: int) -> int:\n",
                      tests=[{"input": "1\n2", "output": "2"}, {"input": "7", "output": "7"},
                             {"input": "\"a\"\n2", "output": "2"}, {"input": "3\n4", "output": "\"4\""},
                             {"input": "5\n3", "output": "5"}])
    kept, dropped = check_tests(problem)
    assert [t.input for t in kept] == ["1\n2", "5\n3"]
    assert dropped == {"argument count does not match the signature": 1,
                       "argument type does not match the signature": 1,
                       "output type does not match the signature": 1}


def test_judge_flags_several_answers_and_interactive():
    assert judge_flags(stdin("a", "If there are several answers, print any of them.", [("1", "1")]))[0] == "several correct outputs"
    assert judge_flags(stdin("b", "This is an interactive problem.", [("1", "1")]))[0] == "interactive"
    assert judge_flags(stdin("c", "Print YES in any case.", [("1", "1")])) is None


def test_shingles_and_jaccard_by_hand():
    # "a b c d" -> {"a b c", "b c d"}; "a b c e" -> {"a b c", "b c e"}: 1 shared of 3
    assert shingles("A b, c d", 3) == {"a b c", "b c d"}
    assert jaccard(shingles("a b c d", 3), shingles("a b c e", 3)) == 1 / 3
    assert shingles("two words", 3) == {"two words"}


def test_dedup_keeps_the_richer_record_and_does_not_chain():
    long = STATEMENT
    edited = long.replace("apples", "pears", 1)
    rich = stdin("rich", edited, [("1\n1 1\n", "2\n"), ("1\n2 2\n", "4\n")])
    poor = stdin("poor", long, [("1\n1 1\n", "2\n")])
    copy = stdin("copy", long, [("1\n1 1\n", "2\n")])
    other = stdin("other", "Print the reverse of a string given on one line.", [("ab\n", "ba\n")])
    out = deduplicate([poor, copy, rich, other], DedupConfig(), quiet_context())
    assert [p.id for p in out.problems] == ["rich", "other"]
    reasons = {r.id: (r.reason, r.match) for r in out.removals}
    # poor and copy are exact duplicates of each other, but rich (more tests) is visited
    # first and both are near duplicates of it: neither enters the index, so copy is
    # matched to rich, never to the removed poor.
    assert reasons == {"poor": ("near duplicate", "rich"), "copy": ("near duplicate", "rich")}
    assert exact_key(poor) == exact_key(copy)


def test_dedup_exact_duplicate_when_near_is_off():
    a = stdin("a", "Print  the SUM of two numbers.", [("1 2\n", "3\n")])
    b = stdin("b", "print the sum of two numbers", [("1  2", "3")])
    out = deduplicate([a, b], DedupConfig(near=False), quiet_context())
    assert [p.id for p in out.problems] == ["a"]
    assert [(r.id, r.reason, r.match) for r in out.removals] == [("b", "exact duplicate", "a")]


def test_contamination_index_statement_overlap_boilerplate_and_tests():
    evaluation = [("lcb", stdin("e1", STATEMENT, [("1\n1 1\n", "2\n"), ("1\n2 2\n", "4\n")])),
                  ("lcb", stdin("e2", "Count vowels.", [("a\n", "1\n"), ("b\n", "0\n")]))]
    index = ContaminationIndex(evaluation, ngram=8, common_ngram_max=5, min_tests_for_identical=2)
    copy = stdin("t1", "Intro line added. " + STATEMENT.replace("apples", "pears"), [("9\n", "9\n")])
    reason, match, _ = index.match(copy, threshold=0.5)
    assert (reason, match) == ("statement overlap", "lcb:e1")
    assert index.match(stdin("t2", "count   VOWELS", [("z\n", "0\n")]), 0.5)[:2] == ("statement overlap", "lcb:e2")
    assert index.match(stdin("t3", "Something else entirely.", [("b\n", "0\n"), ("a\n", "1\n")]), 0.5)[:2] == \
        ("identical tests", "lcb:e2")
    assert index.match(stdin("t4", "Something else entirely.", [("a\n", "1\n")]), 0.5) is None
    # an n-gram shared by more than common_ngram_max eval problems does not count
    many = [("x", stdin(f"b{i}", f"The first line contains a single integer t. Task {i} is unique here {i}.", [("1", "1")]))
            for i in range(6)]
    boilerplate = ContaminationIndex(many, ngram=8, common_ngram_max=5, min_tests_for_identical=2)
    assert boilerplate.match(stdin("t5", "The first line contains a single integer t. Then print it.", [("2", "2")]), 0.5) is None


def test_pass_rate_band():
    assert passes_band(0.5, [0.01, 0.99]) is None
    assert passes_band(1.0, [0.01, 0.99]).startswith("too easy")
    assert passes_band(0.0, [0.01, 0.99]).startswith("too hard")
    assert passes_band(0.0, [0.0, 1.0]) is None


def test_difficulty_date_cutoff_and_band_without_model():
    config = PipelineConfig(sources=[], progress=False)
    config.difficulty.date_cutoff = "2023-01-01"
    config.difficulty.pass_rate_band = [0.01, 0.99]
    problems = [
        stdin("new", "x", [("1", "1")], date="2024-05-01", difficulty="Hard"),
        stdin("old", "x", [("1", "1")], date="2021-05-01"),
        stdin("undated", "x", [("1", "1")]),
        stdin("solved", "x", [("1", "1")], date="2024-01-01", metadata={"pass_rate": {"rate": 1.0}}),
    ]
    out = filter_by_difficulty(problems, config, StageContext(config))
    assert [p.id for p in out.problems] == ["new", "undated"]
    # The source's label, normalised; the raw one and its scale kept.
    assert out.problems[0].difficulty == "hard"
    assert out.problems[0].metadata["difficulty_label"] == {"raw": "Hard", "scale": "easy/medium/hard"}
    assert {r.id: r.reason for r in out.removals} == {"old": "before date cutoff",
                                                      "solved": "too easy (pass rate above band)"}
    config.difficulty.keep_undated = False
    out = filter_by_difficulty(problems, config, StageContext(config))
    assert [p.id for p in out.problems] == ["new"]


def test_constraint_variants_are_kept_copies_are_not():
    easy = STATEMENT
    hard = STATEMENT.replace("1 <= t <= 100", "1 <= t <= 100000")  # "II": same story, larger limits
    copy = STATEMENT.replace("apples", "pears", 1)
    out = deduplicate([stdin("easy", easy, [("1\n1 1\n", "2\n"), ("1\n2 2\n", "4\n")]),
                       stdin("hard", hard, [("1\n1 1\n", "2\n")]),
                       stdin("copy", copy, [("1\n3 3\n", "6\n")])], DedupConfig(), quiet_context())
    assert [p.id for p in out.problems] == ["easy", "hard"]
    assert out.problems[1].metadata["constraint_variant_of"] == "easy"
    assert [(r.id, r.reason, r.match) for r in out.removals] == [("copy", "near duplicate", "easy")]
    out = deduplicate([stdin("easy", easy, [("1\n1 1\n", "2\n")]), stdin("hard", hard, [("2\n1 1\n", "2\n")])],
                      DedupConfig(keep_constraint_variants=False), quiet_context())
    assert [p.id for p in out.problems] == ["easy"]


def test_first_line_shape_reads_only_the_first_mention():
    multi = ("The input is given from Standard Input in the following format, where test_i is the i-th case:\n"
             "T\ntest_1\n\nEach test case is given in the following format:\nN X K\n\n- All input values are integers.")
    assert first_line_shape(multi) == (1, True) and fits_first_line("5\n10 2 0\n", (1, True))
    later = ("The first line contains the number of test cases t. The first line of each test case contains "
             "two integers n and k. Note: the first line contains two integers.")
    assert first_line_shape(later) is None
    # a probability called an integer by its statement still counts as a number
    assert fits_first_line("7 1.0000\n", (2, True)) and not fits_first_line("7 x\n", (2, True))


def test_one_limit_written_three_ways_is_not_a_variant():
    from microcoder.data.dedup import numbers_in

    assert numbers_in("1 <= n <= 10^5") == numbers_in("1 <= n <= 105") == numbers_in("1 <= n <= 10⁵")
    assert numbers_in("1 <= n <= 10^5") != numbers_in("1 <= n <= 50")


def test_hf_spec_and_source_names():
    from microcoder.data.ingest import parse_hf_spec, source_name
    from microcoder.data.config import SourceConfig

    assert parse_hf_spec("hf:json") == ("json", None)
    assert parse_hf_spec("hf:org/set:test") == ("org/set", "test")
    assert source_name(SourceConfig(path="../shared/data/mbpp/MBPP.jsonl")) == "MBPP"
    assert source_name(SourceConfig(path="a/LeetCodeDataset-v0.3.1-test.jsonl.gz")) == "LeetCodeDataset-v0.3.1-test"
    assert source_name(SourceConfig(path="hf:org/set:test")) == "org_set_test"


def test_a_canonical_source_keeps_good_rows_and_names_each_bad_one(tmp_path):
    from microcoder.data.ingest import load_source
    from microcoder.data.config import SourceConfig

    good = {"id": "a", "prompt": "p", "kind": "stdin", "tests": [{"input": "1", "output": "1"}]}
    lines = [json.dumps(good), "{not json", json.dumps(good), json.dumps(dict(good, id="b", kind="neither"))]
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(lines) + "\n")
    config = PipelineConfig(sources=[], progress=False, base_dir=str(tmp_path))
    problems, rejects = load_source(config, SourceConfig(path=str(path), format="canonical"), StageContext(config))
    assert [problem.id for problem in problems] == ["a"]
    assert [(r.row, r.field, r.reason) for r in rejects] == [
        (2, "(json)", "unparseable row"), (3, "id", "duplicate id"), (4, "kind", "invalid record")]


def test_a_canonical_source_may_be_one_json_list(tmp_path):
    from microcoder.data.ingest import load_source
    from microcoder.data.config import SourceConfig

    good = {"id": "a", "prompt": "p", "kind": "stdin", "tests": [{"input": "1", "output": "1"}]}
    path = tmp_path / "mine.json"
    path.write_text(json.dumps([good, dict(good, id="b"), good]))
    config = PipelineConfig(sources=[], progress=False, base_dir=str(tmp_path))
    problems, rejects = load_source(config, SourceConfig(path=str(path)), StageContext(config))
    assert [problem.id for problem in problems] == ["a", "b"]
    assert [(r.row, r.field, r.reason) for r in rejects] == [(3, "id", "duplicate id")]


@pytest.mark.parametrize("fault", [OSError(errno.EIO, "Input/output error"),
                                   SandboxFault("recording its tests: its sandbox worker died under it 2 times")])
def test_a_machine_fault_while_reading_a_source_stops_ingest_instead_of_rejecting_it(tmp_path, monkeypatch, fault):
    # An I/O error, a hub source's network error or a sandbox that could not record the
    # tests is the machine's: the source is not "unreadable", and no reject is cached for it.
    path = tmp_path / "source.jsonl"
    path.write_text("{}\n")
    config = PipelineConfig(sources=[], progress=False, base_dir=str(tmp_path))

    def failing(*args, **kwargs):
        raise fault

    monkeypatch.setattr(ingest, "_load_file", failing)
    with pytest.raises(type(fault)):
        ingest.load_source(config, SourceConfig(path=str(path)), StageContext(config))
    monkeypatch.setattr(ingest, "_load_file", lambda *args: (_ for _ in ()).throw(gzip.BadGzipFile("Not a gzipped file")))
    problems, rejects = ingest.load_source(config, SourceConfig(path=str(path)), StageContext(config))
    assert problems == [] and [reject.reason for reject in rejects] == ["unreadable source"]
