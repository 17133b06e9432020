"""The judge inside a real Ray actor: verl's own RewardLoopWorker, made a `ray.remote` actor as
verl's RewardLoopManager makes it, built from the example config (our manager, our reward
function, problems by reference, a tiny byte-level tokenizer), called as the agent loop calls
it, on a local Ray (2 CPUs) while two busy processes load the machine.

It checks what only a real actor shows: verdicts and coded rewards that come back through
Ray; the sandbox's isolation (a program does not see the actor's environment) and its
wall-clock backstop (a program that sleeps is stopped) there; a reward function that
raises (a problem edited after the conversion) reported as a judge_error with the reason,
not as a failed session; and no sandbox process left once the actor is killed.

Needs verl: `bash scripts/test_verl.sh` runs this; in the main environment it skips.
"""

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("verl", reason="verl 0.9.1 is not installed here: run `bash scripts/test_verl.sh`")

import ray  # noqa: E402
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker  # noqa: E402
from verl.utils import hf_tokenizer  # noqa: E402

from microcoder.integrations.verl.preflight import CORRECT_ANSWER, WRONG_ANSWER, agent_loop_session  # noqa: E402
from microcoder.integrations.verl.problem_store import problem_reference  # noqa: E402
from microcoder.integrations.verl.score_bits import decode_scores  # noqa: E402
from tests.helpers import stdin_problem  # noqa: E402
from tests.test_integrations_verl_estimator import example_config  # noqa: E402
from tests.test_integrations_verl_preflight import tiny_checkpoint  # noqa: E402

SUM = stdin_problem([("1 2\n", "3\n"), ("10 -4\n", "6\n")], problem_id="sum", source="tests", time_limit_s=1.0)
EDITED_SUM = stdin_problem([("1 2\n", "4\n")], problem_id="sum", source="tests", time_limit_s=1.0)
SECRET = "MICROCODER_RAY_TEST_SECRET"
SLEEPER = "```python\nimport time\ntime.sleep(60)\n```\n"
ENV_PROBE = f"```python\nimport os\nprint(os.environ.get('{SECRET}', 'absent'))\n```\n"


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    """verl's RewardLoopWorker as a Ray actor (1 CPU) with the example config, a secret in its
    env; once it is up, two busy processes load the machine until the module ends."""
    directory = tmp_path_factory.mktemp("ray_reward")
    problems = directory / "problems.jsonl"
    problems.write_text(SUM.model_dump_json() + "\n")
    config = example_config(
        f"actor_rollout_ref.model.path={tiny_checkpoint(directory / 'model')}",
        "reward.custom_reward_function.reward_kwargs.evaluator_workers=2",
        f"reward.custom_reward_function.reward_kwargs.problems_files=['{problems}']")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        actor = ray.remote(RewardLoopWorker).options(
            num_cpus=1, runtime_env={"env_vars": {SECRET: "s3cret"}}).remote(config, None)
        tokenizer = hf_tokenizer(config.actor_rollout_ref.model.path)  # the one the actor loaded
        assert alive_actor(actor, timeout=300)  # constructed: verl imported, our manager loaded
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
        try:
            yield actor, tokenizer, problems
        finally:
            for burner in burners:
                burner.kill()
                burner.wait()
        if alive_actor(actor):
            ray.kill(actor)
    finally:
        ray.shutdown()


def alive_actor(actor, timeout=30) -> bool:
    try:
        ray.get(actor.__ray_call__.remote(lambda self: True), timeout=timeout)
        return True
    except ray.exceptions.RayError:
        return False


def judge(actor, tokenizer, answer, ground_truth=None):
    """(reward_extra_info, decoded (reward, qualifying, unscorable), seconds) for one session."""
    data, _, _ = agent_loop_session(tokenizer, ground_truth or problem_reference(SUM), answer, problem_id="sum")
    started = time.monotonic()
    out = ray.get(actor.compute_score.remote(data), timeout=300)
    seconds = time.monotonic() - started
    rewards, qualifying, unscorable, _ = decode_scores(torch.tensor([out["reward_score"]], dtype=torch.float32))
    return out["reward_extra_info"], (rewards.item(), bool(qualifying[0]), bool(unscorable[0])), seconds


def test_correct_and_wrong_answers_come_back_judged_and_coded(worker):
    actor, tokenizer, _ = worker
    info, decoded, _ = judge(actor, tokenizer, CORRECT_ANSWER)
    assert (info["verdict"], decoded) == ("accepted", (1.0, False, False))
    info, decoded, _ = judge(actor, tokenizer, WRONG_ANSWER)
    assert (info["verdict"], decoded) == ("wrong_answer", (0.0, False, False))
    assert info["error"] == "" and info["acc_scored"] == 0.0


def test_the_sandbox_hides_the_actors_environment(worker):
    actor, tokenizer, _ = worker
    assert ray.get(actor.__ray_call__.remote(lambda self: os.environ.get(SECRET))) == "s3cret"
    info, _, _ = judge(actor, tokenizer, ENV_PROBE)
    # the program ran (a verdict on its output, not a crash) and printed "absent", not the secret
    assert info["verdict"] == "wrong_answer"
    # the same probe against an expected "absent" passes: the output really was "absent"
    probe = stdin_problem([("", "absent\n")], problem_id="probe", source="tests")
    info, _, _ = judge(actor, tokenizer, ENV_PROBE, ground_truth=probe.model_dump_json())
    assert info["verdict"] == "accepted"


def test_a_sleeping_program_is_stopped_by_the_wall_clock(worker):
    actor, tokenizer, _ = worker
    info, decoded, seconds = judge(actor, tokenizer, SLEEPER)
    assert info["verdict"] == "time_limit_exceeded" and decoded == (0.0, False, False)
    assert seconds < 30, seconds  # backstop: 3 x 1 s + 1 s per test, far below the 60 s sleep


def test_a_raising_reward_function_is_reported_as_a_judge_error(worker):
    """The problems file now holds another 'sum' than the row pins: compute_score raises in the
    actor; the manager reports a judge_error with the reason instead of failing the session."""
    actor, tokenizer, problems = worker
    stale = problem_reference(EDITED_SUM)  # a row written from an older version of the file
    info, decoded, _ = judge(actor, tokenizer, CORRECT_ANSWER, ground_truth=stale)
    assert info["verdict"] == "judge_error" and info["unscorable"] is True and info["acc_scored"] is None
    assert "problem 'sum': the dataset row pins sha256" in info["error"]
    reward, qualifying, unscorable = decoded
    assert math.isnan(reward) and unscorable and not qualifying  # out of its group's mean and std


def test_no_sandbox_process_outlives_the_actor(worker):
    actor, tokenizer, _ = worker
    judge(actor, tokenizer, CORRECT_ANSWER)  # the pool is up
    pid = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))
    below = descendants(pid)
    assert below, "the actor should have sandbox workers"
    ray.kill(actor)  # SIGKILL: no atexit, no close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(child) for child in below | {pid}):
        time.sleep(0.2)
    assert not any(alive(child) for child in below | {pid}), [child for child in below if alive(child)]
