"""`engine: ray`: the build's sandbox work on evaluator actors of a Ray instance on this
machine (2 CPUs, as CI has), compared with `engine: local` on the same small config: the
pipeline's fixture problems (every rule) and three call problems whose references validate
times and amplify answers. Measured CPU times differ between any two builds, so the
comparison is made twice: everything but the times, between two fresh builds; and byte for
byte, between a Ray build and a local build that adopts the Ray build's measurements
(`reference_timings_from`, `answers_from`). Nothing reads ../shared."""

from __future__ import annotations

import filecmp
import json
import os
import re
import signal
from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray")

from microcoder.data import ray_engine  # noqa: E402
from microcoder.data.config import load_build_config  # noqa: E402
from microcoder.data.pipeline import build, is_done  # noqa: E402
from microcoder.data.ray_engine import EngineFault  # noqa: E402
from microcoder.problems import Problem, TestCase  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "data"

STATEMENT = """You are given an array nums and an integer k. Return the sum of the k {which} numbers{extra}.

Example 1:
Input: nums = [3,1,2], k = 2
Output: {example}

Constraints:

1 <= n == nums.length <= 8
-109 <= nums[i] <= 109
1 <= k <= nums.length
"""


def call_problem(name: str, which: str, expression: str, extra: str, tests: list[tuple[str, int]]) -> Problem:
    reference = f"class Solution:\n    def {name}(self, nums: List[int], k: int) -> int:\n        return {expression}\n"
    return Problem(id=f"t/{name}", kind="call", entry_point=f"Solution().{name}", source="t",
                   prompt=STATEMENT.format(which=which, extra=extra, example=tests[0][1]),
                   starter_code=f"class Solution:\n    def {name}(self, nums: List[int], k: int) -> int:\n",
                   tests=[TestCase(input=arguments, output=str(output)) for arguments, output in tests],
                   metadata={"reference_solution": reference})


PROBLEMS = [
    call_problem("largest", "largest", "sum(sorted(nums)[-k:])", "",
                 [("[3, 1, 2]\n2", 5), ("[4, 4, 1, 0]\n3", 9), ("[-7, 5]\n1", 5)]),
    call_problem("smallest", "smallest", "sum(sorted(nums)[:k])", "",
                 [("[3, 1, 2]\n2", 3), ("[4, 4, 1, 0]\n3", 5), ("[-7, 5]\n1", -7)]),
    call_problem("largest_squared", "largest", "sum(x * x for x in sorted(nums)[-k:])", ", each squared",
                 [("[3, 1, 2]\n2", 13), ("[4, 4, 1, 0]\n3", 33), ("[-7, 5]\n1", 25)]),
]


