"""Per-problem time limits: derived from a reference's CPU time in the validate stage,
honoured (and scaled) by the evaluator, and bad limits named by file, row and field."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from typer.testing import CliRunner

from microcoder.data.config import PipelineConfig, SourceConfig, ValidateConfig, load_build_config
from microcoder.data.pipeline import run_stage
from microcoder.data.stages import StageContext, read_manifest
from microcoder.data.validate import time_limit_from_reference
from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from microcoder.problems import ProblemFormatError, read_problems, time_limit_error
from tests.helpers import stdin_problem

ADD = stdin_problem([("1 2", "3"), ("5 5", "10")], problem_id="add")
ADD_CODE = "print(sum(map(int, input().split())))\n"
LOOP = "while True:\n    pass\n"


def burn(seconds: float) -> str:
    """Python that uses about `seconds` of CPU, then adds the two numbers on stdin."""
    return ("import time\nend = time.process_time() + %r\nwhile time.process_time() < end:\n    pass\n" % seconds
            + ADD_CODE)


# ------------------------------------------------------------------ the rule, by hand


def test_limit_is_a_multiple_of_the_slowest_test_within_floor_and_cap():
    # slowest 0.1234 s x 3 = 0.3702, rounded up to 0.01 -> 0.38; floor 0.2 and cap 6 leave it
    assert time_limit_from_reference([0.01, 0.1234, 0.05], 3, 0.2, 6, 0.01) == 0.38
    # the same under a 1 s floor -> 1.0
    assert time_limit_from_reference([0.01, 0.1234, 0.05], 3, 1.0, 6, 0.01) == 1.0
    # slowest 2.5 s x 3 = 7.5 -> capped at 6
    assert time_limit_from_reference([2.5, 0.3], 3, 1.0, 6, 0.01) == 6
    # 0.1 x 2 = 0.2 exactly (0.2 * 100 is 20.000000000000004 in floats): not rounded up to 0.21
    assert time_limit_from_reference([0.1, 0.05], 2, 0.01, 6, 0.01) == 0.2
    # 0.0004 x 3 = 0.0012 -> 0.01 (the rounding step), under a 0.001 floor
    assert time_limit_from_reference([0.0004], 3, 0.001, 6, 0.01) == 0.01
    with pytest.raises(ValueError):
        time_limit_from_reference([], 3, 1.0, 6, 0.01)


def test_limit_is_rounded_up_onto_the_step():
    # slowest 0.34 s x 3 = 1.02 -> next multiple of 0.5 is 1.5; 0.36 s x 3 = 1.08 -> also 1.5,
    # where 0.01 s steps gave 1.02 and 1.08: CPU-time noise inside a step leaves the limit alone
    assert time_limit_from_reference([0.34], 3, 1.0, 6, step_s=0.5) == 1.5
    assert time_limit_from_reference([0.36], 3, 1.0, 6, step_s=0.5) == 1.5
    # 0.5 x 3 = 1.5 exactly stays 1.5 (not the next step); 0.51 x 3 = 1.53 -> 2.0
    assert time_limit_from_reference([0.5], 3, 1.0, 6, step_s=0.5) == 1.5
    assert time_limit_from_reference([0.51], 3, 1.0, 6, step_s=0.5) == 2.0
    # 1.9 x 3 = 5.7 -> 6.0, at the cap; 0.1 x 3 = 0.3 -> 0.5 -> the 1 s floor
    assert time_limit_from_reference([1.9], 3, 1.0, 6, step_s=0.5) == 6.0
    assert time_limit_from_reference([0.1], 3, 1.0, 6, step_s=0.5) == 1.0


def test_step_must_be_positive_and_is_named():
    from microcoder.data.config import ValidateConfig
    for bad in (0, -0.5, "0.5", True):
        with pytest.raises(ValueError, match="time_limit_step_s"):
            ValidateConfig(time_limit_step_s=bad)


@pytest.mark.parametrize("settings, named", [
    ({"time_limit_multiple": 0.5}, "time_limit_multiple"),
    ({"time_limit_floor_s": 0}, "time_limit_floor_s"),
    ({"time_limit_cap_s": -1}, "time_limit_cap_s"),
    ({"time_limit_cap_s": "6"}, "time_limit_cap_s"),
    ({"time_limit_floor_s": 7.0, "time_limit_cap_s": 6.0}, "time_limit_floor_s"),
])
def test_bad_validate_settings_name_the_key(settings, named):
    with pytest.raises(ValueError, match=named):  # pydantic names the field; a file adds its section
        ValidateConfig(**settings)


def test_bad_limit_in_a_data_config_names_the_key(tmp_path):
    path = tmp_path / "data.yaml"
    path.write_text(yaml.safe_dump({"sources": [], "validate": {"time_limit_multiple": 0}}))
    with pytest.raises(ValueError, match="validate.time_limit_multiple"):
        load_build_config(path)


# ------------------------------------------------------------------- the evaluator


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        yield evaluator


def test_the_problems_limit_wins_over_the_default_and_the_scale_multiplies_both(evaluator):
    own = ADD.model_copy(update={"time_limit_s": 0.25})
    assert evaluator.time_limit_s(own) == 0.25 and evaluator.time_limit_s(ADD) == 2.0
    scaled = evaluator.with_options(time_limit_scale=4)
    assert scaled.time_limit_s(own) == 1.0 and scaled.time_limit_s(ADD) == 8.0
    assert evaluator.config.time_limit_scale == 1  # the view did not change the original

    # A loop is stopped at the problem's limit, not the default 2 s, and the detail says which.
    looped = evaluator.evaluate_code(own, LOOP)
    assert looped.verdict == "time_limit_exceeded" and "limit 0.25s" in looped.detail
    assert 0.25 <= looped.cpu_seconds < 1.0
    assert "limit 0.5s" in evaluator.with_options(time_limit_scale=2).evaluate_code(own, LOOP).detail

    # ~0.4 s of CPU per test: over a 0.25 s limit, within it x4 (1 s), within the default (2 s).
    slow = burn(0.4)
    assert evaluator.evaluate_code(own, slow).verdict == "time_limit_exceeded"
    assert scaled.evaluate_code(own, slow).verdict == "accepted"
    assert evaluator.evaluate_code(ADD, slow).verdict == "accepted"
    # a problem's limit above the default is honoured too: 0.4 s under a 0.1 s default
    tight_default = Evaluator(EvaluatorConfig(workers=1, time_limit_s=0.1))
    with tight_default:
        assert tight_default.evaluate_code(ADD, slow).verdict == "time_limit_exceeded"
        assert tight_default.evaluate_code(ADD.model_copy(update={"time_limit_s": 2.0}), slow).verdict == "accepted"


def test_per_test_cpu_times_when_asked(evaluator):
    plain = evaluator.evaluate_code(ADD, ADD_CODE)
    assert plain.test_cpu_seconds is None  # rows stay small unless asked
    timed = evaluator.with_options(record_test_cpu=True)
    three = stdin_problem([("1 2", "3"), ("5 5", "11"), ("0 0", "0")], problem_id="three")
    # Fails test 1 (5 + 5 is not 11), so test 2 never runs. Two samples on two workers: no
    # sample's tests are split across workers (which would run test 2 beside test 1).
    result = timed.evaluate([three], [Sample("three", code=burn(0.05))] * 2)[0]
    assert result.verdict == "wrong_answer"
    assert len(result.test_cpu_seconds) == 3 and result.test_cpu_seconds[2] is None
    assert all(0.05 <= seconds < 1.0 for seconds in result.test_cpu_seconds[:2])
    assert sum(result.test_cpu_seconds[:2]) == pytest.approx(result.cpu_seconds)


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), True, "2"])
def test_bad_scale_or_default_is_a_clear_error(value):
    assert time_limit_error(value)
    with pytest.raises(ValueError, match="time_limit_scale"):
        EvaluatorConfig(time_limit_scale=value)
    with pytest.raises(ValueError, match="time_limit_s"):
        EvaluatorConfig(time_limit_s=value)
    assert time_limit_error(0.5) is None and time_limit_error(3) is None


@pytest.mark.parametrize("value, row", [(0, 2), (-3, 2), ("2", 2), (True, 2), ("NaN", 2), ("Infinity", 2)])
def test_a_problems_file_with_a_bad_limit_names_file_row_and_field(tmp_path, value, row):
    path = tmp_path / "problems.jsonl"
    good = ADD.model_dump()
    bad = {**ADD.model_dump(), "id": "bad", "time_limit_s": value}
    text = json.dumps(good) + "\n" + json.dumps(bad).replace('"NaN"', "NaN").replace('"Infinity"', "Infinity") + "\n"
    path.write_text(text)
    with pytest.raises(ProblemFormatError) as error:
        read_problems(path)
    assert (error.value.row, error.value.field) == (row, "time_limit_s")
    assert str(path) in str(error.value)


def test_evaluate_command_scale_flag_and_bad_input(tmp_path):
    from microcoder.cli import app

    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps(ADD.model_copy(update={"time_limit_s": 0.2}).model_dump()) + "\n")
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"problem_id": "add", "code": LOOP}) + "\n")
    out = tmp_path / "results.jsonl"
    runner = CliRunner()
    done = runner.invoke(app, ["evaluate", "--problems", str(problems), "--samples", str(samples), "--out", str(out),
                               "--workers", "1", "--time-limit-scale", "1.5"])
    assert done.exit_code == 0, done.output
    row = json.loads(out.read_text())
    assert row["verdict"] == "time_limit_exceeded" and "limit 0.3" in row["detail"]  # 0.2 x 1.5

    refused = runner.invoke(app, ["evaluate", "--problems", str(problems), "--samples", str(samples), "--out",
                                  str(out), "--time-limit-scale", "0"])
    assert refused.exit_code == 2 and "time_limit_scale must be positive" in refused.output
    problems.write_text(json.dumps({**ADD.model_dump(), "time_limit_s": -1}) + "\n")
    refused = runner.invoke(app, ["evaluate", "--problems", str(problems), "--samples", str(samples), "--out", str(out)])
    assert refused.exit_code == 2
    assert "row 1: field 'time_limit_s'" in " ".join(refused.output.split())


# ------------------------------------------------------------- the validate stage


def test_validate_writes_limits_from_reference_timings(tmp_path):
    """A tiny made-up corpus: references of known CPU cost. Rule: 2 x slowest test within
    [0.3 s, 0.6 s]. A trivial reference (a few ms) -> the floor; one burning ~0.2 s on its
    slower test -> 2 x its measured time (0.4-0.5 s); one burning ~0.4 s -> 0.8, capped
    at 0.6. Without a reference: the source's limit, or none."""
    rows = [
        {"id": "trivial", "reference": ADD_CODE},
        {"id": "middle", "reference": "import time\nn = sum(map(int, input().split()))\nend = time.process_time() + "
                                      "(0.2 if n == 10 else 0.02)\nwhile time.process_time() < end:\n    pass\nprint(n)\n"},
        {"id": "heavy", "reference": burn(0.4)},
        {"id": "no-reference-own-limit", "limit": 1.5},
        {"id": "no-reference", "limit": None},
    ]
    source = tmp_path / "made_up.jsonl"
    with open(source, "w") as handle:
        for row in rows:
            metadata = {"reference_solution": row["reference"]} if "reference" in row else {}
            problem = ADD.model_copy(update={"id": row["id"], "prompt": f"Add two numbers ({row['id']}).",
                                             "time_limit_s": row.get("limit"), "metadata": metadata})
            handle.write(problem.model_dump_json() + "\n")
    config = PipelineConfig(sources=[SourceConfig(path=str(source), format="canonical")],
                            work_dir=str(tmp_path / "work"), progress=False, workers=2)
    config.validate = ValidateConfig(time_limit_multiple=2, time_limit_floor_s=0.3, time_limit_cap_s=0.6,
                                     time_limit_step_s=0.1)
    run_stage(config, "ingest", log=lambda _: None)
    run_stage(config, "validate", log=lambda _: None)
    kept = {json.loads(line)["id"]: json.loads(line) for line in
            (config.stage_dir("validate") / "problems.jsonl").read_text().splitlines()}
    assert set(kept) == {row["id"] for row in rows}

    times = {pid: kept[pid]["metadata"]["reference_cpu_s"] for pid in ("trivial", "middle", "heavy")}
    assert all(len(value) == 2 for value in times.values())  # one per test
    assert max(times["trivial"]) < 0.15
    assert 0.2 <= times["middle"][1] < 0.3 and times["middle"][0] < times["middle"][1]  # test 1 is 5 + 5 = 10
    assert times["heavy"][0] >= 0.4
    limits = {pid: problem["time_limit_s"] for pid, problem in kept.items()}
    assert limits["trivial"] == 0.3                                                  # the floor
    assert limits["middle"] == round(math.ceil(2 * times["middle"][1] * 10) / 10, 6)  # 2 x slowest, up to 0.1
    assert 0.4 <= limits["middle"] <= 0.6
    assert limits["heavy"] == 0.6                                                    # the cap
    assert limits["no-reference-own-limit"] == 1.5 and limits["no-reference"] is None
    assert {pid: problem["metadata"]["time_limit_from"] for pid, problem in kept.items()} == {
        "trivial": "reference", "middle": "reference", "heavy": "reference",
        "no-reference-own-limit": "source", "no-reference": "default"}

    summary = read_manifest(config, "validate")["extra"]["time_limits"]
    assert summary["from"] == {"reference": 3, "source": 1, "default": 1}
    assert (summary["at_floor"], summary["at_cap"]) == (1, 1)
    assert summary["rule"] == {"multiple": 2, "floor_s": 0.3, "cap_s": 0.6, "step_s": 0.1}
    cached = [json.loads(line) for line in (config.stage_dir("validate") / "reference_verdicts.jsonl").read_text().splitlines()]
    assert {record["id"]: record["test_cpu_s"] for record in cached} == times

    # Another rule re-derives the limits from the cached timings: no reference runs again.
    class NoEvaluator(StageContext):
        def evaluator(self):
            raise AssertionError("the references ran again: their cached timings were not used")

    config.validate = ValidateConfig(time_limit_multiple=3, time_limit_floor_s=0.1, time_limit_cap_s=5)
    run_stage(config, "validate", context=NoEvaluator(config), log=lambda _: None)
    rederived = {json.loads(line)["id"]: json.loads(line)["time_limit_s"] for line in
                 (config.stage_dir("validate") / "problems.jsonl").read_text().splitlines()}
    # the default 0.5 s step: heavy 3 x >= 0.4 s -> the next multiple of 0.5; trivial 3 x < 0.15 -> 0.5
    assert rederived["heavy"] == math.ceil(3 * max(times["heavy"]) * 2) / 2
    assert rederived["trivial"] == 0.5

    # Off: references still run (and are timed), limits stay the source's.
    config.validate = ValidateConfig(time_limits_from_reference=False)
    run_stage(config, "validate", context=NoEvaluator(config), log=lambda _: None)
    off = {json.loads(line)["id"]: json.loads(line) for line in
           (config.stage_dir("validate") / "problems.jsonl").read_text().splitlines()}
    assert off["heavy"]["time_limit_s"] is None and off["heavy"]["metadata"]["time_limit_from"] == "default"
    assert off["heavy"]["metadata"]["reference_cpu_s"] == times["heavy"]


