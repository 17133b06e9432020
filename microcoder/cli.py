"""The `microcoder` command line. Each command parses its options into the typed config of
its entry point and calls it; besides that, only the help's defaults (read from those
configs when the help is shown) live here."""

from __future__ import annotations

import dataclasses
import importlib
import os
from pathlib import Path
from typing import ClassVar, Optional

import click
import typer
import yaml
from rich.console import Console
from typer.core import TyperCommand

from microcoder.data.cli import data_app
from microcoder.problems import ProblemFormatError

TRACEBACK_VARIABLE = "MICROCODER_TRACEBACK"


def _fail(console: Console, error: BaseException) -> None:
    """Print a command's error as one line and exit 2; with MICROCODER_TRACEBACK=1 set, the
    traceback too (an error from deep inside a run, not from its input, needs its place)."""
    if os.environ.get(TRACEBACK_VARIABLE):
        console.print_exception()
    console.print(f"[red]error:[/red] {error}")
    raise typer.Exit(2) from None


def field_default(config: type, name: str) -> object:
    """The default of field `name` of a dataclass config."""
    field = {field.name: field for field in dataclasses.fields(config)}[name]
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default


def shown_default(value: object) -> str:
    """A default as the help writes it: a sequence comma-separated, anything else as str()."""
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


class ConfigDefaults(TyperCommand):
    """A command whose options set fields of one config, and whose help states each field's
    default read from the config itself, so there is nothing to keep in sync.

    Options default to None ("the config's default"), so click has no default to show;
    when the help is formatted, every option that sets a field with a default other than
    None, and whose help does not state one in words, gets "[default: X]". The config is
    imported then, not at start-up (eval-model's pulls in torch)."""

    config: ClassVar[str] = ""
    """"module:Class" of the config."""
    fields: ClassVar[dict[str, str]] = {}
    """Option name -> config field, where the two differ (--time-limit sets time_limit_s)."""

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        module, _, name = self.config.partition(":")
        config = getattr(importlib.import_module(module), name)
        for param in self.params:
            field = self.fields.get(param.name, param.name)
            help_text = getattr(param, "help", None)
            if param.default is not None or not help_text or "[default:" in help_text \
                    or field not in {field.name for field in dataclasses.fields(config)}:
                continue  # click states its own default; prose states one; or no field
            value = field_default(config, field)
            if value is not None:
                stated = f" [default: {shown_default(value)}]"
                param.help = f"{help_text[:-1]}{stated}." if help_text.endswith(".") else help_text + stated
        super().format_help(ctx, formatter)


def config_defaults(config: str, **fields: str) -> type[ConfigDefaults]:
    """The command class whose help states the defaults of `config` ("module:Class");
    `fields` maps option names to the fields they set where the names differ."""
    return type(f"ConfigDefaults_{config.rpartition(':')[2]}", (ConfigDefaults,), {"config": config, "fields": fields})


# rich_markup_mode=None: our help strings state "[default: ...]", which rich markup would swallow as a tag.
app = typer.Typer(help="microcoder: RL training, evaluation and data for code models.", no_args_is_help=True,
                  rich_markup_mode=None)
app.add_typer(data_app, name="data")


@app.command(cls=config_defaults("microcoder.evaluator.evaluate:EvaluatorConfig", time_limit="time_limit_s",
                                  memory_limit="memory_limit_mb"))
def evaluate(
    problems: Optional[Path] = typer.Option(None, help="Canonical problems JSONL. Omit for the embedded default (HumanEval canonical solutions)."),
    samples: Optional[Path] = typer.Option(None, help='Samples JSONL: {"problem_id", "response"} or {"problem_id", "code"} per line.'),
    out: Path = typer.Option(Path("results.jsonl"), help="Results JSONL, one row per sample; a .summary.json is written beside it."),
    workers: Optional[int] = typer.Option(None, help="Parallel runs; 0 = one per usable core."),
    mode: Optional[str] = typer.Option(None, help="robust (our rules) or strict (LiveCodeBench's rules)."),
    all_tests: bool = typer.Option(False, "--all-tests", help="Run every test, not stopping at the first failure."),
    time_limit: Optional[float] = typer.Option(None, help="CPU seconds per test when a problem sets none (a problem's time_limit_s, e.g. from its reference solution, wins)."),
    time_limit_scale: Optional[float] = typer.Option(None, help="Multiply every test's CPU limit (the problem's or --time-limit) by this, e.g. 2 on a machine twice as slow as the one the limits were measured on."),
    memory_limit: Optional[int] = typer.Option(None, help="MiB of address space per test when a problem sets none."),
    resume: bool = typer.Option(False, "--resume", help="Keep rows already in --out; judge only the rest."),
) -> None:
    """Run model-written programs against tests in the sandbox and judge them."""
    from microcoder.data.loaders import humaneval_reference_samples
    from microcoder.evaluator.command import EvaluateJob, run_evaluate
    from microcoder.evaluator.evaluate import EvaluatorConfig

    console = Console()
    try:
        config = EvaluatorConfig(all_tests=all_tests, **_given(workers=workers, mode=mode, time_limit_s=time_limit,
                                                              time_limit_scale=time_limit_scale, memory_limit_mb=memory_limit))
        run_evaluate(EvaluateJob(problems, samples, out, resume, config), console, default=humaneval_reference_samples)
    except (ProblemFormatError, ValueError, FileNotFoundError, KeyError) as error:
        _fail(console, error)