@pytest.fixture(scope="module")
def ray_instance():
    """One Ray instance of 2 CPUs for the module (a build joins it rather than start its own)."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


MBPP_ROWS = [
    {"task_id": 2, "text": "Write a function to find the similar elements from the given two tuple lists.",
     "code": "def similar_elements(a, b):\n    return tuple(sorted(set(a) & set(b)))\n",
     "test_setup_code": "", "challenge_test_list": [],
     "test_list": ["assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)",
                   "assert similar_elements((1, 2, 3, 4),(5, 4, 3, 7)) == (3, 4)",
                   "assert similar_elements((11, 12, 14, 13),(17, 15, 14, 13)) == (13, 14)"]},
    {"task_id": 27, "text": "Write a python function to count the set bits of a given non-negative number.",
     "code": "def count_set_bits(n):\n    return bin(n).count('1')\n",
     "test_setup_code": "", "challenge_test_list": [],
     "test_list": ["assert count_set_bits(2) == 1", "assert count_set_bits(4) == 1", "assert count_set_bits(6) == 2",
                   "assert count_set_bits(255) == 8"]},
]
"""An assert-style source: ingest records its tests by running harness programs (on the
evaluator actors under `engine: ray`)."""


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """The call problems' file, with the MBPP rows' beside it (`mbpp.jsonl`): one path for
    every build (its path is in the export)."""
    path = tmp_path_factory.mktemp("source") / "calls.jsonl"
    path.write_text("".join(problem.model_dump_json() + "\n" for problem in PROBLEMS))
    (path.parent / "mbpp.jsonl").write_text("".join(json.dumps(row) + "\n" for row in MBPP_ROWS))
    return path


def config_of(folder: Path, source: Path, engine: str, adopt_from: Path | None = None, **ray_settings):
    """The small config, under `folder`, on `engine`; adopting `adopt_from`'s measurements."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "work_dir": str(folder / "work"), "progress": False, "workers": 2, "engine": engine,
        "ray": {"cpus_per_actor": 1, "chunk_size": 1, **ray_settings},
        "sources": [{"path": str(FIXTURES / "contest.json")}, {"path": str(FIXTURES / "extra.jsonl")},
                    {"path": str(source), "format": "canonical"}, {"path": str(source.parent / "mbpp.jsonl"), "format": "mbpp"}],
        "decontaminate": {"eval_sets": [{"name": "evalset", "path": str(FIXTURES / "evalset.jsonl")}]},
        "validate": {"min_tests": 1},
        "amplify": {"keep_unverified": True, "tests_per_problem": 12, "batch_size": 100},
        "difficulty": {"estimate_pass_rate": True, "samples_per_problem": 2, "batch_size": 4},
    }
    if adopt_from is not None:
        config["validate"]["reference_timings_from"] = str(adopt_from / "work/validate/reference_verdicts.jsonl")
        config["amplify"]["answers_from"] = str(adopt_from / "work/amplify/reference_answers.jsonl")
    path = folder / "data.yaml"
    path.write_text(yaml.safe_dump(config))
    return load_build_config(path)


class Sampler:
    """The pass-rate stage's model, made deterministic: per problem, its reference (when it
    has one) and a wrong program. The rates are judged on the engine's evaluator."""

    def generate(self, batch, n, max_new_tokens, seed):
        from microcoder.policy.generation import GeneratedText

        def programs(problem):
            right = problem.metadata.get("reference_solution", "print(0)\n")
            return [right, "print(0)\n"][:n]

        return [[GeneratedText([], f"```python\n{code}```", False) for code in programs(problem)] for problem in batch]


def build_quietly(config) -> None:
    build(config, generator=Sampler(), log=lambda _: None)


def export_files(config) -> dict[str, Path]:
    export = config.stage_dir("export")
    return {str(path.relative_to(export)): path for path in sorted(export.rglob("*")) if path.is_file()}


WALL_CLOCK = {"manifest.json", "datasheet.md"}
"""The export's records of how long each stage took (wall-clock seconds, different in any
two builds): compared with those seconds left out. Every other file: byte for byte."""


def without_seconds(path: Path) -> str:
    text = path.read_text()
    if path.name == "manifest.json":
        return json.dumps({**json.loads(text), "seconds": None})
    text = re.sub(r"^(\| \w+ \|(?: [\d,]+ \|){4}) [\d.]+ \|$", r"\1 - |", text, flags=re.MULTILINE)
    return re.sub(r"Stage time before export: \d+ s", "Stage time before export: - s", text)


def assert_same_bytes(one, other) -> None:
    """`cmp` over every file of the two exports (WALL_CLOCK: but for the seconds)."""
    files, others = export_files(one), export_files(other)
    assert list(files) == list(others) and len(files) > 10
    differing = [name for name in files if name not in WALL_CLOCK
                 and not filecmp.cmp(files[name], others[name], shallow=False)]
    assert differing == []
    for name in WALL_CLOCK:
        assert without_seconds(files[name]) == without_seconds(others[name])
        assert "- |" in without_seconds(files[name]) or name == "manifest.json"


def without_times(config) -> list[dict]:
    """The exported problems with the measured CPU times left out."""
    rows = []
    for line in (config.stage_dir("export") / "microcoder-dataset.jsonl").read_text().splitlines():
        row = json.loads(line)
        row["metadata"].pop("reference_cpu_s", None)
        rows.append(row)
    return rows


