"""A sandbox worker that dies under a run is the machine's fault, not the program's.

The OOM killer, an operator or a shutdown can kill a worker while it runs a program.
Such a death is retried once on a fresh worker (the true verdict), and a run whose worker
dies on every try is a `sandbox_error` (a judge_error to the evaluator: no verdict, no
reward) where runs cannot signal their worker (a uid of their own). Where runs share the
worker's uid, a program that kills its worker on a fresh one again is taken to be doing
it itself: `runtime_error`. Each case kills real workers with SIGKILL from outside.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from microcoder.evaluator.cache import VerdictCache
from microcoder.evaluator.isolation import isolation_plan
from microcoder.evaluator.sandbox import WORKER_DEATHS_PER_RUN, Sandbox, SandboxConfig
from tests.helpers import stdin_problem

SLOW_HONEST = "import time\ntime.sleep(0.6)\nprint(sum(map(int, input().split())))\n"
OWN_UID = isolation_plan("auto").switch_uid
needs_own_uid = pytest.mark.skipif(not OWN_UID, reason="needs root: runs with a uid of their own")


def children(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []


class WorkerKiller(threading.Thread):
    """SIGKILLs, from outside, each worker of `sandbox` seen running a program, `times` times."""

    def __init__(self, sandbox: Sandbox, times: int):
        super().__init__(daemon=True)
        self.sandbox, self.times, self.killed = sandbox, times, []

    def run(self) -> None:
        give_up = time.monotonic() + 30
        while len(self.killed) < self.times and time.monotonic() < give_up:
            for worker in list(self.sandbox._all):
                pid = worker.process.pid
                if pid not in self.killed and worker.alive and children(pid):
                    time.sleep(0.1)  # well inside the run's 0.6 s sleep
                    os.kill(pid, signal.SIGKILL)
                    self.killed.append(pid)
                    break
            time.sleep(0.01)


def run_while_killing(sandbox: Sandbox, source: str, times: int, stdin: str = "1 2"):
    sandbox.run("pass")  # the worker is started and warm before the killer watches
    killer = WorkerKiller(sandbox, times)
    killer.start()
    run = sandbox.run(source, stdin, time_limit_s=2.0)
    killer.join(5)
    return run, killer.killed


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_a_worker_killed_once_from_outside_is_retried_on_a_fresh_one(isolation):
    with Sandbox(config=SandboxConfig(workers=1, isolation=isolation)) as sandbox:
        run, killed = run_while_killing(sandbox, SLOW_HONEST, times=1)
        assert len(killed) == 1
        assert (run.status, run.stdout) == ("ok", b"3\n"), run
        assert sandbox.run("print(7)").stdout == b"7\n"


@needs_own_uid
def test_a_worker_killed_on_every_try_is_a_sandbox_error_where_runs_cannot_signal_it():
    with Sandbox(config=SandboxConfig(workers=1)) as sandbox:
        run, killed = run_while_killing(sandbox, SLOW_HONEST, times=WORKER_DEATHS_PER_RUN)
        assert len(killed) == WORKER_DEATHS_PER_RUN
        assert run.status == "sandbox_error" and run.machine_fault, run
        assert "SIGKILL" in run.detail and "not the program's fault" in run.detail
        assert sandbox.run("print(7)").stdout == b"7\n"


@needs_own_uid
def test_through_the_evaluator_a_killed_worker_is_a_judge_error_never_cached():
    problem = stdin_problem([("1 2", "3")], problem_id="add", time_limit_s=2.0)
    cache = VerdictCache()
    with Evaluator(EvaluatorConfig(workers=1)) as evaluator:
        evaluator.sandbox.run("pass")
        killer = WorkerKiller(evaluator.sandbox, WORKER_DEATHS_PER_RUN)
        killer.start()
        [result], _ = cache.evaluate(evaluator, [problem], [Sample("add", code=SLOW_HONEST)])
        killer.join(5)
        assert result.verdict == "judge_error" and result.reward == 0.0, result
        assert "sandbox worker died" in result.detail
        [again], [from_cache] = cache.evaluate(evaluator, [problem], [Sample("add", code=SLOW_HONEST)])
        assert (again.verdict, from_cache) == ("accepted", False)


def test_a_program_that_kills_its_own_worker_every_time_is_its_runtime_error():
    # Only where runs share the worker's uid can a program signal it (isolation "none").
    suicide = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint(3)\n"
    with Sandbox(config=SandboxConfig(workers=1, isolation="none")) as sandbox:
        run = sandbox.run(suicide, "1 2")
        assert run.status == "runtime_error" and not run.machine_fault, run
        assert f"on {WORKER_DEATHS_PER_RUN} fresh workers" in run.detail and "SIGKILL" in run.detail
        assert sandbox.run("print(7)").stdout == b"7\n"


@needs_own_uid
def test_where_runs_have_their_own_uid_a_program_cannot_kill_its_worker():
    suicide = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint(3)\n"
    with Sandbox(config=SandboxConfig(workers=1)) as sandbox:
        run = sandbox.run(suicide, "1 2")
        assert run.status == "runtime_error" and "PermissionError" in run.detail, run


def test_a_machine_fault_in_the_data_builds_reference_run_stops_the_stage_and_is_not_cached(monkeypatch, tmp_path):
    # amplify asks the sandbox for the reference's answer to each generated input and caches
    # it: a worker killed under that run must stop the stage, not become a cached answer
    # ("reference sandbox_error") that drops the input now and on every rerun.
    from microcoder.data import amplify
    from microcoder.evaluator.sandbox import ProgramRun, SandboxFault

    fault = ProgramRun("sandbox_error", detail="its sandbox worker died under it 2 times", machine_fault=True)

    class FaultySandbox:
        def run(self, *args, **kwargs):
            return fault

    class Context:
        def evaluator(self):
            return type("E", (), {"sandbox": FaultySandbox(), "config": EvaluatorConfig()})()

    problem = stdin_problem([("1", "1")], problem_id="p").model_copy(
        update={"kind": "call", "entry_point": "f", "metadata": {"reference_solution": "def f(x):\n    return x\n"}})
    with pytest.raises(SandboxFault, match="could not run p's reference"):
        amplify._answer(Context(), problem, "1", 1.0)


def stage_stopped_by_killed_workers(context, stage: str, run_stage) -> None:
    """`run_stage()` with each worker that runs a program killed, on every try: it must stop
    with the one-line machine fault naming the problem `add`."""
    from microcoder.evaluator.sandbox import SandboxFault

    context.evaluator().sandbox.run("pass")  # started and warm before the killer watches
    killer = WorkerKiller(context.evaluator().sandbox, WORKER_DEATHS_PER_RUN)
    killer.start()
    with pytest.raises(SandboxFault, match=f"{stage} stopped: the machine failed a run of add"):
        run_stage()
    killer.join(5)
    assert len(killer.killed) == WORKER_DEATHS_PER_RUN


@needs_own_uid
def test_a_worker_killed_under_validates_reference_run_stops_the_stage_and_caches_nothing(tmp_path):
    # The reference's judge_error from the machine would otherwise be cached as the
    # problem's failure, and the problem removed on this build and every rerun.
    from microcoder.data.config import PipelineConfig
    from microcoder.data.stages import StageContext
    from microcoder.data.validate import validate_problems

    problem = stdin_problem([("1 2", "3")], problem_id="add", time_limit_s=2.0).model_copy(
        update={"source": "test", "metadata": {"reference_solution": SLOW_HONEST}})
    config = PipelineConfig(sources=[], progress=False, work_dir=str(tmp_path), workers=1)
    config.stage_dir("validate").mkdir(parents=True)
    cache = config.stage_dir("validate") / "reference_verdicts.jsonl"
    context = StageContext(config)
    try:
        stage_stopped_by_killed_workers(context, "validate", lambda: validate_problems([problem], config, context))
        assert not cache.exists() or cache.read_text() == ""
        kept = validate_problems([problem], config, context).problems  # the rerun judges it afresh
        assert [p.id for p in kept] == ["add"]
    finally:
        context.close()


def test_a_machine_fault_is_in_a_results_json_only_when_there_is_one():
    import json

    from microcoder.evaluator import EvaluationResult

    common = {"problem_id": "p", "sample_index": 0, "verdict": "judge_error", "reward": 0.0, "tests_passed": 0,
              "tests_run": 1, "tests_total": 1, "seconds": 0.1}
    assert "machine_fault" not in json.loads(EvaluationResult(**common).to_json())
    assert json.loads(EvaluationResult(**common, machine_fault=True).to_json())["machine_fault"] is True


@needs_own_uid
def test_a_worker_killed_under_a_pass_rate_sample_stops_the_stage_and_caches_no_rate(tmp_path):
    # A lost run counted as a failed sample would lower the problem's cached pass rate.
    from microcoder.data.config import PipelineConfig
    from microcoder.data.difficulty import filter_by_difficulty
    from microcoder.data.stages import StageContext
    from microcoder.policy.generation import GeneratedText

    class HonestGenerator:
        def generate(self, batch, n, max_new_tokens, seed):
            return [[GeneratedText([], f"```python\n{SLOW_HONEST}```", False)] * n for _ in batch]

    problem = stdin_problem([("1 2", "3")], problem_id="add", time_limit_s=2.0).model_copy(update={"source": "test"})
    config = PipelineConfig(sources=[], progress=False, work_dir=str(tmp_path), workers=1)
    config.difficulty.estimate_pass_rate, config.difficulty.samples_per_problem = True, 1
    config.stage_dir("difficulty").mkdir(parents=True)
    context = StageContext(config, generator=HonestGenerator())
    try:
        stage_stopped_by_killed_workers(context, "difficulty", lambda: filter_by_difficulty([problem], config, context))
        rates = config.stage_dir("difficulty") / "pass_rates.jsonl"
        assert not rates.exists() or rates.read_text() == ""
        [kept] = filter_by_difficulty([problem], config, context).problems  # the rerun samples it afresh
        assert kept.metadata["pass_rate"]["accepted"] == 1
    finally:
        context.close()