@pytest.mark.parametrize("margin, runs", [(1.5, 3), (1.0, 1)])
def test_a_reference_just_below_the_floors_edge_is_timed_like_one_above_it(tmp_path, margin, runs):
    """Multiple 3 over a 1 s floor: the limit leaves the floor at a slowest test of 1/3 s. A
    reference taking ~0.23 s is below that edge but within 1.5x of it (from 2/9 s), so it is
    run three times (as one above the edge is) and keeps its least times; with no margin it
    runs once."""
    source = tmp_path / "made_up.jsonl"
    problem = ADD.model_copy(update={"id": "near-edge", "metadata": {"reference_solution": burn(0.23)}})
    source.write_text(problem.model_dump_json() + "\n")
    config = PipelineConfig(sources=[SourceConfig(path=str(source), format="canonical")],
                            work_dir=str(tmp_path / "work"), progress=False, workers=1)
    config.validate = ValidateConfig(retime_margin=margin)
    run_stage(config, "ingest", log=lambda _: None)
    run_stage(config, "validate", log=lambda _: None)
    [record] = [json.loads(line) for line in
                (config.stage_dir("validate") / "reference_verdicts.jsonl").read_text().splitlines()]
    assert record["verdict"] == "accepted" and record.get("runs", 1) == runs
    assert 0.23 <= max(record["test_cpu_s"]) < 1 / 3