def cache(config, stage: str, name: str) -> list[dict]:
    return [json.loads(line) for line in (config.stage_dir(stage) / name).read_text().splitlines()]


def verdicts(config) -> dict[str, tuple]:
    records = cache(config, "validate", "reference_verdicts.jsonl")
    assert len({record["key"] for record in records}) == len(records)  # each measured once
    return {record["key"]: (record["verdict"], record["tests_passed"], record["tests_total"]) for record in records}


def answers(config) -> dict[str, tuple]:
    records = cache(config, "amplify", "reference_answers.jsonl")
    assert len({record["key"] for record in records}) == len(records)
    return {record["key"]: (record["status"], record["return_json"]) for record in records}


@pytest.fixture(scope="module")
def local_build(tmp_path_factory, source):
    # at the depth of the tests' own folders: the datasheet names sources by relative path
    config = config_of(tmp_path_factory.mktemp("local") / "local", source, "local")
    build_quietly(config)
    return config


def test_ray_build_equals_the_local_build(ray_instance, local_build, source, tmp_path):
    ray_build = config_of(tmp_path / "ray", source, "ray")
    build_quietly(ray_build)
    generated = [row for row in without_times(ray_build) if any(test.get("generated") for test in row["tests"])]
    # The fixture's `extra/product`, the three call problems and the two MBPP ones (their
    # tests recorded by ingest, on the actors) were amplified, on the actors.
    assert len(generated) == 6
    # The same verdicts and answers, each once, and the same corpus but for measured times.
    assert verdicts(ray_build) == verdicts(local_build) and len(verdicts(ray_build)) == 7
    assert answers(ray_build) == answers(local_build)
    assert len(answers(ray_build)) >= sum(test.get("generated", False) for row in generated for test in row["tests"])
    assert without_times(ray_build) == without_times(local_build)
    rates = {row["id"]: row["metadata"]["pass_rate"]["accepted"] for row in without_times(ray_build)}
    assert sorted(rates.values()) == [0, 0, 0, 0, 1, 1, 1, 1, 1, 1]  # judged on the actors: references pass
    # Given the Ray build's measurements, a local build writes the same bytes, and so does
    # a Ray build given the local build's.
    adopting = config_of(tmp_path / "local-adopting", source, "local", adopt_from=tmp_path / "ray")
    build_quietly(adopting)
    assert_same_bytes(adopting, ray_build)
    adopting_ray = config_of(tmp_path / "ray-adopting", source, "ray", adopt_from=Path(local_build.work_dir).parent)
    build_quietly(adopting_ray)
    assert_same_bytes(adopting_ray, local_build)


def kill_actors_at_first_result(monkeypatch, targets: tuple[str, ...]) -> list[tuple[str, list[int]]]:
    """In the calls `targets` names, in order (each the first such call after the one before:
    `evaluate`, validate's reference runs; `map_sandboxed`, ingest's recordings of the MBPP
    tests, then amplify's answers), once the call's first chunk is back: SIGKILL every
    evaluator actor's process. Returns [(call, pids killed)]."""
    killed: list[tuple[str, list[int]]] = []
    armed: dict[str, str | None] = {"call": None}
    original_result_of = ray_engine.RayEvaluator._result_of

    def arm(name):
        original = getattr(ray_engine.RayEvaluator, name)

        def call(self, *args, **kwargs):
            if len(killed) < len(targets) and targets[len(killed)] == name:
                armed["call"] = name
                self.pids = self.actor_pids()  # the actors are idle between two calls: they answer at once
            return original(self, *args, **kwargs)
        return call

    def result_of(self, reference):
        result = original_result_of(self, reference)
        if armed["call"] is not None:
            for pid in self.pids:
                os.kill(pid, signal.SIGKILL)
            killed.append((armed["call"], self.pids))
            armed["call"] = None
        return result

    monkeypatch.setattr(ray_engine.RayEvaluator, "_result_of", result_of)
    for name in ("evaluate", "map_sandboxed"):
        monkeypatch.setattr(ray_engine.RayEvaluator, name, arm(name))
    return killed


