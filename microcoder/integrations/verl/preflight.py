"""Checks a verl run of MicroCoder-GRPO in seconds, before vLLM starts.

    python -m microcoder.integrations.verl.preflight CONFIG.yaml [key=value ...] [--timeout S]

CONFIG is a verl config file (examples/verl/microcoder_qwen3_1.7b_4k.yaml); key=value
overrides are the ones the run gets. Exit status 0 when every check passes, 1 otherwise,
each failure naming the config key (or the environment) at fault. What it checks:

In this process, from the config alone (no Ray; fails before anything starts):
  - algorithm: adv_estimator is microcoder_grpo; no KL in the reward; no DAPO
    filter_groups on metric "reward"; no rollout_correction.rollout_rs outside bypass mode
    (`advantage.refused_algorithm_settings` says why each corrupts the input);
    algorithm.microcoder.rho in [0, 1]
  - actor_rollout_ref.rollout.n >= 2 (a group of one has advantage 0)
  - reward.reward_manager is MicroCoderRewardManager and custom_reward_function is set
In a Ray task, with Ray started as verl's main_ppo starts it (its runtime env and
`ray_kwargs.ray_init`), so in the environment verl's actors get:
  - verl imports and `algorithm.adv_estimator` resolves to our estimator (verl loads its
    `verl.plugins` entry points on import and hides a failure at debug level; this names it)
  - TransferQueue imports when trainer.use_v1 (the v1 trainer's store)
  - no flush-to-zero: a coded 0 reward (a float32 denormal) survives verl's float32 rm_scores
  - the tokenizer loads from actor_rollout_ref.model.path (or .tokenizer_path), as verl's
    reward worker loads it
  - the configured reward path: verl's `load_reward_manager` builds our manager from the
    config, which judges a correct and a wrong answer to a built-in problem (tokenized,
    EOS-terminated) with the configured reward_kwargs; the rewards go through verl's
    AgentLoopOutput.as_dict and compute_advantage with the config's algorithm node: the
    correct answer must get a positive advantage and the wrong one a negative
  - data.train_files and data.val_files read; every row that names its problem by
    reference resolves in reward_kwargs.problems_files with the digest it pins; the first
    inline problem parses
Not checked: anything on a GPU (vLLM, the model's weights, FSDP), the agent loop, and
other nodes than the one the Ray task lands on.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from microcoder.algorithms.masking import DEFAULT_RHO
from microcoder.integrations.verl.advantage import ESTIMATOR_NAME, refused_algorithm_settings

OUR_MANAGER = "MicroCoderRewardManager"
OUR_MANAGER_PATH = "pkg://microcoder.integrations.verl.reward_manager"
OUR_ESTIMATOR_MODULE = "microcoder.integrations.verl.advantage"

# The built-in problem judged by the reward-path check, and two answers as a model writes them.
SUM_TESTS = [("1 2\n", "3\n"), ("10 -4\n", "6\n"), ("0 0\n", "0\n")]
CORRECT_ANSWER = "The answer is the sum.\n\n```python\na, b = map(int, input().split())\nprint(a + b)\n```\n"
WRONG_ANSWER = "The answer is the difference.\n\n```python\na, b = map(int, input().split())\nprint(a - b)\n```\n"


@dataclass
class Check:
    """One check's outcome: its name, whether it passed, and what it found."""

    name: str
    passed: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.name}: {self.detail}"


def compose_config(config_file: str | Path, overrides: Sequence[str] = ()) -> Any:
    """The run's config as verl's main_ppo composes it (Hydra, the file's folder as config dir)."""
    from hydra import compose, initialize_config_dir

    path = Path(config_file).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"config file {config_file} not found")
    with initialize_config_dir(config_dir=str(path.parent), version_base=None):
        return compose(config_name=path.stem, overrides=list(overrides))


# ---- in this process, from the config alone ----------------------------------------------------

