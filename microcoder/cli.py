"""The `microcoder` command line. Each command parses its options into the typed config of
its entry point and calls it. The options that set a config's fields are made from the
config (`config_options`): one declaration per setting, its type, bounds and one-line doc
in the config; its flag, help and stated default come from there."""

from __future__ import annotations

import inspect
import os
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Literal, Optional

import typer
import yaml
from rich.console import Console

from microcoder.config_files import CommandConfig, ConfigError
from microcoder.data.cli import data_app
from microcoder.evaluator.evaluate import EvaluatorConfig
from microcoder.policy.config import ModelEvalConfig
from microcoder.problems import ProblemFormatError
from microcoder.service.config import ServeConfig
from microcoder.training.probe import ProbeConfig

TRACEBACK_VARIABLE = "MICROCODER_TRACEBACK"


def _fail(console: Console, error: BaseException) -> None:
    """Print a command's error as one line and exit 2; with MICROCODER_TRACEBACK=1 set, the
    traceback too (an error from deep inside a run, not from its input, needs its place)."""
    if os.environ.get(TRACEBACK_VARIABLE):
        console.print_exception()
    console.print(f"[red]error:[/red] {error}")
    raise typer.Exit(2) from None


def shown_default(value: object) -> str:
    """A default as the help writes it: a sequence comma-separated, a switch on or off,
    anything else as str()."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def option_help(config: type[CommandConfig], name: str) -> str:
    """A field's docstring as its option's help, with the field's default stated; a field
    without a docstring is an error here, so every command's help is whole."""
    info = config.model_fields[name]
    if not info.description:
        raise TypeError(f"{config.__name__}.{name} has no docstring: every setting of a command's config needs "
                        f"one (it is the option's help)")
    text = " ".join(info.description.split())
    if info.default is not None:
        stated = f" [default: {shown_default(info.default)}]"
        text = f"{text[:-1]}{stated}." if text.endswith(".") else text + stated
    return text