def test_actors_killed_mid_stage_lose_and_repeat_nothing(ray_instance, local_build, source, tmp_path, monkeypatch):
    killed = kill_actors_at_first_result(monkeypatch, ("map_sandboxed", "evaluate", "map_sandboxed"))
    faulted = config_of(tmp_path / "ray-killed", source, "ray")
    build_quietly(faulted)
    # Mid-ingest (the MBPP recordings), mid-validate, mid-amplify.
    assert [(call, len(pids)) for call, pids in killed] == [("map_sandboxed", 2), ("evaluate", 2), ("map_sandboxed", 2)]
    pids = [set(pids) for _, pids in killed]
    assert not pids[0] & pids[1] and not pids[1] & pids[2]  # each kill met the processes restarted after the last
    # Ray restarted them and ran their lost chunks again: every verdict and answer once.
    assert verdicts(faulted) == verdicts(local_build)
    assert answers(faulted) == answers(local_build)
    assert without_times(faulted) == without_times(local_build)
    monkeypatch.undo()
    adopting = config_of(tmp_path / "local-adopting", source, "local", adopt_from=tmp_path / "ray-killed")
    build_quietly(adopting)
    assert_same_bytes(adopting, faulted)


def test_an_actor_lost_past_its_restarts_stops_the_stage_and_the_rerun_resumes(ray_instance, local_build, source,
                                                                                tmp_path, monkeypatch):
    kill_actors_at_first_result(monkeypatch, ("evaluate",))
    faulted = config_of(tmp_path / "ray", source, "ray", max_restarts=0)
    with pytest.raises(EngineFault) as stopped:
        build_quietly(faulted)
    assert "\n" not in str(stopped.value) and "ray.max_restarts" in str(stopped.value)
    assert not is_done(faulted, "validate")  # no manifest: nothing taken for a finished stage
    written = cache(faulted, "validate", "reference_verdicts.jsonl") if (
        faulted.stage_dir("validate") / "reference_verdicts.jsonl").exists() else []
    assert all(record["verdict"] == verdicts(local_build)[record["key"]][0] for record in written)
    monkeypatch.undo()
    rerun = config_of(tmp_path / "ray", source, "ray")  # the same work_dir, restarts allowed
    build_quietly(rerun)
    assert verdicts(rerun) == verdicts(local_build) and answers(rerun) == answers(local_build)
    assert without_times(rerun) == without_times(local_build)


def test_an_unreachable_cluster_address_stops_the_build_at_once_in_one_line(source, tmp_path):
    """`--ray-address` at a local port nothing listens on: one line naming the address and
    exit 2, within seconds (Ray's own retries of an unreachable GCS run for minutes)."""
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as probe:  # a port the kernel just gave out and nothing listens on now
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    config = config_of(tmp_path, source, "ray", connect_timeout_s=5)
    start = time.monotonic()
    command = ["data", "build", "--config", str(tmp_path / "data.yaml"), "--no-progress", "--ray-address", address]
    done = subprocess.run([sys.executable, "-m", "microcoder.cli", *command], capture_output=True, text=True, timeout=120)
    seconds = time.monotonic() - start
    assert done.returncode == 2, done.stderr[-2000:]
    error = done.stderr.strip()
    assert "\n" not in error and error.startswith("error: engine: ray could not reach the cluster"), error
    assert f"ray.address={address!r}" in error and "ray.connect_timeout_s" in error
    assert seconds < 60, seconds
    assert not is_done(config, "validate")


