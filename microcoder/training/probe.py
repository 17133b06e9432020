"""`microcoder temperature-probe`: choose the sampling temperature by response diversity.

The paper's rule: "the lowest temperature whose initial diversity is at or above the
diversity training will converge to", avoiding the wild swings of too-high temperatures.
Diversity falls during training at a fixed temperature; a run that starts below the
level it would converge to collapses, and needlessly high temperatures are unstable.

How we apply it before training (choices of ours; the paper gives no numbers):
- Diversity is `microcoder.algorithms.group_diversity` (mean pairwise Jaccard distance of
  4-gram sets, 0..1) of n responses per probe prompt, averaged over the probe prompts:
  the same measure the trainer logs as `diversity` (docs/training.md says how, in words).
- The convergence diversity is not known before training, so it is an input: the
  `target`, either the diversity a pilot run of the same model and data settled at
  (`--target-from RUN_DIR`: the mean over the last quarter of its logged steps) or a
  number (`--target-diversity`). There is no default: the trainer's
  `adaptive_diversity_floor` (0.3), the default before, sits below what the default model
  measures at every candidate, so it chose the lowest candidate every time and decided
  nothing. Without a target the probe measures and prints the table, chooses nothing, and
  says how to give one (the command exits 1).
  For scale: SmolLM2-135M-Instruct on 4 easy prompts, 6 responses of <= 128 tokens,
  measured 0.76 (std across prompts 0.05) already at T=0.4, because it follows its code
  with prose that differs from sample to sample; at T=1.6 (4 responses of <= 96 tokens)
  0.997 with std 0.004, every response cut off and gibberish. So the spread bound alone
  does not catch a too-high temperature (noise is uniformly diverse); the ceiling does.
- "Wild swings" are read as disagreement between prompts: a temperature whose per-prompt
  diversities spread widely (population std above `max_spread`) behaves erratically
  (coherent on some prompts, degenerate on others) and is refused, as is one whose mean
  diversity is above `max_diversity`, where responses share almost no 4-gram: noise, not
  alternative solutions.
- The probe prompts are the training problems (a seeded sample of `num_prompts`), with
  the training prompt template, so the diversity is the one training starts from. Every
  temperature samples with the same seed (common random numbers: differences between
  temperatures are less noisy).

`choose_temperature` is the rule as a pure function; `measure_diversity` samples and
measures; `run_probe` measures and applies the rule; `write_training_config` turns a chosen T
into a training config (`--write-config`): the base config with `temperature_stages:
[[0, T]]` under staged control.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import Field
from rich.console import Console
from rich.table import Table

from microcoder.config_files import CommandConfig
from microcoder.policy.config import Backend

DEFAULT_TEMPERATURES = (0.6, 0.8, 1.0, 1.2)
# Our bounds, no paper numbers behind them: the measured spread of a steady model is ~0.05
# (see above), so 0.2 is four times that; SmolLM2 at T=1.6 and a random-init model
# measure 0.997 and 1.0 (noise), a coherent T=0.4 0.76.
DEFAULT_MAX_SPREAD = 0.2
DEFAULT_MAX_DIVERSITY = 0.97


def choose_temperature(
    diversity_by_t: Mapping[float, Sequence[float]],
    target: float,
    max_spread: float = DEFAULT_MAX_SPREAD,
    max_diversity: float = DEFAULT_MAX_DIVERSITY,
) -> tuple[float, str]:
    """The lowest steady temperature whose mean diversity is at or above `target`.

    Args:
        diversity_by_t: temperature -> diversities of the probe prompts (one per prompt).
        target: the diversity training is expected to converge to.
        max_spread: a temperature whose per-prompt diversities have a population standard
            deviation above this swings too much and is refused.
        max_diversity: a temperature whose mean diversity is above this samples noise and
            is refused.

    Returns: (temperature, reason), the reason naming the rule and the numbers that decided.
    When no steady temperature reaches the target, the steady one with the highest mean
    diversity, and the reason says it falls short. Raises ValueError when every candidate
    is refused (or there are none).
    """
    if not diversity_by_t:
        raise ValueError("no temperatures to choose from")
    stats = {}
    for temperature in sorted(diversity_by_t):
        values = list(diversity_by_t[temperature])
        if not values:
            raise ValueError(f"no diversities measured at T={temperature}")
        stats[temperature] = (statistics.fmean(values), statistics.pstdev(values))
    refused: dict[float, str] = {}
    for temperature, (mean, spread) in stats.items():
        if spread > max_spread:
            refused[temperature] = f"spread {spread:.3f} > {max_spread:g}"
        elif mean > max_diversity:
            refused[temperature] = f"diversity {mean:.3f} > {max_diversity:g} (noise)"
    steady = [t for t in stats if t not in refused]
    refusals = "; ".join(f"T={t:g} refused: {why}" for t, why in refused.items())
    if not steady:
        raise ValueError(f"every candidate temperature is refused ({refusals}); try lower temperatures "
                         f"or a larger max spread")
    reaching = [t for t in steady if stats[t][0] >= target]
    if reaching:
        chosen = reaching[0]
        mean, spread = stats[chosen]
        reason = (f"T={chosen:g} is the lowest steady temperature whose diversity {mean:.3f} is at or above "
                  f"the target {target:.3f} (spread {spread:.3f} <= {max_spread:g})")
        below = [f"T={t:g}: {stats[t][0]:.3f}" for t in steady if t < chosen]
        if below:
            reason += f"; below the target: {', '.join(below)}"
    else:
        chosen = max(steady, key=lambda t: stats[t][0])
        reason = (f"no steady temperature reaches the target {target:.3f}; T={chosen:g} has the highest "
                  f"diversity {stats[chosen][0]:.3f} among the steady ones: probe higher temperatures")
    if refusals:
        reason += f"; {refusals}"
    return chosen, reason


NO_TARGET = ("no target diversity: measured only, chose nothing. To choose, give --target-from RUN_DIR "
             "(a pilot run's converged diversity: the mean over the last quarter of its logged steps) or "
             "--target-diversity D")


def target_from_run(run_dir: str | Path, tail_fraction: float = 0.25) -> float:
    """The diversity a run settled at: the mean `diversity` over the last `tail_fraction`
    of its logged steps (at least one). Raises FileNotFoundError or ValueError naming the
    metrics file when it is missing or logs no diversity."""
    from microcoder.training.metrics import METRICS_FILE
    from microcoder.training.plots import read_metrics, series

    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; --target-from takes a training run directory")
    _, values = series(read_metrics(path), "diversity")
    if not values:
        raise ValueError(f"{path} has no diversity values (no logged step carries `diversity`); "
                         f"give --target-diversity instead")
    tail = values[-max(1, math.ceil(len(values) * tail_fraction)) :]
    return statistics.fmean(tail)


class ProbeConfig(CommandConfig):
    """Settings of `microcoder temperature-probe`."""

    model: str = "smollm2-135m-instruct"
    """Checkpoint directory or hub id; the default is the embedded SmolLM2-135M-Instruct."""
    problems: str = "default"
    """Canonical problems JSONL, or 'default' (the training split of the default problems)."""
    temperatures: tuple[Annotated[float, Field(gt=0)], ...] = Field(DEFAULT_TEMPERATURES, min_length=1)
    """Candidate temperatures (comma-separated on the command line)."""
    num_prompts: int = Field(8, ge=1)
    """Probe prompts, a seeded sample of the problems."""
    n: int = Field(8, ge=2)
    """Responses per prompt (the group size of the diversity, which needs two or more)."""
    max_new_tokens: int | None = Field(None, ge=1)
    """Response-length limit; None: the default training config's `max_new_tokens`."""
    target_diversity: float | None = Field(None, ge=0, le=1)
    """Diversity training is expected to converge to (a pilot run's). Without it (or --target-from on the
    command line) the probe only measures and chooses nothing (exit 1)."""
    max_spread: float = Field(DEFAULT_MAX_SPREAD, ge=0)
    """Refuse a temperature whose per-prompt diversities have a std above this."""
    max_diversity: float = Field(DEFAULT_MAX_DIVERSITY, ge=0, le=1)
    """Refuse a temperature whose mean diversity is above this (noise)."""
    ngram: int = Field(4, ge=1)
    """n of the diversity's n-gram sets (as the trainer's `diversity_ngram`)."""
    seed: int = 0
    """Seed of the prompt sample and of sampling."""
    problems_seed: int = 0
    """With problems 'default': the seed of the train/held-out split (the training run's `seed`)."""
    batch_size: int = Field(16, ge=1)
    """Sequences per generation batch."""
    backend: Backend = "auto"
    """Generation backend: auto, hf or vllm."""