def _given(**options) -> dict:
    """The options the user set (None means: the config's default)."""
    return {key: value for key, value in options.items() if value is not None}


@app.command("eval-model", cls=config_defaults("microcoder.policy.evaluation:ModelEvalConfig"))
def eval_model(
    model: Optional[str] = typer.Option(None, help="Checkpoint directory or hub id [default: the embedded SmolLM2-135M-Instruct]."),
    problems: Optional[str] = typer.Option(None, help="Canonical problems JSONL, or 'default' (held-out default problems)."),
    n: Optional[int] = typer.Option(None, help="Samples per problem; pass@1 is estimated from all n."),
    max_new_tokens: Optional[list[int]] = typer.Option(None, help="Response-length limit; repeat for several (sampled once at the largest)."),
    temperature: Optional[float] = typer.Option(None, help="Sampling temperature."),
    top_p: Optional[float] = typer.Option(None, help="Nucleus sampling mass."),
    out: Optional[Path] = typer.Option(None, help="Output directory; run again to resume it."),
    seed: Optional[int] = typer.Option(None, help="Sampling seed."),
    problems_seed: Optional[int] = typer.Option(None, help="With --problems default: the training run's seed, which chose the split."),
    batch_size: Optional[int] = typer.Option(None, help="Sequences per generation batch."),
    workers: Optional[int] = typer.Option(None, help="Evaluator parallel runs; 0 = one per core."),
    backend: Optional[str] = typer.Option(None, help="Generation backend: auto, hf or vllm."),
    since: Optional[str] = typer.Option(None, help="Keep problems dated on or after this day, YYYY-MM-DD (LiveCodeBench: the contest date)."),
    until: Optional[str] = typer.Option(None, help="Keep problems dated on or before this day, YYYY-MM-DD."),
    window: Optional[str] = typer.Option(None, help="A named LiveCodeBench window for --since/--until: v2 ... v6 (what that release added; v6 is 2025-02-01 .. 2025-04-30) or release_v1 ... release_v6 (docs/evaluation.md)."),
    strict_judge: Optional[bool] = typer.Option(None, "--strict-judge/--no-strict-judge", help="Also judge by LiveCodeBench's rules and print both judges' pass@1 side by side."),
) -> None:
    """Sample n responses per problem from a model, judge them, and report pass@1 overall, by
    source and by difficulty. (`microcoder evaluate` judges samples you already have.)
    --problems may be a LiveCodeBench release file (code_generation_lite, .jsonl or .parquet)."""
    from microcoder.data.livecodebench import is_release_file, window_dates
    from microcoder.data.loaders import load_problems
    from microcoder.policy.evaluation import ModelEvalConfig, evaluate_model

    console = Console()
    try:
        if window is not None:
            if since is not None or until is not None:
                raise ValueError("give --window or --since/--until, not both")
            since, until = window_dates(window)
        config = ModelEvalConfig(**_given(model=model, problems=problems, n=n, temperature=temperature, top_p=top_p,
                                     out=out, seed=seed, problems_seed=problems_seed, batch_size=batch_size,
                                     workers=workers, backend=backend, since=since, until=until,
                                     strict_judge=strict_judge,
                                     max_new_tokens=tuple(max_new_tokens) if max_new_tokens else None))
        release = None
        if Path(config.problems).is_file() and is_release_file(Path(config.problems)):
            release, rejects = load_problems(config.problems, "livecodebench_release")
            if rejects:  # a benchmark is read whole or not at all
                raise ValueError(f"{len(rejects)} of {len(release) + len(rejects)} release rows could not be read; "
                                 f"the first: {rejects[0]}")
        evaluate_model(config, console, problems=release)
    except (ProblemFormatError, ValueError, FileNotFoundError, OSError) as error:
        _fail(console, error)