@pytest.mark.parametrize("field, value", [("retime_margin", 0.9), ("retime_margin", float("nan")),
                                          ("reference_timings_from", 123), ("reference_timings_from", "")])
def test_retime_settings_are_checked(field, value):
    with pytest.raises(ValueError, match=field):
        ValidateConfig(**{field: value})


def test_a_build_seeded_with_anothers_timings_runs_no_reference_and_keeps_its_limits(tmp_path):
    """Build A times its references; build B, from an empty work_dir with
    `reference_timings_from` A's cache, runs none of them and derives the same limits
    from A's times, so B's corpus equals A's. A bad row of that file is named."""
    source = tmp_path / "made_up.jsonl"
    rows = [ADD.model_copy(update={"id": "quick", "metadata": {"reference_solution": ADD_CODE}}),
            ADD.model_copy(update={"id": "slower", "prompt": "Add slowly.", "metadata": {"reference_solution": burn(0.15)}})]
    source.write_text("".join(problem.model_dump_json() + "\n" for problem in rows))
    rule = dict(time_limit_multiple=3, time_limit_floor_s=0.1, time_limit_cap_s=5, time_limit_step_s=0.01)

    def build(name: str, context_class=StageContext, **validate) -> PipelineConfig:
        config = PipelineConfig(sources=[SourceConfig(path=str(source), format="canonical")],
                                work_dir=str(tmp_path / name), progress=False, workers=1)
        config.validate = ValidateConfig(**rule, **validate)
        run_stage(config, "ingest", log=lambda _: None)
        run_stage(config, "validate", context=context_class(config), log=lambda _: None)
        return config

    class NoEvaluator(StageContext):
        def evaluator(self):
            raise AssertionError("a reference ran although the seed build had timed it")

    first = build("a")
    cache = first.stage_dir("validate") / "reference_verdicts.jsonl"
    second = build("b", NoEvaluator, reference_timings_from=str(cache))
    corpus = [(config.stage_dir("validate") / "problems.jsonl").read_text() for config in (first, second)]
    assert corpus[0] == corpus[1]
    limits = {json.loads(line)["id"]: json.loads(line)["time_limit_s"] for line in corpus[0].splitlines()}
    assert limits["quick"] == 0.1 and limits["slower"] >= 0.45  # 3 x >= 0.15 s, on 0.01 s steps
    assert (second.stage_dir("validate") / "reference_verdicts.jsonl").read_text() == cache.read_text()

    record = json.loads(cache.read_text().splitlines()[0])
    for field, value in (("verdict", None), ("tests_total", "2"), ("test_cpu_s", [])):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(cache.read_text() + json.dumps({**record, field: value}) + "\n")
        with pytest.raises(ProblemFormatError) as error:
            build(f"c-{field}", reference_timings_from=str(bad))
        assert (error.value.path, error.value.row, error.value.field) == (str(bad), 3, field)
    with pytest.raises(FileNotFoundError, match="reference_timings_from"):
        build("d", reference_timings_from=str(tmp_path / "absent.jsonl"))