@dataclass
class ProbeReport:
    """What the probe measured and chose."""

    diversity_by_t: dict[float, list[float]]
    """Temperature -> per-prompt diversity."""
    fraction_truncated_by_t: dict[float, float]
    mean_tokens_by_t: dict[float, float]
    chosen: float | None
    reason: str
    target: float | None
    """None: no target was given, so nothing was chosen."""
    problem_ids: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        data = asdict(self)
        for key in ("diversity_by_t", "fraction_truncated_by_t", "mean_tokens_by_t"):
            data[key] = {str(t): value for t, value in data[key].items()}
        return json.dumps(data, indent=2)


def probe_problems(spec: str, num_prompts: int, seed: int, problems_seed: int = 0) -> list:
    """A seeded sample of `num_prompts` problems from a JSONL file or the default training split."""
    from microcoder.problem_sets import named_problems

    problems = named_problems(spec, "train", problems_seed)
    if not problems:
        raise ValueError(f"no problems in {spec}")
    return random.Random(seed).sample(problems, min(num_prompts, len(problems)))


def resolve_defaults(config: ProbeConfig) -> ProbeConfig:
    """Fill `max_new_tokens` left as None from the training config's default.

    `target_diversity` stays None when not given: there is no default target."""
    from microcoder.training.config import TrainConfig

    if config.max_new_tokens is None:
        config = config.replaced(max_new_tokens=TrainConfig.model_fields["max_new_tokens"].default)
    return config