@app.command()
def plot(
    run_dirs: list[Path] = typer.Argument(..., help="Run directories, each with a metrics.jsonl."),
    out: Optional[Path] = typer.Option(None, help="PNG to write [default: RUN_DIR/metrics.png for one run, runs.png for several]."),
) -> None:
    """Draw held-out accuracy, reward, response length and diversity against step, runs overlaid."""
    from microcoder.training.plots import plot_runs

    console = Console()
    try:
        written = plot_runs(run_dirs, out)
    except (ValueError, FileNotFoundError) as error:
        _fail(console, error)
    console.print(f"wrote {written}")


@app.command("temperature-probe", cls=config_defaults("microcoder.training.probe:ProbeConfig"))
def temperature_probe(
    model: Optional[str] = typer.Option(None, help="Checkpoint directory or hub id [default: the embedded SmolLM2-135M-Instruct]."),
    problems: Optional[str] = typer.Option(None, help="Canonical problems JSONL, or 'default' (training default problems)."),
    temperatures: Optional[str] = typer.Option(None, help="Comma-separated candidates."),
    n: Optional[int] = typer.Option(None, help="Responses per prompt."),
    num_prompts: Optional[int] = typer.Option(None, help="Probe prompts sampled from the problems."),
    max_new_tokens: Optional[int] = typer.Option(None, help="Response-length limit [default: the training config's]."),
    target_diversity: Optional[float] = typer.Option(None, help="Diversity training is expected to converge to. Without it or --target-from the probe only measures and chooses nothing (exit 1)."),
    target_from: Optional[Path] = typer.Option(None, help="Take the target from a pilot run: mean diversity of the last quarter of its logged steps."),
    max_spread: Optional[float] = typer.Option(None, help="Refuse a T whose per-prompt diversities have a std above this."),
    max_diversity: Optional[float] = typer.Option(None, help="Refuse a T whose mean diversity is above this: noise."),
    seed: Optional[int] = typer.Option(None, help="Seed of the prompt sample and of sampling."),
    problems_seed: Optional[int] = typer.Option(None, help="With --problems default: the training run's seed, which chose the split."),
    batch_size: Optional[int] = typer.Option(None, help="Sequences per generation batch."),
    out: Optional[Path] = typer.Option(None, help="Also write the report as JSON here."),
    write_config: Optional[Path] = typer.Option(None, help="When a T is chosen, write a training config here (for microcoder train --config): the base config with temperature_stages [[0, T]], staged. Must not exist."),
    base_config: Optional[Path] = typer.Option(None, help="Base of --write-config [default: the built-in training defaults]."),
) -> None:
    """Measure response diversity at candidate temperatures and choose the training temperature.

    A target diversity (--target-from a pilot run, or --target-diversity) decides; without one, nothing is chosen."""
    from microcoder.training.config import load_config
    from microcoder.training.probe import (ProbeConfig, check_config_destination, run_probe, target_from_run,
                                           write_training_config)

    console = Console()
    try:
        if target_diversity is not None and target_from is not None:
            raise ValueError("give --target-diversity or --target-from, not both")
        if base_config is not None and write_config is None:
            raise ValueError("--base-config is the base of --write-config; give --write-config too")
        if write_config is not None:  # fail before the slow measurement, not after it
            check_config_destination(write_config)
            load_config(base_config)
        if target_from is not None:
            target_diversity = target_from_run(target_from)
            console.print(f"target diversity {target_diversity:.3f}, from {target_from}")
        parsed = tuple(float(value) for value in temperatures.split(",") if value.strip()) if temperatures else None
        config = ProbeConfig(**_given(model=model, problems=problems, temperatures=parsed, n=n, num_prompts=num_prompts,
                                      max_new_tokens=max_new_tokens, target_diversity=target_diversity,
                                      max_spread=max_spread, max_diversity=max_diversity, seed=seed,
                                      problems_seed=problems_seed, batch_size=batch_size))
        report = run_probe(config, console)
    except (ProblemFormatError, ValueError, FileNotFoundError, OSError) as error:
        _fail(console, error)
    if out is not None:
        out.write_text(report.to_json() + "\n")
    if report.chosen is None:
        console.print(f"chose no temperature: {report.reason}"
                      + (f"; did not write {write_config}" if write_config is not None else ""))
        raise typer.Exit(1)
    if write_config is not None:
        try:
            written = write_training_config(report.chosen, write_config, base_config)
        except (ValueError, OSError) as error:
            _fail(console, error)
        console.print(f"wrote {write_config}: {base_config or 'the built-in defaults'} with temperature_stages "
                      f"[[0, {report.chosen:g}]], temperature_control staged")
        if written.model != config.model:
            console.print(f"note: the probe sampled {config.model}; the written config trains {written.model}")