def test_problems_with_the_same_reference_and_tests_run_it_once(tmp_path, monkeypatch):
    """Two sources' copies of one problem (other ids, same reference, tests and limits) share
    one reference run; both get its verdict and times."""
    source = tmp_path / "made_up.jsonl"
    copy = ADD.model_copy(update={"metadata": {"reference_solution": ADD_CODE}})
    rows = [copy.model_copy(update={"id": "first"}), copy.model_copy(update={"id": "second", "prompt": "Add them."}),
            copy.model_copy(update={"id": "other", "metadata": {"reference_solution": "a, b = map(int, input().split())\nprint(a + b)\n"}})]
    source.write_text("".join(problem.model_dump_json() + "\n" for problem in rows))
    config = PipelineConfig(sources=[SourceConfig(path=str(source), format="canonical")],
                            work_dir=str(tmp_path / "work"), progress=False, workers=1)
    ran: list[str] = []
    evaluate = Evaluator.evaluate

    def counted(self, problems, samples, **options):
        ran.extend(problem.id for problem in problems)
        return evaluate(self, problems, samples, **options)

    monkeypatch.setattr(Evaluator, "evaluate", counted)
    run_stage(config, "ingest", log=lambda _: None)
    run_stage(config, "validate", log=lambda _: None)
    assert ran == ["first", "other"]
    kept = {json.loads(line)["id"]: json.loads(line) for line in
            (config.stage_dir("validate") / "problems.jsonl").read_text().splitlines()}
    assert set(kept) == {"first", "second", "other"}
    assert kept["second"]["metadata"]["reference_cpu_s"] == kept["first"]["metadata"]["reference_cpu_s"]


