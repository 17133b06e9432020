"""`microcoder data build` end to end on the fixture files in tests/fixtures/data, each
problem there written to hit one rule (see the expected outcomes below). Reference runs
and pass rates need the sandbox; nothing reads ../shared."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from microcoder.data.export import parquet_row_to_problem
from microcoder.data.config import load_build_config
from microcoder.data.pipeline import MissingInput, build, run_stage
from microcoder.data.stages import STAGES, read_stage_problems
from microcoder.problems import read_problems

FIXTURES = Path(__file__).parent / "fixtures" / "data"
REPO = Path(__file__).resolve().parent.parent

# What each fixture problem is for, and where it must end.
EXPECTED_REMOVALS = {
    ("validate", "livecodebench/contest-2", "tests do not fit the statement's input format", None),
    ("validate", "extra/several-answers", "several correct outputs", None),
    ("validate", "extra/broken-reference", "reference fails its tests", None),
    ("dedup", "hfset/product-copy", "exact duplicate", "extra/product"),
    ("dedup", "livecodebench/contest-3", "near duplicate", "livecodebench/contest-1"),
    ("decontaminate", "extra/contaminated", "statement overlap", "evalset:eval/e1"),
    ("decontaminate", "extra/same-tests", "identical tests", "evalset:eval/e2"),
}
EXPECTED_KEPT = ["livecodebench/contest-1", "extra/float", "extra/anycase", "extra/product", "extra/argcount",
                 "hfset/reverse"]


def write_config(tmp: Path, **overrides) -> Path:
    config = {
        "work_dir": str(tmp / "work"),
        "progress": False,
        "sources": [
            {"path": str(FIXTURES / "contest.json")},
            {"path": str(FIXTURES / "extra.jsonl")},
            {"path": "hf:json", "name": "hfset", "data_files": [str(FIXTURES / "hf_rows.jsonl")], "licence": "MIT (fixture)"},
        ],
        "decontaminate": {"eval_sets": [{"name": "evalset", "path": str(FIXTURES / "evalset.jsonl")}]},
        # Most fixture problems have no reference: kept here so that each later rule meets
        # them (tests/test_data_amplify.py holds the default, which removes them).
        "amplify": {"keep_unverified": True},
    }
    config.update(overrides)
    path = tmp / "data.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("build")
    config = load_build_config(write_config(tmp))
    logs: list[str] = []
    manifests = build(config, log=logs.append)
    return config, manifests, logs


def removals(config) -> set[tuple]:
    found = set()
    for stage in STAGES[1:-1]:
        for line in (config.stage_dir(stage) / "removed.jsonl").read_text().splitlines():
            record = json.loads(line)
            found.add((record["stage"], record["id"], record["reason"], record["match"]))
    return found


def test_every_fixture_problem_ends_where_expected(built):
    config, manifests, _ = built
    assert removals(config) == EXPECTED_REMOVALS
    corpus = read_problems(config.stage_dir("export") / "microcoder-dataset.jsonl")
    assert [p.id for p in corpus] == EXPECTED_KEPT
    assert {stage: manifests[stage]["counts"]["out"] for stage in STAGES} == {
        "ingest": 13, "validate": 10, "dedup": 8, "decontaminate": 6, "amplify": 6, "difficulty": 6, "export": 6}


def test_tests_checkers_and_provenance_of_kept_problems(built):
    config, _, _ = built
    corpus = {p.id: p for p in read_problems(config.stage_dir("export") / "microcoder-dataset.jsonl")}
    contest = corpus["livecodebench/contest-1"]
    # misaligned, repeated, empty and wrong-type tests dropped; the two good ones kept
    assert [(t.input, t.output) for t in contest.tests] == [("2\n1 2\n3 4\n", "3\n7\n"), ("1\n5 5\n", "10\n")]
    assert contest.metadata["dropped_tests"] == {
        "testtype 'functional' on a stdin problem": 1, "empty test": 1, "duplicate test": 1,
        "input does not fit the stated input format": 1}
    assert corpus["extra/float"].checker.float_tolerance == 1e-6
    assert corpus["extra/float"].metadata["checker_inferred"] == "statement"
    # "print YES ... NO ...; you may print each letter in any case": those answers' case only
    anycase = corpus["extra/anycase"].checker
    assert anycase.case_insensitive_words == ["NO", "YES"] and not anycase.case_insensitive and anycase.float_tolerance is None
    assert corpus["extra/argcount"].metadata["dropped_tests"] == {"argument count does not match the signature": 1}
    assert corpus["extra/product"].metadata["reference_solution"].startswith("def multiply")
    # its reference takes milliseconds: 3 x that is under the 1 s floor
    product = corpus["extra/product"]
    assert (product.time_limit_s, product.metadata["time_limit_from"]) == (1.0, "reference")
    assert len(product.metadata["reference_cpu_s"]) == len(product.tests)
    assert (contest.time_limit_s, contest.metadata["time_limit_from"]) == (None, "default")  # no reference
    hf = corpus["hfset/reverse"].metadata
    assert (hf["pipeline_source"], hf["source_path"], hf["licence"]) == ("hfset", "hf:json", "MIT (fixture)")
    assert contest.metadata["pipeline_source"] == "contest" and contest.metadata["source_row"] == 1
    assert contest.metadata["licence"].startswith("MIT")


def test_malformed_records_are_rejected_with_file_row_and_field(built):
    config, _, _ = built
    rejects = [json.loads(line) for line in (config.stage_dir("export") / "all_rejects.jsonl").read_text().splitlines()]
    found = {(Path(r["path"]).name, r["row"], r["field"], r["reason"]) for r in rejects}
    assert found == {("contest.json", 4, "problem", "wrong field type"),
                     ("extra.jsonl", 9, "tests", "invalid record"),
                     ("extra.jsonl", 10, "(json)", "unparseable row")}


def test_parquet_loads_with_datasets_and_round_trips(built):
    datasets = pytest.importorskip("datasets")
    config, _, _ = built
    export_dir = config.stage_dir("export")
    dataset = datasets.load_dataset("parquet", data_files=str(export_dir / "microcoder-dataset.parquet"), split="train")
    assert dataset.num_rows == 6 and dataset[0]["tests"][0] == {"input": "2\n1 2\n3 4\n", "output": "3\n7\n",
                                                                  "shown": False, "generated": False}
    jsonl = read_problems(export_dir / "microcoder-dataset.jsonl")
    assert [parquet_row_to_problem(row) for row in dataset] == jsonl


def test_datasheet_lists_counts_reasons_and_figures(built):
    config, _, _ = built
    export_dir = config.stage_dir("export")
    sheet = (export_dir / "datasheet.md").read_text()
    assert "| dedup | 10 | 8 | 2 | 0 |" in sheet
    assert "| near duplicate | 1 | `livecodebench/contest-3` ~ `livecodebench/contest-1` (statement Jaccard" in sheet
    assert "| identical tests | 1 | `extra/same-tests` ~ `evalset:eval/e2`" in sheet
    assert "3 dated problems, from 2021-06-01 to 2025-01-15" in sheet
    assert "Problems with a limit from their reference: 1; with their source's own: 0;" in sheet
    assert "| 1 s (the floor) | 1 |" in sheet and "| none (the judge's default) | 5 |" in sheet
    for figure in ("sources.png", "difficulty.png"):
        assert (export_dir / figure).read_bytes()[:4] == b"\x89PNG"


def test_datasheet_names_each_evaluation_set_with_its_sha256(built):
    config, manifests, _ = built
    digest = hashlib.sha256((FIXTURES / "evalset.jsonl").read_bytes()).hexdigest()
    assert manifests["decontaminate"]["extra"]["eval_sets"] == {
        "evalset": {"problems": 2, "rejected": 0, "files": {str(FIXTURES / "evalset.jsonl"): digest}}}
    sheet = (config.stage_dir("export") / "datasheet.md").read_text()
    row = next(line for line in sheet.splitlines() if line.startswith("| evalset |"))
    assert row.startswith("| evalset | 2 | 0 | ") and row.endswith(f"evalset.jsonl | `{digest}` |"), row


def test_an_edited_evaluation_set_reruns_decontaminate(tmp_path):
    eval_set = tmp_path / "evalset.jsonl"
    eval_set.write_bytes((FIXTURES / "evalset.jsonl").read_bytes())
    config = load_build_config(write_config(tmp_path, sources=[{"path": str(FIXTURES / "hf_rows.jsonl")}],
                                            validate={"run_references": False},
                                            decontaminate={"eval_sets": [{"name": "evalset", "path": str(eval_set)}]}))
    build(config, log=lambda _: None)
    # The eval set gains a copy of a corpus problem: decontaminate must see it, not skip.
    eval_set.write_text(eval_set.read_text() + (FIXTURES / "hf_rows.jsonl").read_text().splitlines()[1] + "\n")
    logs: list[str] = []
    manifests = build(config, log=logs.append)
    assert [line.endswith("skipped") for line in logs] == [True, True, True, False, False, False, False]
    assert manifests["decontaminate"]["counts"]["removed"] == 1
    assert manifests["decontaminate"]["extra"]["eval_sets"]["evalset"]["files"] == {
        str(eval_set): hashlib.sha256(eval_set.read_bytes()).hexdigest()}


def test_rerun_skips_done_stages_and_a_config_change_reruns_from_its_stage(built, tmp_path):
    config, _, _ = built
    logs: list[str] = []
    build(config, log=logs.append)
    assert all(line.endswith("skipped") for line in logs) and len(logs) == len(STAGES)
    config.decontaminate.overlap_threshold = 0.99  # the edited copy no longer counts
    logs = []
    manifests = build(config, log=logs.append)
    assert [line.endswith("skipped") for line in logs] == [True, True, True, False, False, False, False]
    assert manifests["decontaminate"]["counts"]["removed"] == 1
    config.decontaminate.overlap_threshold = 0.5
    build(config, log=lambda _: None)
    assert removals(config) == EXPECTED_REMOVALS


def test_a_broken_line_in_a_stage_file_is_rejected_not_fatal(tmp_path):
    good = (FIXTURES / "hf_rows.jsonl").read_text().splitlines()
    path = tmp_path / "problems.jsonl"
    missing_tests = json.dumps({"id": "x", "prompt": "p", "kind": "stdin"})
    path.write_text("\n".join([missing_tests, good[1], "{broken", missing_tests.replace('"x"', '"y"')]) + "\n")
    problems, rejects = read_stage_problems(path, "dedup")
    assert [p.id for p in problems] == ["hfset/reverse"]
    assert [(r.row, r.field) for r in rejects] == [(1, "tests"), (3, "(json)"), (4, "tests")]


def test_hf_saved_dataset_directory(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [json.loads(line) for line in (FIXTURES / "hf_rows.jsonl").read_text().splitlines()]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    config = load_build_config(write_config(tmp_path, sources=[{"path": f"hf:{tmp_path / 'saved'}", "name": "saved"}]))
    manifest = run_stage(config, "ingest", log=lambda _: None)
    problems = read_problems(config.stage_dir("ingest") / "problems.jsonl")
    # null-filled Arrow columns are dropped, so the copy without a starter still reads
    assert [p.id for p in problems] == ["hfset/product-copy", "hfset/reverse"]
    assert problems[0].metadata["source_file"] == f"hf:{tmp_path / 'saved'}"
    assert manifest["extra"]["per_source"] == {"saved": {"problems": 2, "rejected": 0}}


def test_a_missing_source_stops_ingest_before_it_writes(tmp_path):
    config = load_build_config(write_config(tmp_path, sources=[{"path": str(FIXTURES / "hf_rows.jsonl")},
                                                         {"path": str(tmp_path / "missing.jsonl")}]))
    with pytest.raises(MissingInput, match=rf"^sources\[1\]\.path: {tmp_path / 'missing.jsonl'}: No such file"):
        run_stage(config, "ingest", log=lambda _: None)
    assert not (tmp_path / "work").exists()


def test_cli_single_stage_needs_its_input_and_build_runs(tmp_path):
    from microcoder.cli import app

    config = write_config(tmp_path, sources=[{"path": str(FIXTURES / "hf_rows.jsonl")}],
                          validate={"run_references": False})
    runner = CliRunner()
    result = runner.invoke(app, ["data", "dedup", "--config", str(config)])
    assert result.exit_code == 2 and "run `microcoder data validate`" in result.output
    result = runner.invoke(app, ["data", "ingest", "--config", str(config)])
    assert result.exit_code == 0 and "ingest: 2 in, 2 out" in result.output
    result = runner.invoke(app, ["data", "build", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "ingest: up to date" in result.output and "built 2 problems" in result.output


def test_model_pass_rate_with_a_fake_generator_filters_by_band(tmp_path):
    from microcoder.data.difficulty import filter_by_difficulty
    from microcoder.data.stages import StageContext
    from microcoder.policy.generation import GeneratedText

    from microcoder.problems import Problem

    rows = [json.loads(line) for line in (FIXTURES / "extra.jsonl").read_text().splitlines()[:8]]
    problems = [Problem.model_validate(r) for r in rows if r["id"] in ("extra/product", "extra/anycase", "extra/float")]
    answers = {  # per problem: the n=2 sampled programs
        "extra/product": ["def multiply(a, b):\n    return a * b\n"] * 2,                         # always solved
        "extra/anycase": ["n = int(input())\nprint('YES' if n % 2 == 0 else 'NO')\n", "print('NO')\n"],  # half
        "extra/float": ["print(0)\n"] * 2,                                                          # never
    }

    class FakeGenerator:
        def generate(self, batch, n, max_new_tokens, seed):
            return [[GeneratedText([], f"```python\n{code}```", False) for code in answers[p.id][:n]] for p in batch]

    config = load_build_config(write_config(tmp_path, difficulty={"estimate_pass_rate": True, "samples_per_problem": 2,
                                                            "pass_rate_band": [0.01, 0.99]}))
    config.stage_dir("difficulty").mkdir(parents=True)
    context = StageContext(config, generator=FakeGenerator())
    try:
        out = filter_by_difficulty(problems, config, context)
    finally:
        context.close()
    assert [p.id for p in out.problems] == ["extra/anycase"]
    assert out.problems[0].metadata["pass_rate"] == {"model": "default", "n": 2, "accepted": 1, "rate": 0.5}
    assert {r.id: r.reason for r in out.removals} == {"extra/product": "too easy (pass rate above band)",
                                                      "extra/float": "too hard (pass rate below band)"}
    cached = (config.stage_dir("difficulty") / "pass_rates.jsonl").read_text().splitlines()
    assert len(cached) == 3


def test_shipped_shared_config_resolves_against_the_repo_root():
    config = load_build_config(REPO / "configs" / "data" / "shared.yaml")
    assert Path(config.base_dir) == REPO
    # Both sides resolved: ../shared may be a symlink.
    assert config.resolve(config.sources[0].path).resolve() == (
        REPO.parent / "shared" / "data" / "leetcodedataset" / "LeetCodeDataset-v0.3.1-test.jsonl.gz").resolve()
    assert [s.name for s in config.decontaminate.eval_sets] == ["livecodebench-test", "humaneval"]
    assert config.difficulty.estimate_pass_rate is False


def test_unknown_config_key_names_the_valid_ones(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("sources: []\ndedup: {treshold: 0.5}\n")
    with pytest.raises(ValueError, match="unknown key.*treshold.*valid keys"):
        load_build_config(path)


@pytest.mark.parametrize("text, error", [
    # A key's type is checked, in every section: none of these is the type its field declares.
    ("dedup: {near: 'yes'}", "dedup.near: Input should be a valid boolean, got 'yes'"),
    ("dedup: {shingle_words: 3.5}", "dedup.shingle_words: Input should be a valid integer"),
    ("validate: {time_limit_cap_s: '6'}", "validate.time_limit_cap_s: Input should be a valid number"),
    ("workers: true", "workers: Input should be a valid integer, got True"),
    ("difficulty: {pass_rate_band: [0.0, high]}", r"difficulty.pass_rate_band\[1\]: Input should be a valid number"),
    ("export: {name: 7}", "export.name: Input should be a valid string, got 7"),
    # A source is named by its position.
    ("sources: [a.jsonl, {path: 3}]", r"sources\[1\].path: Input should be a valid string, got 3"),
    ("sources: [{path: a.jsonl, fromat: mbpp}]", r"sources\[0\]: unknown key 'fromat'; valid keys: path, name, format"),
    ("bogus: 1", r"\(config\): unknown key 'bogus'"),
])
def test_a_bad_value_names_the_file_and_the_field(tmp_path, text, error):
    path = tmp_path / "bad.yaml"
    data = {"sources": [], **yaml.safe_load(text)}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match=f"^{path}: {error}"):
        load_build_config(path)


def test_the_shipped_data_configs_load_and_short_forms_expand(tmp_path):
    for path in sorted((REPO / "configs" / "data").glob("*.yaml")):
        config = load_build_config(path)
        assert config.sources and config.decontaminate.eval_sets and config.base_dir == str(REPO), path
    path = tmp_path / "short.yaml"
    path.write_text("sources: [a.jsonl, {path: 'hf:json', data_files: x.json}]\ndedup:\n"
                    "difficulty: {date_cutoff: 2024-01-01}\n")  # YAML reads the day as a date
    config = load_build_config(path)
    assert config.difficulty.date_cutoff == "2024-01-01"
    assert [source.path for source in config.sources] == ["a.jsonl", "hf:json"]
    assert config.sources[1].data_files == ["x.json"] and config.dedup.threshold == 0.7
    assert config.base_dir == str(tmp_path)  # no pyproject.toml above it: the config's folder


def test_model_pass_rate_through_a_real_checkpoint(tmp_path):
    """The non-injected path: load_model_and_tokenizer -> render_prompt -> generate ->
    evaluator, on the tiny random model (it solves nothing: every rate is 0)."""
    from microcoder.policy.model import save_tiny_model

    model_dir = save_tiny_model(tmp_path / "tiny")
    config = load_build_config(write_config(
        tmp_path, sources=[{"path": str(FIXTURES / "hf_rows.jsonl")}], validate={"run_references": False},
        difficulty={"estimate_pass_rate": True, "model": str(model_dir), "samples_per_problem": 2,
                    "max_new_tokens": 8, "pass_rate_band": [0.0, 1.0]}))
    manifests = build(config, log=lambda _: None)
    assert manifests["difficulty"]["counts"]["out"] == 2
    corpus = read_problems(config.stage_dir("export") / "microcoder-dataset.jsonl")
    assert [p.metadata["pass_rate"] for p in corpus] == [{"model": str(model_dir), "n": 2, "accepted": 0, "rate": 0.0}] * 2


def test_an_interrupted_validate_resumes_from_cached_verdicts(built):
    """Work finished before an interruption is not redone: with its manifest gone (as if
    the stage died before writing it), validate reruns from the verdict cache without
    starting the evaluator, and produces the same output."""
    from microcoder.data.stages import StageContext

    config, _, _ = built
    before = (config.stage_dir("validate") / "problems.jsonl").read_text()
    (config.stage_dir("validate") / "manifest.json").unlink()

    class NoEvaluator(StageContext):
        def evaluator(self):
            raise AssertionError("the evaluator was started: cached verdicts were not used")

    run_stage(config, "validate", context=NoEvaluator(config), log=lambda _: None)
    assert (config.stage_dir("validate") / "problems.jsonl").read_text() == before
    logs: list[str] = []
    build(config, log=logs.append)
    assert all(line.endswith("skipped") for line in logs)  # same output hash: nothing downstream reruns