@pytest.mark.slow
def test_a_driver_killed_mid_amplify_resumes_from_what_it_wrote(ray_instance, local_build, source, tmp_path):
    """`microcoder data build --engine ray` (its own Ray instance) SIGKILLed, with its Ray
    processes, once amplify has cached some answers; the rerun adds the rest, each once."""
    import subprocess
    import sys
    import time

    config = config_of(tmp_path, source, "ray", chunk_size=2)
    settings = yaml.safe_load((tmp_path / "data.yaml").read_text())
    settings["amplify"]["batch_size"] = 4  # written every 4 answers: a kill finds some written
    settings["ray"]["cpus_per_actor"] = None
    settings["difficulty"]["estimate_pass_rate"] = False  # the CLI has no sampler to give
    (tmp_path / "data.yaml").write_text(yaml.safe_dump(settings))
    answers_file = config.stage_dir("amplify") / "reference_answers.jsonl"
    driver = subprocess.Popen([sys.executable, "-m", "microcoder.cli", "data", "build", "--config",
                               str(tmp_path / "data.yaml"), "--no-progress"], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and driver.poll() is None:
        if answers_file.exists() and len(answers_file.read_text().splitlines()) >= 4:
            break
        time.sleep(0.05)
    assert driver.poll() is None, driver.stderr.read().decode()[-2000:]
    os.killpg(driver.pid, signal.SIGKILL)  # the driver and the Ray instance it started
    driver.wait()
    written = answers_file.read_text().splitlines()
    assert 4 <= len(written) < len(answers(local_build)) and not is_done(config, "amplify")
    rerun = load_build_config(tmp_path / "data.yaml")
    build(rerun, log=lambda _: None)
    after = answers_file.read_text().splitlines()
    assert after[: len(written)] == written  # kept, not redone
    assert answers(rerun) == answers(local_build)  # each once (answers() checks), none missing
    assert [{**row, "metadata": {**row["metadata"], "pass_rate": None}} for row in without_times(rerun)] == [
        {**row, "metadata": {**row["metadata"], "pass_rate": None}} for row in without_times(local_build)]


@pytest.mark.slow
def test_the_pass_rate_model_on_a_generation_actor_samples_as_the_local_stage(ray_instance, tmp_path):
    """The CPU fallback of the generation actors (no GPU: `generate` on the tiny random
    model): the same batches with the same seeds give the local stage's responses, text for
    text, and the build the local build's pass rates."""
    from microcoder.data.difficulty import local_model_generator
    from microcoder.data.ray_engine import RayGenerator
    from microcoder.policy.model import save_tiny_model
    from microcoder.problems import read_problems

    model_dir = save_tiny_model(tmp_path / "tiny")
    configs = {}
    for engine in ("local", "ray"):
        folder = tmp_path / engine
        folder.mkdir()
        settings = {"work_dir": str(folder / "work"), "progress": False, "workers": 2, "engine": engine,
                    "ray": {"cpus_per_actor": 1},
                    "sources": [{"path": str(FIXTURES / "hf_rows.jsonl")}], "validate": {"run_references": False},
                    "amplify": {"keep_unverified": True},
                    "difficulty": {"estimate_pass_rate": True, "model": str(model_dir), "samples_per_problem": 2,
                                   "max_new_tokens": 8, "batch_size": 1, "temperature": 1.0}}
        (folder / "data.yaml").write_text(yaml.safe_dump(settings))
        configs[engine] = load_build_config(folder / "data.yaml")
    problems = [Problem.model_validate(json.loads(line)) for line in (FIXTURES / "hf_rows.jsonl").read_text().splitlines()
                if line.strip()][:2]
    calls = [([problem], 7 + index) for index, problem in enumerate(problems)]
    local = local_model_generator(configs["local"])
    here = [[text.text for text in group] for batch, seed in calls for group in local.generate(batch, 2, 8, seed)]
    actors = RayGenerator(configs["ray"], local_model_generator)
    try:
        there = [[text.text for text in group] for groups in actors.generate_batches(calls, 2, 8) for group in groups]
    finally:
        actors.close()
    assert there == here and len({text for group in here for text in group}) > 1  # sampled, seeded alike
    for config in configs.values():
        build(config, log=lambda _: None)
    rates = {engine: [p.metadata["pass_rate"] for p in read_problems(config.stage_dir("export") / "microcoder-dataset.jsonl")]
             for engine, config in configs.items()}
    assert rates["ray"] == rates["local"] and len(rates["ray"]) == 2