def test_a_canonical_source_row_with_a_bad_limit_is_a_reject_naming_it(tmp_path):
    source = tmp_path / "rows.jsonl"
    source.write_text(ADD.model_dump_json() + "\n" + json.dumps({**ADD.model_dump(), "id": "zero", "time_limit_s": 0})
                      + "\n")
    config = PipelineConfig(sources=[SourceConfig(path=str(source), format="canonical")],
                            work_dir=str(tmp_path / "work"), progress=False)
    manifest = run_stage(config, "ingest", log=lambda _: None)
    assert manifest["counts"]["out"] == 1
    reject = json.loads((config.stage_dir("ingest") / "rejects.jsonl").read_text())
    assert (reject["path"], reject["row"], reject["field"]) == (str(source), 2, "time_limit_s")


def test_a_stage_file_row_with_a_bad_limit_is_a_reject_naming_it(tmp_path):
    from microcoder.data.stages import read_stage_problems

    path = tmp_path / "problems.jsonl"
    path.write_text(ADD.model_dump_json() + "\n"
                    + json.dumps({**ADD.model_dump(), "id": "negative", "time_limit_s": -0.5}) + "\n")
    problems, rejects = read_stage_problems(path, "dedup")
    assert [p.id for p in problems] == ["add"]
    assert [(r.path, r.row, r.field) for r in rejects] == [(str(path), 2, "time_limit_s")]
    assert "must be positive" in rejects[0].message