def config_checks(config: Any) -> list[Check]:
    """The checks that need only the config (see the module docstring)."""
    algorithm = config.algorithm
    checks = [Check("algorithm.adv_estimator", algorithm.adv_estimator == ESTIMATOR_NAME,
                    f"{algorithm.adv_estimator}" + ("" if algorithm.adv_estimator == ESTIMATOR_NAME
                                                    else f": this preflight checks {ESTIMATOR_NAME} runs"))]
    refused = refused_algorithm_settings(algorithm)
    checks += [Check("algorithm (refused settings)", False, message) for message in refused]
    if not refused:
        checks.append(Check("algorithm (refused settings)", True,
                            "no KL in the reward, no filter_groups on 'reward', no rollout_rs outside bypass mode"))
    rho = (algorithm.get("microcoder") or {}).get("rho", DEFAULT_RHO)
    checks.append(Check("algorithm.microcoder.rho", 0.0 <= float(rho) <= 1.0, f"{rho}"))
    n = int(config.actor_rollout_ref.rollout.n)
    checks.append(Check("actor_rollout_ref.rollout.n", n >= 2,
                        f"{n}" + ("" if n >= 2 else ": a group of one response has advantage 0; use 2 or more")))
    manager = config.reward.reward_manager
    module_path = (manager.get("module") or {}).get("path")
    ours = (manager.get("source"), manager.get("name"), module_path) == ("importlib", OUR_MANAGER, OUR_MANAGER_PATH)
    checks.append(Check("reward.reward_manager", ours,
                        f"{manager.get('name')} from {module_path}" + ("" if ours else
                        f": set source=importlib, name={OUR_MANAGER}, module.path={OUR_MANAGER_PATH}")))
    function = config.reward.get("custom_reward_function") or {}
    checks.append(Check("reward.custom_reward_function.path", bool(function.get("path")),
                        f"{function.get('path')}:{function.get('name')}" if function.get("path") else
                        "not set: verl would pass its default_compute_score, which knows nothing of our problems"))
    return checks


# ---- in a Ray worker ---------------------------------------------------------------------------

def flush_to_zero_check() -> Check:
    """Whether a coded 0 reward (a float32 denormal) keeps its bits on verl's way to rm_scores."""
    import numpy as np
    import torch

    from microcoder.integrations.verl.score_bits import MARKER_BIT, QUALIFYING_BIT, encode_score

    expected = MARKER_BIT | QUALIFYING_BIT  # the bits of a coded, qualifying 0
    coded_zero = encode_score(0.0, qualifying=True)  # under DAZ this already reads as 0.0
    as_torch = int(torch.tensor([coded_zero], dtype=torch.float32).view(torch.int32).item())  # as verl's agent loop
    as_numpy = int(np.array([coded_zero], dtype=np.float32).view(np.int32)[0])
    survived = as_torch == expected and as_numpy == expected
    return Check("flush-to-zero", survived,
                 f"a coded 0 reward ({coded_zero:.3g}) keeps its bits in float32" if survived else
                 f"flush-to-zero (FTZ/DAZ) is on in this Ray worker: a coded 0 reward is stored as {coded_zero:.3g} "
                 f"(float32 bits: torch {as_torch:#x}, numpy {as_numpy:#x}, want {expected:#x}), which erases the "
                 "truncation mask's facts. Something in the process turned it on (torch.set_flush_denormal(True), "
                 "a library built with -ffast-math): remove it")


def estimator_check(config: Any) -> Check:
    """verl's registry resolves algorithm.adv_estimator to our estimator in this process."""
    import importlib
    from importlib.metadata import entry_points

    name = config.algorithm.adv_estimator
    try:
        import verl  # noqa: F401  (loads the verl.plugins entry points)
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn

        function = get_adv_estimator_fn(name)
    except Exception as error:  # noqa: BLE001 - report why, as precisely as we can
        names = [point.name for point in entry_points(group="verl.plugins")]
        policy = os.environ.get("VERL_USE_EXTERNAL_PLUGINS", "auto")
        why = f"verl.plugins entry points here: {names or 'none'}; VERL_USE_EXTERNAL_PLUGINS={policy}"
        if "microcoder" not in names:
            why += " (microcoder is not installed in this environment: pip install -e '.[verl]')"
        else:
            try:
                importlib.import_module("microcoder.integrations.verl.plugin")
            except Exception as plugin_error:  # noqa: BLE001
                why += f"; importing the plugin raises {type(plugin_error).__name__}: {plugin_error}"
        return Check("algorithm.adv_estimator resolves", False,
                     f"{name} is not registered in a Ray worker ({type(error).__name__}: {error}); {why}")
    ours = function.__module__ == OUR_ESTIMATOR_MODULE
    return Check("algorithm.adv_estimator resolves", ours, f"{name} -> {function.__module__}.{function.__name__}"
                 + ("" if ours else f": another estimator took the name {name!r}"))


def transfer_queue_check(config: Any) -> Check | None:
    if not config.trainer.get("use_v1", False):
        return None
    try:
        import transfer_queue  # noqa: F401
    except ImportError as error:
        return Check("TransferQueue", False,
                     f"trainer.use_v1 needs TransferQueue (pip install TransferQueue==0.1.11): {error}")
    return Check("TransferQueue", True, "imports (trainer.use_v1)")


def load_tokenizer(config: Any) -> Any:
    """The tokenizer as verl's reward worker loads it."""
    from verl.utils import hf_tokenizer
    from verl.utils.fs import copy_to_local

    model = config.actor_rollout_ref.model
    return hf_tokenizer(copy_to_local(model.get("tokenizer_path") or model.path), trust_remote_code=True)


