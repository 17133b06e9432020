"""Stage 6, difficulty: source labels, an optional model pass rate, and two filters.

- The source's own label is normalised to `easy` / `medium` / `hard` (`normalised_label`:
  LeetCode's and LiveCodeBench's Easy/Medium/Hard, LeetCodeDataset's typo "Meidum" as
  medium, APPS's introductory/interview/competition); `metadata.difficulty_label` keeps
  the raw label and its scale. A label on no known scale leaves `difficulty` empty and
  is kept there with scale "unknown".
- With `estimate_pass_rate`, the model answers each problem `samples_per_problem`
  times (chat prompt from `render_prompt`, sampling from `policy.generation` with
  `backend`: under `auto` vLLM when it is installed and a GPU is present) and the
  evaluator judges every answer;
  `metadata.pass_rate = {"model", "n", "accepted", "rate"}`. Rates are cached per
  problem and model settings in `difficulty/pass_rates.jsonl`, written after each
  batch, so an interrupted estimate resumes where it stopped. Off by default: the CPU
  default model (SmolLM2-135M) is slow and solves almost nothing.
- Filters: a problem with an estimated rate outside `pass_rate_band` is removed
  ("too easy" above it, "too hard" below it); with `date_cutoff`, a problem dated before
  it is removed, and an undated one too unless `keep_undated`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from microcoder.data.config import PipelineConfig
from microcoder.data.stages import (Removal, StageContext, StageOutput, StageSink, passes_over, read_json_lines,
                                   sha256_of)
from microcoder.problems import Problem


LABEL_SCALES: dict[str, dict[str, str]] = {
    "easy/medium/hard": {"easy": "easy", "medium": "medium", "meidum": "medium", "hard": "hard"},
    "apps": {"introductory": "easy", "interview": "medium", "competition": "hard"},
}
"""Raw labels (casefolded) -> easy/medium/hard, per scale. "meidum" is LeetCodeDataset
v0.2.0-test's spelling of Medium (21 problems). APPS's levels are its own (introductory:
one-liners to simple loops; interview: LeetCode-medium-like; competition: contest problems)."""


def normalised_label(raw: str) -> tuple[str | None, str]:
    """(easy/medium/hard or None, the scale it was read on, or "unknown"). Pure."""
    key = raw.strip().casefold()
    for scale, labels in LABEL_SCALES.items():
        if key in labels:
            return labels[key], scale
    return None, "unknown"


def normalise_difficulty(problem: Problem) -> None:
    """Set `difficulty` to easy/medium/hard, the raw label and its scale in metadata
    (once: a label already normalised keeps its recorded raw label)."""
    if problem.difficulty is None or "difficulty_label" in problem.metadata:
        return
    label, scale = normalised_label(problem.difficulty)
    problem.metadata["difficulty_label"] = {"raw": problem.difficulty, "scale": scale}
    problem.difficulty = label


def passes_band(rate: float, band: list[float]) -> str | None:
    """None when `rate` lies in [low, high], else 'too easy' / 'too hard'."""
    low, high = band
    if rate > high:
        return "too easy (pass rate above band)"
    if rate < low:
        return "too hard (pass rate below band)"
    return None


def filter_by_difficulty(problems: Iterable[Problem], config: PipelineConfig, context: StageContext,
                         out: StageSink | None = None) -> StageSink:
    """The stage, one problem at a time. With `estimate_pass_rate` it reads `problems` (a
    list or a `StageInput`) three times: the cache keys, the batches the model samples (a
    few at a time), then the filter; what it holds across problems is the rate cache, one
    small record a problem."""
    out = StageOutput() if out is None else out
    settings = config.difficulty
    if len(settings.pass_rate_band) != 2 or settings.pass_rate_band[0] > settings.pass_rate_band[1]:
        raise ValueError(f"difficulty.pass_rate_band must be [low, high], got {settings.pass_rate_band}")
    # YAML reads an unquoted 2024-08-01 as a date: compare its text.
    cutoff = None if settings.date_cutoff is None else str(settings.date_cutoff)
    if cutoff is not None and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", cutoff):
        raise ValueError(f"difficulty.date_cutoff must be YYYY-MM-DD or null, got {settings.date_cutoff!r}")
    rated = _normalised(problems)
    if settings.estimate_pass_rate:
        rated = _with_pass_rates(passes_over(problems, "difficulty with estimate_pass_rate"), config, context)
    for problem in rated:
        rate = (problem.metadata.get("pass_rate") or {}).get("rate")
        verdict = passes_band(rate, settings.pass_rate_band) if rate is not None else None
        if verdict is not None:
            out.remove(Removal(problem.id, problem.source, "difficulty", verdict,
                               f"pass rate {rate:.2f} outside {settings.pass_rate_band}"))
        elif cutoff and problem.date and problem.date < cutoff:
            out.remove(Removal(problem.id, problem.source, "difficulty", "before date cutoff",
                               f"{problem.date} < {cutoff}"))
        elif cutoff and not problem.date and not settings.keep_undated:
            out.remove(Removal(problem.id, problem.source, "difficulty", "undated", f"no date; cutoff {cutoff}"))
        else:
            out.keep(problem)
    return out


def _normalised(problems: Iterable[Problem]) -> Iterator[Problem]:
    for problem in problems:
        normalise_difficulty(problem)
        yield problem


def _model_identity(config: PipelineConfig) -> dict[str, Any]:
    s = config.difficulty
    return {"model": s.model, "n": s.samples_per_problem, "max_new_tokens": s.max_new_tokens,
            "temperature": s.temperature, "seed": s.seed, "backend": s.backend, "time_limit_s": config.time_limit_s}


CALLS_AT_ONCE = 16
"""Batches handed to the generator together (a Ray engine's actors sample them side by side):
the problems held while the model samples are at most this many batches."""


def _with_pass_rates(problems: Iterable[Problem], config: PipelineConfig, context: StageContext) -> Iterator[Problem]:
    """`problems` (normalised), each with metadata.pass_rate, from the cache where possible.
    Three passes: the problems whose keys are not cached; the model on those, batch after batch in input
    order (the batches and their seeds those of the whole list), each batch's rates cached
    as it is judged; then every problem with its rate."""
    from microcoder.evaluator import Sample, stop_on_machine_fault

    settings = config.difficulty
    identity = _model_identity(config)
    cache_path = config.stage_dir("difficulty") / "pass_rates.jsonl"
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    cache = {record["key"]: record for record in read_json_lines(cache_path)}

    def key_of(problem: Problem) -> str:
        return sha256_of(identity, problem.model_dump(exclude={"metadata", "id"}))

    total = 0
    pending_ids: set[str] = set()
    for problem in _normalised(problems):
        total += 1
        if key_of(problem) not in cache:
            pending_ids.add(problem.id)
    step = max(1, settings.batch_size)
    generator = context.generator or _model_generator(config, context)
    with context.progress("difficulty: model pass rate", total) as advance:
        advance(total - len(pending_ids))
        pending = (problem for problem in _normalised(problems) if problem.id in pending_ids)
        for calls in _calls(pending, step, settings.seed, CALLS_AT_ONCE):
            for (batch, _), groups in zip(calls, _generations(generator, calls, settings)):
                samples = [Sample(p.id, response=g.text) for p, group in zip(batch, groups) for g in group]
                results = context.evaluator().evaluate(batch, samples)
                stop_on_machine_fault(results, "difficulty")  # a lost run is not a failed sample
                accepted: dict[str, int] = {p.id: 0 for p in batch}
                for result in results:
                    accepted[result.problem_id] += result.verdict == "accepted"
                with open(cache_path, "a", encoding="utf-8") as handle:
                    for problem in batch:
                        record = {"key": key_of(problem), "id": problem.id, "accepted": accepted[problem.id],
                                  "n": settings.samples_per_problem}
                        cache[record["key"]] = record
                        handle.write(json.dumps(record) + "\n")
                advance(len(batch))
    for problem in _normalised(problems):
        record = cache[key_of(problem)]
        problem.metadata["pass_rate"] = {"model": settings.model, "n": record["n"], "accepted": record["accepted"],
                                         "rate": record["accepted"] / record["n"]}
        yield problem


def _calls(pending: Iterable[Problem], step: int, seed: int, at_once: int) -> Iterator[list[tuple[list[Problem], int]]]:
    """The (batch, seed) calls of `pending`, `at_once` at a time: batches of `step` problems in
    order, each seeded with `seed` + the index of its first problem among all pending."""
    calls: list[tuple[list[Problem], int]] = []
    batch: list[Problem] = []
    start = 0
    for index, problem in enumerate(pending):
        if not batch:
            start = index
        batch.append(problem)
        if len(batch) == step:
            calls.append((batch, seed + start))
            batch = []
            if len(calls) == at_once:
                yield calls
                calls = []
    if batch:
        calls.append((batch, seed + start))
    if calls:
        yield calls


def _generations(generator: Any, calls: list[tuple[list[Problem], int]], settings) -> Iterator[list]:
    """Each batch's responses, in order: one `generate` call per (batch, seed), the seed the
    batch's own (`seed` + its first row), so a batch is sampled alike wherever it runs. A
    generator with `generate_batches` (the Ray engine's generation actors) gets the calls
    it is given (`CALLS_AT_ONCE`) together and samples several batches at a time."""
    n, max_new_tokens = settings.samples_per_problem, settings.max_new_tokens
    if hasattr(generator, "generate_batches"):
        yield from generator.generate_batches(calls, n, max_new_tokens)
        return
    for batch, seed in calls:
        yield generator.generate(batch, n, max_new_tokens, seed)


def _model_generator(config: PipelineConfig, context: StageContext | None = None):
    """The pass rate's model: here (`engine: local`), or under `engine: ray` on generation
    actors of the cluster (ray_engine.RayGenerator: one per GPU, one on CPU without GPUs)."""
    if context is not None and config.engine == "ray":
        from microcoder.data.ray_engine import RayGenerator

        context.evaluator()  # joins or starts the cluster
        return context.keep_open(RayGenerator(config, local_model_generator))
    return local_model_generator(config)


def local_model_generator(config: PipelineConfig):
    from microcoder.policy.generation import ModelGenerator
    from microcoder.policy.model import DEFAULT_MODEL, load_model_and_tokenizer

    settings = config.difficulty
    name = DEFAULT_MODEL if settings.model == "default" else settings.model
    model, tokenizer = load_model_and_tokenizer(name)
    return ModelGenerator(model, tokenizer, temperature=settings.temperature, batch_size=settings.batch_size,
                          backend=settings.backend)
