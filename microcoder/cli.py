"""The `microcoder` command line. Each command parses its options into the typed config of
its entry point and calls it; no logic lives here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer
import yaml
from rich.console import Console

from microcoder.data.cli import data_app
from microcoder.evaluator.sandbox import DEFAULT_MEMORY_LIMIT_MB, DEFAULT_TIME_LIMIT_S
from microcoder.problems import ProblemFormatError

TRACEBACK_VARIABLE = "MICROCODER_TRACEBACK"


def _fail(console: Console, error: BaseException) -> None:
    """Print a command's error as one line and exit 2; with MICROCODER_TRACEBACK=1 set, the
    traceback too (an error from deep inside a run, not from its input, needs its place)."""
    if os.environ.get(TRACEBACK_VARIABLE):
        console.print_exception()
    console.print(f"[red]error:[/red] {error}")
    raise typer.Exit(2) from None

# rich_markup_mode=None: our help strings state "[default: ...]", which rich markup would swallow as a tag.
app = typer.Typer(help="microcoder: RL training, evaluation and data for code models.", no_args_is_help=True,
                  rich_markup_mode=None)
app.add_typer(data_app, name="data")


@app.command()
def evaluate(
    problems: Optional[Path] = typer.Option(None, help="Canonical problems JSONL. Omit for the embedded default (HumanEval canonical solutions)."),
    samples: Optional[Path] = typer.Option(None, help='Samples JSONL: {"problem_id", "response"} or {"problem_id", "code"} per line.'),
    out: Path = typer.Option(Path("results.jsonl"), help="Results JSONL, one row per sample; a .summary.json is written beside it."),
    workers: Optional[int] = typer.Option(None, help="Parallel runs; 0 = one per usable core [default: 0]."),
    mode: Optional[str] = typer.Option(None, help="robust (our rules) or strict (LiveCodeBench's rules) [default: robust]."),
    all_tests: bool = typer.Option(False, "--all-tests", help="Run every test, not stopping at the first failure."),
    time_limit: Optional[float] = typer.Option(None, help=f"CPU seconds per test when a problem sets none (a problem's time_limit_s, e.g. from its reference solution, wins) [default: {DEFAULT_TIME_LIMIT_S}]."),
    time_limit_scale: Optional[float] = typer.Option(None, help="Multiply every test's CPU limit (the problem's or --time-limit) by this, e.g. 2 on a machine twice as slow as the one the limits were measured on [default: 1.0]."),
    memory_limit: Optional[int] = typer.Option(None, help=f"MiB of address space per test when a problem sets none [default: {DEFAULT_MEMORY_LIMIT_MB}]."),
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


@app.command("eval-model")
def eval_model(
    model: Optional[str] = typer.Option(None, help="Checkpoint directory or hub id [default: the embedded SmolLM2-135M-Instruct]."),
    problems: Optional[str] = typer.Option(None, help="Canonical problems JSONL, or 'default' (held-out default problems) [default: default]."),
    n: Optional[int] = typer.Option(None, help="Samples per problem; pass@1 is estimated from all n [default: 4]."),
    max_new_tokens: Optional[list[int]] = typer.Option(None, help="Response-length limit; repeat for several (sampled once at the largest) [default: 512]."),
    temperature: Optional[float] = typer.Option(None, help="Sampling temperature [default: 0.6]."),
    top_p: Optional[float] = typer.Option(None, help="Nucleus sampling mass [default: 0.95]."),
    out: Optional[Path] = typer.Option(None, help="Output directory; run again to resume it [default: eval]."),
    seed: Optional[int] = typer.Option(None, help="Sampling seed [default: 0]."),
    problems_seed: Optional[int] = typer.Option(None, help="With --problems default: the training run's seed, which chose the split [default: 0]."),
    batch_size: Optional[int] = typer.Option(None, help="Sequences per generation batch [default: 16]."),
    workers: Optional[int] = typer.Option(None, help="Evaluator parallel runs; 0 = one per core [default: 0]."),
    backend: Optional[str] = typer.Option(None, help="Generation backend: auto, hf or vllm [default: auto]."),
    since: Optional[str] = typer.Option(None, help="Keep problems dated on or after this day, YYYY-MM-DD (LiveCodeBench: the contest date)."),
    until: Optional[str] = typer.Option(None, help="Keep problems dated on or before this day, YYYY-MM-DD."),
    window: Optional[str] = typer.Option(None, help="A named LiveCodeBench window for --since/--until: v2 ... v6 (what that release added; v6 is 2025-02-01 .. 2025-04-30) or release_v1 ... release_v6 (docs/evaluation.md)."),
    strict_judge: Optional[bool] = typer.Option(None, "--strict-judge/--no-strict-judge", help="Also judge by LiveCodeBench's rules and print both judges' pass@1 side by side [default: True]."),
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


@app.command("temperature-probe")
def temperature_probe(
    model: Optional[str] = typer.Option(None, help="Checkpoint directory or hub id [default: the embedded SmolLM2-135M-Instruct]."),
    problems: Optional[str] = typer.Option(None, help="Canonical problems JSONL, or 'default' (training default problems) [default: default]."),
    temperatures: Optional[str] = typer.Option(None, help="Comma-separated candidates [default: 0.6,0.8,1.0,1.2]."),
    n: Optional[int] = typer.Option(None, help="Responses per prompt [default: 8]."),
    num_prompts: Optional[int] = typer.Option(None, help="Probe prompts sampled from the problems [default: 8]."),
    max_new_tokens: Optional[int] = typer.Option(None, help="Response-length limit [default: the training config's]."),
    target_diversity: Optional[float] = typer.Option(None, help="Diversity training is expected to converge to. Without it or --target-from the probe only measures and chooses nothing (exit 1)."),
    target_from: Optional[Path] = typer.Option(None, help="Take the target from a pilot run: mean diversity of the last quarter of its logged steps."),
    max_spread: Optional[float] = typer.Option(None, help="Refuse a T whose per-prompt diversities have a std above this [default: 0.2]."),
    max_diversity: Optional[float] = typer.Option(None, help="Refuse a T whose mean diversity is above this: noise [default: 0.97]."),
    seed: Optional[int] = typer.Option(None, help="Seed of the prompt sample and of sampling [default: 0]."),
    problems_seed: Optional[int] = typer.Option(None, help="With --problems default: the training run's seed, which chose the split [default: 0]."),
    batch_size: Optional[int] = typer.Option(None, help="Sequences per generation batch [default: 16]."),
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


@app.command()
def serve(
    host: Optional[str] = typer.Option(None, help="Address to listen on; 0.0.0.0 for every interface (then set --token) [default: 127.0.0.1]."),
    port: Optional[int] = typer.Option(None, help="TCP port; 0 picks a free one (printed at start) [default: 8080]."),
    workers: Optional[int] = typer.Option(None, help="Sandbox workers (parallel runs); 0 = one per usable core [default: 0]."),
    token: Optional[str] = typer.Option(None, envvar="MICROCODER_SERVE_TOKEN", help="Require 'Authorization: Bearer TOKEN' on /run_code and /evaluate (or set MICROCODER_SERVE_TOKEN, which keeps it out of the process list)."),
    problems: Optional[Path] = typer.Option(None, help="Canonical problems JSONL loaded at start; /evaluate samples may name its ids."),
    mode: Optional[str] = typer.Option(None, help="/evaluate's comparison rules when a request names none: robust or strict [default: robust]."),
    queue_limit: Optional[int] = typer.Option(None, help="Runs plus samples admitted at once (running or waiting); past it requests get 503 [default: 1024]."),
    max_body_mb: Optional[float] = typer.Option(None, help="Largest request body in MiB; more is 413 [default: 64.0]."),
    time_limit: Optional[float] = typer.Option(None, help=f"CPU seconds per test for problems that set none [default: {DEFAULT_TIME_LIMIT_S}]."),
    memory_limit: Optional[int] = typer.Option(None, help=f"MiB per run for problems that set none and for /run_code's memory_limit_MB -1 [default: {DEFAULT_MEMORY_LIMIT_MB}]."),
    max_run_timeout: Optional[float] = typer.Option(None, help="Largest run_timeout /run_code accepts, in seconds [default: 60.0]."),
    client_grace: Optional[float] = typer.Option(None, help="Seconds a /run_code client waits beyond compile_timeout + run_timeout (verl: 10); each answer comes 1 s before that budget ends [default: 10.0]."),
    upload_timeout: Optional[float] = typer.Option(None, help="Seconds a request body may take to arrive; a slower upload is 408 [default: 10.0]."),
    shutdown_grace: Optional[float] = typer.Option(None, help="Seconds requests in progress get to finish after SIGTERM/SIGINT; then they are answered 503 [default: 5.0]."),
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

        run_server(config)
    except ModuleNotFoundError as error:
        console.print(f"[red]error:[/red] {error}; install the serve extra: pip install -e '.[serve]'")
        raise typer.Exit(2) from None
    except (ProblemFormatError, ValueError, FileNotFoundError, OSError) as error:
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
                       restore_from=tuple(restore or ()))
    except (ProblemFormatError, ValueError, FileNotFoundError, FileExistsError) as error:
        _fail(Console(), error)


@experiment_app.command("report")
def experiment_report(
    root: Path = typer.Argument(Path("runs/experiments"), help="A grid folder, or a folder of grids."),
    docs: Path = typer.Option(None, "--docs", help="Also publish each grid into this record (e.g. results/experiments): "
                              "DOCS/<spec>.png, DOCS/data/<spec>/ (spec and per-run metrics, no checkpoints), the "
                              "verdict table and numbers block of DOCS/<spec>.md, and the summary of DOCS/README.md "
                              "(the count of verdicts and the table). Nothing outside DOCS is written."),
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