def option_type(annotation: object) -> tuple[type, bool]:
    """(the type click parses the option as, whether it repeats) for a field's annotation:
    X | None is X, a Literal its values' type (the config checks the choice), a tuple a
    repeatable option whose values may also be comma-separated."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return option_type(next(arg for arg in args if arg is not type(None)))
    if typing.get_origin(annotation) is Literal:
        return type(args[0]), False
    if typing.get_origin(annotation) is tuple:
        return str, True
    return annotation, False


def config_options(config: type[CommandConfig], flags: dict[str, str] | None = None,
                   envvars: dict[str, str] | None = None, leave_out: Iterable[str] = ()) -> Callable:
    """Decorate a command `run(config, **own options)`: its options are its own parameters
    and one per field of `config` (but `leave_out`), named --field-name (or as `flags`
    says), with the field's docstring as help and its default stated; each defaults to
    None, "the config's default". The command then gets `config` built from the options
    given; a value the config refuses is a one-line error naming the option."""
    flags, envvars = flags or {}, envvars or {}
    fields = [name for name in config.model_fields if name not in set(leave_out)]

    def decorate(function: Callable) -> Callable:
        hints = typing.get_type_hints(function)
        own = [parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints[parameter.name])
               for parameter in list(inspect.signature(function).parameters.values())[1:]]
        made = []
        for name in fields:
            parsed, repeated = option_type(config.model_fields[name].annotation)
            flag = flags.get(name, name.replace("_", "-"))
            declared = f"--{flag}/--no-{flag}" if parsed is bool else f"--{flag}"
            option = typer.Option(None, declared, help=option_help(config, name), envvar=envvars.get(name),
                                  show_default=False)
            made.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                          annotation=Optional[list[parsed]] if repeated else Optional[parsed]))

        def command(**options):
            given = {}
            for name in fields:
                value = options.pop(name)
                if value is not None and isinstance(value, list):  # repeated, each maybe comma-separated
                    value = tuple(item.strip() for text in value for item in text.split(",") if item.strip())
                if value is not None:
                    given[name] = value
            try:
                built = config(**given)
            except ConfigError as error:
                field = str(error).split(" ", 1)[0].rstrip(":").split(".")[0]
                flag = flags.get(field, field.replace("_", "-"))
                _fail(Console(), f"--{flag}: {error}" if field in given else error)
            return function(built, **options)

        command.__signature__ = inspect.Signature([*own, *made])
        command.__annotations__ = {parameter.name: parameter.annotation for parameter in [*own, *made]}
        command.__name__, command.__doc__, command.__module__ = function.__name__, function.__doc__, function.__module__
        return command

    return decorate


# rich_markup_mode=None: our help strings state "[default: ...]", which rich markup would swallow as a tag.
app = typer.Typer(help="microcoder: RL training, evaluation and data for code models.", no_args_is_help=True,
                  rich_markup_mode=None)
app.add_typer(data_app, name="data")


@app.command()
@config_options(EvaluatorConfig, flags={"time_limit_s": "time-limit", "memory_limit_mb": "memory-limit"})
def evaluate(
    config: EvaluatorConfig,
    problems: Optional[Path] = typer.Option(None, help="Canonical problems JSONL. Omit for the embedded default (HumanEval canonical solutions)."),
    samples: Optional[Path] = typer.Option(None, help='Samples JSONL: {"problem_id", "response"} or {"problem_id", "code"} per line.'),
    out: Path = typer.Option(Path("results.jsonl"), help="Results JSONL, one row per sample; a .summary.json is written beside it."),
    resume: bool = typer.Option(False, "--resume", help="Keep rows already in --out; judge only the rest."),
) -> None:
    """Run model-written programs against tests in the sandbox and judge them."""
    from microcoder.data.loaders import humaneval_reference_samples
    from microcoder.evaluator.command import EvaluateJob, run_evaluate

    console = Console()
    try:
        run_evaluate(EvaluateJob(problems, samples, out, resume, config), console, default=humaneval_reference_samples)
    except (ProblemFormatError, ValueError, FileNotFoundError, KeyError) as error:
        _fail(console, error)


@app.command("eval-model")
@config_options(ModelEvalConfig)
def eval_model(
    config: ModelEvalConfig,
    window: Optional[str] = typer.Option(None, help="A named LiveCodeBench window for --since/--until: v2 ... v6 (what that release added; v6 is 2025-02-01 .. 2025-04-30) or release_v1 ... release_v6 (docs/evaluation.md)."),
) -> None:
    """Sample n responses per problem from a model, judge them, and report pass@1 overall, by
    source and by difficulty. (`microcoder evaluate` judges samples you already have.)
    --problems may be a LiveCodeBench release file (code_generation_lite, .jsonl or .parquet)."""
    from microcoder.data.livecodebench import is_release_file, window_dates
    from microcoder.data.loaders import load_problems
    from microcoder.policy.evaluation import evaluate_model

    console = Console()
    try:
        if window is not None:
            if config.since is not None or config.until is not None:
                raise ValueError("give --window or --since/--until, not both")
            since, until = window_dates(window)
            config = config.replaced(since=since, until=until)
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
@config_options(ProbeConfig)
def temperature_probe(
    config: ProbeConfig,
    target_from: Optional[Path] = typer.Option(None, help="Take the target from a pilot run: mean diversity of the last quarter of its logged steps."),
    out: Optional[Path] = typer.Option(None, help="Also write the report as JSON here."),
    write_config: Optional[Path] = typer.Option(None, help="When a T is chosen, write a training config here (for microcoder train --config): the base config with temperature_stages [[0, T]], staged. Must not exist."),
    base_config: Optional[Path] = typer.Option(None, help="Base of --write-config [default: the built-in training defaults]."),
) -> None:
    """Measure response diversity at candidate temperatures and choose the training temperature.

    A target diversity (--target-from a pilot run, or --target-diversity) decides; without one, nothing is chosen."""
    from microcoder.training.config import load_config
    from microcoder.training.probe import check_config_destination, run_probe, target_from_run, write_training_config

    console = Console()
    try:
        if config.target_diversity is not None and target_from is not None:
            raise ValueError("give --target-diversity or --target-from, not both")
        if base_config is not None and write_config is None:
            raise ValueError("--base-config is the base of --write-config; give --write-config too")
        if write_config is not None:  # fail before the slow measurement, not after it
            check_config_destination(write_config)
            load_config(base_config)
        if target_from is not None:
            config = config.replaced(target_diversity=target_from_run(target_from))
            console.print(f"target diversity {config.target_diversity:.3f}, from {target_from}")
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
@config_options(ServeConfig, flags={"time_limit_s": "time-limit", "memory_limit_mb": "memory-limit",
                                    "max_run_timeout_s": "max-run-timeout", "client_grace_s": "client-grace",
                                    "upload_timeout_s": "upload-timeout", "shutdown_grace_s": "shutdown-grace"},
                envvars={"token": "MICROCODER_SERVE_TOKEN"})
def serve(config: ServeConfig) -> None:
    """Serve the evaluator over HTTP: SandboxFusion's /run_code, /evaluate (streamed result rows), /health."""
    console = Console()
    try:
        from microcoder.service.app import run_server  # FastAPI and uvicorn: the `serve` extra
        from microcoder.service.uvicorn_hooks import UnsupportedUvicorn
    except ModuleNotFoundError as error:
        console.print(f"[red]error:[/red] {error}; install the serve extra: pip install -e '.[serve]'")
        raise typer.Exit(2) from None
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
    restore: list[Path] = typer.Option(None, "--restore", help="Published grids (a `report --record` data folder, "
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
    record: Path = typer.Option(None, "--record", help="Also publish each grid into this record (e.g. "
                                "results/experiments): RECORD/<spec>.png, RECORD/data/<spec>/ (spec and per-run "
                                "metrics, no checkpoints), the verdict table and numbers block of RECORD/<spec>.md, "
                                "and the summary of RECORD/README.md (the count of verdicts and the table). "
                                "Publishing writes nothing outside RECORD."),
) -> None:
    """Per grid: the findings' verdicts by the stated rule (printed), figure.png (mean and band over
    seeds, one colour per arm) and report.md (verdicts and numbers); with --record, the record's only writer."""
    from microcoder.experiments.report import report_all

    try:
        for figure, report in report_all(root, record):
            text = report.read_text(encoding="utf-8")
            print(text.split("\n## Numbers\n", 1)[0].rstrip())
            print(f"\n{figure}\n{report}\n")
    except (ValueError, FileNotFoundError) as error:
        _fail(Console(), error)


if __name__ == "__main__":  # last: `python -m microcoder.cli` must see every command registered above
    app()