def agent_loop_session(tokenizer: Any, ground_truth: str, answer: str,
                       problem_id: str = "preflight/sum") -> tuple[Any, list[int], list[int]]:
    """(one agent-loop session of one output as verl's agent loop hands it to the reward
    worker, its prompt ids, its response ids ending with EOS)."""
    import numpy as np
    import torch
    from verl import DataProto

    prompt_ids = tokenizer.encode("Add two integers read from stdin.")
    response_ids = tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]
    return DataProto.from_dict(
        tensors={"prompts": torch.tensor([prompt_ids]), "responses": torch.tensor([response_ids]),
                 "attention_mask": torch.ones(1, len(prompt_ids) + len(response_ids), dtype=torch.int64)},
        non_tensors={"data_source": np.array(["microcoder/preflight"], dtype=object),
                     "reward_model": np.array([{"style": "rule", "ground_truth": ground_truth}], dtype=object),
                     "extra_info": np.array([{"split": "preflight", "index": 0, "problem_id": problem_id}],
                                            dtype=object),
                     "__num_turns__": np.array([2])}), prompt_ids, response_ids


def reward_path_checks(config: Any) -> list[Check]:
    """The configured reward path on a correct and a wrong answer, through to verl's compute_advantage."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
    from verl.trainer.ppo.ray_trainer import compute_advantage
    from verl.trainer.ppo.reward import load_reward_manager

    from microcoder.integrations.verl import reward
    from microcoder.integrations.verl.advantage import coded_rewards
    from microcoder.integrations.verl.score_bits import decode_scores
    from microcoder.problems import Problem, TestCase

    try:
        tokenizer = load_tokenizer(config)
    except Exception as error:  # noqa: BLE001
        return [Check("tokenizer", False, f"cannot load it from actor_rollout_ref.model.path="
                      f"{config.actor_rollout_ref.model.path}: {type(error).__name__}: {error}")]
    checks = [Check("tokenizer", True, f"{type(tokenizer).__name__}, EOS id {tokenizer.eos_token_id}")]
    try:
        manager = load_reward_manager(config, tokenizer)
    except Exception as error:  # noqa: BLE001
        return checks + [Check("reward manager", False, f"verl's load_reward_manager: {type(error).__name__}: {error}")]
    checks.append(Check("reward manager", type(manager).__name__ == OUR_MANAGER,
                        f"{type(manager).__module__}.{type(manager).__name__}"))
    problem = Problem(id="preflight/sum", kind="stdin", prompt="Print the sum of two integers read from stdin.",
                      tests=[TestCase(input=given, output=expected) for given, expected in SUM_TESTS])
    outputs, verdicts = [], []
    started = time.monotonic()
    try:
        for answer, expected in ((CORRECT_ANSWER, "accepted"), (WRONG_ANSWER, "wrong_answer")):
            data, prompt_ids, response_ids = agent_loop_session(tokenizer, problem.model_dump_json(), answer)
            out = manager.loop.run_until_complete(manager.run_single(data))
            info = out["reward_extra_info"]
            verdicts.append(f"{info['verdict']} (want {expected})")
            if info["verdict"] != expected:
                checks.append(Check("reward path: judge", False, f"{info['verdict']} for an answer that is {expected}"
                                    + (f" ({info.get('error')})" if info.get("error") else "")))
                return checks
            outputs.append(AgentLoopOutput(prompt_ids=prompt_ids, response_ids=response_ids,
                                           response_mask=[1] * len(response_ids), metrics=AgentLoopMetrics(),
                                           reward_score=out["reward_score"]).as_dict())
    finally:
        reward.close_shared_evaluator()
    checks.append(Check("reward path: judge", True, f"{', '.join(verdicts)} in {time.monotonic() - started:.1f} s"))
    rm_scores = torch.nn.utils.rnn.pad_sequence([output["rm_scores"] for output in outputs], batch_first=True)
    mask = torch.nn.utils.rnn.pad_sequence([output["response_mask"] for output in outputs], batch_first=True)
    try:
        rewards, _, unscorable, _ = decode_scores(coded_rewards(rm_scores))  # as the estimator reads them
        batch = DataProto.from_dict(tensors={"token_level_rewards": rm_scores, "response_mask": mask},
                                    non_tensors={"uid": np.array(["preflight", "preflight"], dtype=object)})
        advantages = compute_advantage(batch, adv_estimator=config.algorithm.adv_estimator,
                                       norm_adv_by_std_in_grpo=config.algorithm.get("norm_adv_by_std_in_grpo", True),
                                       config=config.algorithm).batch["advantages"][:, 0]
    except Exception as error:  # noqa: BLE001
        checks.append(Check("reward path: advantage", False, f"{type(error).__name__}: {error}"))
        return checks
    signs_right = rewards.tolist() == [1.0, 0.0] and not bool(unscorable.any()) and advantages[0] > 0 > advantages[1]
    checks.append(Check("reward path: advantage", signs_right,
                        f"rewards {rewards.tolist()}, advantages {[round(a, 3) for a in advantages.tolist()]}"))
    return checks


def data_checks(config: Any) -> list[Check]:
    """The data files read, and their problems resolve (references with the digest they pin)."""
    import pyarrow.parquet as pq

    from microcoder.integrations.verl import reward
    from microcoder.integrations.verl.problem_store import parse_reference

    kwargs = (config.reward.get("custom_reward_function") or {}).get("reward_kwargs") or {}
    problems_files = kwargs.get("problems_files")
    checks = []
    for key in ("data.train_files", "data.val_files"):
        value = config.data.get(key.split(".")[1])
        if value is None:
            continue
        paths = [value] if isinstance(value, str) else list(value)
        references = inline = 0
        try:
            for path in paths:
                table = pq.read_table(path, columns=["reward_model"])
                for row, cell in enumerate(table.column("reward_model").to_pylist()):
                    ground_truth = cell["ground_truth"]
                    reference = parse_reference(ground_truth)
                    if reference is not None:
                        store = reward.problem_store(problems_files)
                        try:
                            store.locate(*reference)
                        except (KeyError, ValueError) as error:
                            raise ValueError(f"{path} row {row}: {error.args[0]}") from None
                        references += 1
                    else:
                        if inline == 0:
                            reward.parse_ground_truth(ground_truth)
                        inline += 1
        except Exception as error:  # noqa: BLE001
            checks.append(Check(key, False, f"{type(error).__name__}: {error}"))
            continue
        checks.append(Check(key, True, f"{len(paths)} file(s): {references} rows by reference, all found with their "
                                       f"digest in problems_files; {inline} inline"))
    return checks


def worker_checks(config: Any) -> list[Check]:
    """Every check that runs in a Ray worker (see the module docstring), in order."""
    checks = [estimator_check(config)]
    tq = transfer_queue_check(config)
    if tq is not None:
        checks.append(tq)
    checks.append(flush_to_zero_check())
    checks += reward_path_checks(config)
    checks += data_checks(config)
    return checks


def _remote_checks(config: Any) -> list[Check]:
    return worker_checks(config)


def ray_checks(config: Any, timeout_s: float) -> list[Check]:
    """`worker_checks` in a Ray task, Ray started as verl's main_ppo starts it (unless it runs)."""
    import ray
    from omegaconf import OmegaConf

    started_here = False
    if not ray.is_initialized():
        from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

        runtime_env = get_ppo_ray_runtime_env(config)
        ray_init = config.get("ray_kwargs", {}).get("ray_init", {}) or {}
        if config.get("transfer_queue", {}).get("enable", False):
            runtime_env.setdefault("env_vars", {})["TRANSFER_QUEUE_ENABLE"] = "1"
        merged = OmegaConf.merge(runtime_env, ray_init.get("runtime_env", {}) or {})
        kwargs = OmegaConf.to_container(OmegaConf.create({**ray_init, "runtime_env": merged}))
        ray.init(**kwargs, log_to_driver=False, include_dashboard=False)
        started_here = True
    try:
        task = ray.remote(num_cpus=1)(_remote_checks).remote(config)
        try:
            return ray.get(task, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            ray.cancel(task, force=True)
            return [Check("Ray task", False, f"did not finish in {timeout_s:.0f} s (no free CPU for one task? "
                                             "a reward_kwargs.evaluator_workers pool that cannot start?)")]
        except ray.exceptions.RayError as error:
            return [Check("Ray task", False, f"could not run ({type(error).__name__}): {error}; is microcoder "
                                             "installed in the Ray workers' environment?")]
    finally:
        if started_here:
            ray.shutdown()


def run(config: Any, timeout_s: float = 300.0) -> list[Check]:
    """All checks: the config's first (no Ray when one fails), then the Ray worker's."""
    checks = config_checks(config)
    if all(check.passed for check in checks):
        checks += ray_checks(config, timeout_s)
    return checks


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m microcoder.integrations.verl.preflight",
                                     description="Check a verl MicroCoder-GRPO config in seconds, before a run.")
    parser.add_argument("config", help="the verl config file (e.g. examples/verl/microcoder_qwen3_1.7b_4k.yaml)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, as given to verl.trainer.main_ppo")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the Ray task")
    args = parser.parse_args(argv)
    started = time.monotonic()
    checks = run(compose_config(args.config, args.overrides), args.timeout)
    for check in checks:
        print(check.line())
    failed = [check for check in checks if not check.passed]
    verdict = f"{len(failed)} of {len(checks)} checks failed" if failed else f"all {len(checks)} checks passed"
    print(f"preflight: {verdict} in {time.monotonic() - started:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