@app.command()
def train(
    overrides: Optional[list[str]] = typer.Argument(None, help="key=value config overrides, e.g. total_steps=20 beta=0.001."),
    config: Optional[Path] = typer.Option(None, "--config", help="Config YAML, e.g. configs/dapo.yaml (default: the embedded MicroCoder-GRPO CPU run)."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Run directory to continue from its last checkpoint (with its config.yaml unless --config is given)."),
) -> None:
    """Train a code model with MicroCoder-GRPO, GRPO or DAPO; writes a run directory."""
    from microcoder.training.config import load_config
    from microcoder.training.run import run_training

    console = Console()
    try:
        path = resume / "config.yaml" if resume is not None and config is None else config
        settings = load_config(path, [*(overrides or []), *([f"run_dir={resume}"] if resume is not None else [])])
        run_training(settings, resume=resume is not None, name=config.stem if config is not None else "microcoder")
    except (ProblemFormatError, ValueError, FileNotFoundError, FileExistsError) as error:
        _fail(console, error)


@app.command(cls=config_defaults("microcoder.service.config:ServeConfig", time_limit="time_limit_s",
                                  memory_limit="memory_limit_mb", max_run_timeout="max_run_timeout_s",
                                  client_grace="client_grace_s", upload_timeout="upload_timeout_s",
                                  shutdown_grace="shutdown_grace_s"))
def serve(
    host: Optional[str] = typer.Option(None, help="Address to listen on; 0.0.0.0 for every interface (then set --token)."),
    port: Optional[int] = typer.Option(None, help="TCP port; 0 picks a free one (printed at start)."),
    workers: Optional[int] = typer.Option(None, help="Sandbox workers (parallel runs); 0 = one per usable core."),
    token: Optional[str] = typer.Option(None, envvar="MICROCODER_SERVE_TOKEN", help="Require 'Authorization: Bearer TOKEN' on /run_code and /evaluate (or set MICROCODER_SERVE_TOKEN, which keeps it out of the process list)."),
    problems: Optional[Path] = typer.Option(None, help="Canonical problems JSONL loaded at start; /evaluate samples may name its ids."),
    mode: Optional[str] = typer.Option(None, help="/evaluate's comparison rules when a request names none: robust or strict."),
    queue_limit: Optional[int] = typer.Option(None, help="Runs plus samples admitted at once (running or waiting); past it requests get 503."),
    max_body_mb: Optional[float] = typer.Option(None, help="Largest request body in MiB; more is 413."),
    time_limit: Optional[float] = typer.Option(None, help="CPU seconds per test for problems that set none."),
    memory_limit: Optional[int] = typer.Option(None, help="MiB per run for problems that set none and for /run_code's memory_limit_MB -1."),
    max_run_timeout: Optional[float] = typer.Option(None, help="Largest run_timeout /run_code accepts, in seconds."),
    client_grace: Optional[float] = typer.Option(None, help="Seconds a /run_code client waits beyond compile_timeout + run_timeout (verl: 10); each answer comes 1 s before that budget ends."),
    upload_timeout: Optional[float] = typer.Option(None, help="Seconds a request body may take to arrive; a slower upload is 408."),
    shutdown_grace: Optional[float] = typer.Option(None, help="Seconds requests in progress get to finish after a stop signal (SIGTERM, SIGINT, SIGHUP, ...); then they are answered 503."),
) -> None:
    """Serve the evaluator over HTTP: SandboxFusion's /run_code, /evaluate (streamed result rows), /health."""
    from microcoder.service.config import ServeConfig

    console = Console()
    try:
        config = ServeConfig(**_given(host=host, port=port, workers=workers, token=token, problems=problems, mode=mode,
                                      queue_limit=queue_limit, max_body_mb=max_body_mb, time_limit_s=time_limit,
                                      memory_limit_mb=memory_limit, max_run_timeout_s=max_run_timeout,
                                      client_grace_s=client_grace, upload_timeout_s=upload_timeout,
                                      shutdown_grace_s=shutdown_grace))
        from microcoder.service.app import run_server  # FastAPI and uvicorn: the `serve` extra
        from microcoder.service.uvicorn_hooks import UnsupportedUvicorn
    except ModuleNotFoundError as error:
        console.print(f"[red]error:[/red] {error}; install the serve extra: pip install -e '.[serve]'")
        raise typer.Exit(2) from None
    except (ValueError, OSError) as error:  # an option the config refuses
        _fail(console, error)
    try:
        run_server(config)
    except (ProblemFormatError, ValueError, FileNotFoundError, OSError, UnsupportedUvicorn) as error:
        _fail(console, error)


experiment_app = typer.Typer(help="Run and report experiment grids (arms x seeds of training runs).",
                             no_args_is_help=True, rich_markup_mode=None)
app.add_typer(experiment_app, name="experiment")


@experiment_app.command("run")
def experiment_run(
    spec: Path = typer.Argument(..., help="Experiment spec (YAML), e.g. configs/experiments/main.yaml."),
    overrides: list[str] = typer.Argument(None, help="key=value config overrides for every arm, after the spec's "
                                          "own and before each arm's (e.g. a model and lengths at paper scale)."),
    root: Path = typer.Option(Path("runs/experiments"), "--root", help="Where grids go: ROOT/<spec name>/<arm>/seed-<k>/."),
    parallel: int = typer.Option(1, "--parallel", min=1, help="Runs at once, each in its own process with "
                                 "cores / N threads; its output goes to <arm>/seed-<k>.train.log."),
    var: list[str] = typer.Option(None, "--var", help="NAME=NUMBER: replace one of the spec's vars (e.g. L=4096 "
                                  "for the generation limit the arms derive their lengths from)."),
    restore: list[Path] = typer.Option(None, "--restore", help="Published grids (a `report --docs` data folder, "
                                       "e.g. results/experiments/data; repeatable) to take finished runs with the "
                                       "same config from where ROOT lacks them, e.g. on a fresh clone."),
    require_per_problem: bool = typer.Option(False, "--require-per-problem", help="With --restore: take only "
                                             "published runs that kept their per-problem held-out files "
                                             "(heldout_start.json, heldout_end.json) and train the others again."),
) -> None:
    """Run every arm x seed of a spec; finished runs are skipped, interrupted ones resumed."""
    from microcoder.experiments.runner import run_experiment

    try:
        variables = {}
        for item in var or ():
            name, sep, raw = item.partition("=")
            number = yaml.safe_load(raw) if sep else None
            if not sep or isinstance(number, bool) or not isinstance(number, (int, float)):
                raise ValueError(f"--var {item!r}: expected NAME=NUMBER")
            variables[name.strip()] = number
        run_experiment(spec, root, parallel=parallel, extra=tuple(overrides or ()), variables=variables,
                       restore_from=tuple(restore or ()), restore_per_problem_only=require_per_problem)
    except (ProblemFormatError, ValueError, FileNotFoundError, FileExistsError) as error:
        _fail(Console(), error)


@experiment_app.command("report")
def experiment_report(
    root: Path = typer.Argument(Path("runs/experiments"), help="A grid folder, or a folder of grids."),
    docs: Path = typer.Option(None, "--docs", help="Also publish each grid into this record (e.g. results/experiments): "
                              "DOCS/<spec>.png, DOCS/data/<spec>/ (spec and per-run metrics, no checkpoints), the "
                              "verdict table and numbers block of DOCS/<spec>.md, and the summary of DOCS/README.md "
                              "(the count of verdicts and the table). Publishing writes nothing outside DOCS."),
) -> None:
    """Per grid: the findings' verdicts by the stated rule (printed), figure.png (mean and band over
    seeds, one colour per arm) and report.md (verdicts and numbers); with --docs, the record's only writer."""
    from microcoder.experiments.report import report_all

    try:
        for figure, report in report_all(root, docs):
            text = report.read_text(encoding="utf-8")
            print(text.split("\n## Numbers\n", 1)[0].rstrip())
            print(f"\n{figure}\n{report}\n")
    except (ValueError, FileNotFoundError) as error:
        _fail(Console(), error)


if __name__ == "__main__":  # last: `python -m microcoder.cli` must see every command registered above
    app()
