"""The configs of the policy's commands (`microcoder eval-model`), apart from the code
that runs them, so that the command line can build its options without loading torch."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, Field, model_validator

from microcoder.config_files import CommandConfig

Backend = Literal["auto", "hf", "vllm"]
"""Generation backends (microcoder.policy.generation)."""
BACKENDS: tuple[str, ...] = get_args(Backend)


def is_day(text: str) -> bool:
    """`text` is a day written YYYY-MM-DD."""
    try:
        datetime.date.fromisoformat(text)
    except (TypeError, ValueError):
        return False
    return len(text) == 10


def _day(text: str) -> str:
    if not is_day(text):
        raise ValueError(f"must be a date YYYY-MM-DD, got {text!r}")
    return text


Day = Annotated[str, AfterValidator(_day)]
"""A day, YYYY-MM-DD."""


class ModelEvalConfig(CommandConfig):
    """Settings of `microcoder eval-model`."""

    model: str = "smollm2-135m-instruct"
    """Checkpoint directory or hub id; the default is the embedded SmolLM2-135M-Instruct."""
    problems: str = "default"
    """Canonical problems JSONL, a LiveCodeBench release file, or 'default' (the held-out split of the default problems)."""
    out: Path = Path("eval")
    """Output directory (created; run again with the same settings to resume it)."""
    n: int = Field(4, ge=1)
    """Samples per problem; pass@1 is estimated from all n."""
    max_new_tokens: tuple[Annotated[int, Field(ge=1)], ...] = Field((512,), min_length=1)
    """Response-length limits to report (several: sampled once at the largest)."""
    temperature: float = Field(0.6, ge=0)
    """Sampling temperature. 0.6 with top_p 0.95 is Qwen3's recommended setting and the
    common LiveCodeBench one; the paper does not state its own."""
    top_p: float = Field(0.95, gt=0, le=1)
    """Nucleus sampling mass."""
    seed: int = 0
    """Sampling seed."""
    problems_seed: int = 0
    """With problems 'default': the seed of the train/held-out split (the training run's `seed`)."""
    batch_size: int = Field(16, ge=1)
    """Sequences per generation batch."""
    problems_per_chunk: int = Field(8, ge=1)
    """Problems generated and judged between two writes (the unit of resumption)."""
    workers: int = Field(0, ge=0)
    """Evaluator parallel runs; 0 = one per usable core."""
    backend: Backend = "auto"
    """Generation backend: auto, hf or vllm (see microcoder.policy.generation)."""
    since: Day | None = None
    """Keep only problems dated on or after this day, YYYY-MM-DD (LiveCodeBench: the contest date); undated problems go too."""
    until: Day | None = None
    """Keep only problems dated on or before this day, YYYY-MM-DD, inclusive."""
    strict_judge: bool = True
    """Also judge every sample by the strict judge (LiveCodeBench's comparison rules) and
    report its pass@1 beside the robust one; costs a second judging pass, no generation."""

    @model_validator(mode="after")
    def _window_in_order(self) -> ModelEvalConfig:
        if self.since and self.until and self.since > self.until:
            raise ValueError(f"since {self.since} is after until {self.until}")
        return self

    @property
    def lengths(self) -> list[int]:
        """The distinct lengths, ascending."""
        return sorted(set(self.max_new_tokens))

    def identity(self) -> dict:
        """What the rows depend on; a resumed run must match it. `strict_judge` is named only
        when on, so a directory judged by one judge resumes with --no-strict-judge."""
        identity = {"model": self.model, "problems": self.problems, "problems_seed": self.problems_seed, "n": self.n,
                    "max_new_tokens": self.lengths, "temperature": self.temperature, "top_p": self.top_p,
                    "seed": self.seed, "since": self.since, "until": self.until}
        return identity | ({"strict_judge": True} if self.strict_judge else {})