@dataclass
class Measurement:
    """Per-temperature statistics of the probe's samples."""

    diversity_by_t: dict[float, list[float]]
    """Temperature -> per-prompt diversity."""
    fraction_truncated_by_t: dict[float, float]
    mean_tokens_by_t: dict[float, float]
    problem_ids: list[str]


def measure_diversity(config: ProbeConfig, console: Console, model=None, tokenizer=None,
                      problems: Sequence | None = None) -> Measurement:
    """Sample the probe prompts at every candidate temperature and measure diversity.

    `config` must have its defaults resolved. `model`/`tokenizer` and `problems` default to
    those the config names (tests inject them)."""
    from microcoder.algorithms.diversity import batch_diversity
    from microcoder.policy.generation import generate
    from microcoder.policy.prompts import render_prompt

    problems = list(problems) if problems is not None else probe_problems(config.problems, config.num_prompts,
                                                                           config.seed, config.problems_seed)
    if model is None or tokenizer is None:
        from microcoder.policy.model import load_model_and_tokenizer

        model, tokenizer = load_model_and_tokenizer(config.model)
    prompts = [render_prompt(problem, tokenizer) for problem in problems]
    diversity_by_t, truncated_by_t, tokens_by_t = {}, {}, {}
    for temperature in sorted(set(config.temperatures)):
        console.print(f"T={temperature:g}: {len(prompts)} prompts x {config.n} responses")
        groups = generate(model, tokenizer, prompts, n=config.n, max_new_tokens=config.max_new_tokens,
                          temperature=temperature, seed=config.seed, batch_size=config.batch_size,
                          backend=config.backend)
        diversity_by_t[temperature] = batch_diversity([[s.token_ids for s in group] for group in groups],
                                                      config.ngram)
        samples = [sample for group in groups for sample in group]
        truncated_by_t[temperature] = sum(s.truncated for s in samples) / len(samples)
        tokens_by_t[temperature] = statistics.fmean(len(s.token_ids) for s in samples)
    return Measurement(diversity_by_t, truncated_by_t, tokens_by_t, [problem.id for problem in problems])


def run_probe(config: ProbeConfig, console: Console | None = None, model=None, tokenizer=None,
              problems: Sequence | None = None) -> ProbeReport:
    """Measure diversity at every candidate temperature (`measure_diversity`), then choose.

    Without a target diversity nothing is chosen: `chosen` is None and the reason says how
    to give a target. Prints the table either way."""
    console = console or Console()
    config = resolve_defaults(config)
    measured = measure_diversity(config, console, model, tokenizer, problems)
    if config.target_diversity is None:
        chosen, reason = None, NO_TARGET
    else:
        try:
            chosen, reason = choose_temperature(measured.diversity_by_t, config.target_diversity,
                                                config.max_spread, config.max_diversity)
        except ValueError as error:
            chosen, reason = None, str(error)
    report = ProbeReport(measured.diversity_by_t, measured.fraction_truncated_by_t, measured.mean_tokens_by_t,
                         chosen, reason, config.target_diversity, measured.problem_ids)
    console.print(render_report(report))
    return report


def check_config_destination(path: str | Path) -> None:
    """Refuse an existing `--write-config` path (checked before the slow measurement)."""
    if Path(path).exists():
        raise ValueError(f"--write-config: {path} already exists; the probe does not overwrite, give a new path")


def write_training_config(temperature: float, path: str | Path, base_config: str | Path | None = None):
    """Write the training config `microcoder train --config PATH` reads: the base config (None:
    the built-in defaults) with `temperature_stages: [[0, temperature]]` and staged control.

    Refuses an existing `path`. Returns the TrainConfig written."""
    from microcoder.training.config import dump_config, load_config

    check_config_destination(path)
    config = load_config(base_config, [f"temperature_stages=[[0, {float(temperature)!r}]]",
                                       "temperature_control=staged"])
    dump_config(config, path)
    return config


def render_report(report: ProbeReport) -> Table:
    target = f"target {report.target:.3f}" if report.target is not None else "no target"
    table = Table(title=f"diversity by temperature ({target})",
                  caption=("chosen: " + (f"T={report.chosen:g}" if report.chosen is not None else "none")
                           + f"\n{report.reason}"))
    for column in ("T", "diversity", "spread (std)", "min", "max", "truncated (%)", "mean tokens"):
        table.add_column(column, justify="right")
    for temperature, values in report.diversity_by_t.items():
        marker = " *" if temperature == report.chosen else ""
        table.add_row(f"{temperature:g}{marker}", f"{statistics.fmean(values):.3f}",
                      f"{statistics.pstdev(values):.3f}", f"{min(values):.3f}", f"{max(values):.3f}",
                      f"{report.fraction_truncated_by_t[temperature] * 100:.0f}",
                      f"{report.mean_tokens_by_t[temperature]:.0f}")
    return table
