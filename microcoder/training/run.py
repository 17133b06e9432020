"""A training run, from a config to a finished run directory (`microcoder train`).

    run_dir = run_training(load_config("configs/microcoder.yaml"))

The run's life: a new run directory (or the one being resumed, from its newest checkpoint
whose files all load (`checkpoints.py`), its metrics cut back to that checkpoint), the
config snapshot, the model and the (train, held-out) problems the config names, the
trainer built from them, the step-0 held-out accuracy, training, and summary.json with
the plot. The training step itself is `trainer.py`.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import random
import secrets
import time
import warnings
from datetime import datetime
from pathlib import Path

import torch
from trl import GRPOConfig

from microcoder.evaluator import Evaluator
from microcoder.problems import Problem
from microcoder.training.checkpoints import UnusableCheckpoint, choose_checkpoint
from microcoder.training.config import TrainConfig, dump_config, grpo_arguments
from microcoder.training.metrics import METRICS_FILE
from microcoder.training.reward import reward_evaluator_config, reward_of_config
from microcoder.training.trainer import MicroCoderTrainer

TINY_MODEL_DIR = "tiny_model"
"""Where a run of model "tiny" keeps it: TRL rebuilds the reference model from the policy's path."""
HELDOUT_START_FILE = "heldout_start.json"
"""The step-0 held-out accuracies and per-problem scores, kept in the run directory so that a
resumed run still pairs its final evaluation with them (the gain and its SE)."""
HELDOUT_END_FILE = "heldout_end.json"
"""The last held-out evaluation's accuracies and per-problem scores: with the step-0 file, any
paired comparison (a gain, two limits, two runs on the same problems) reads from files."""


def load_model(config: TrainConfig, run_dir: Path):
    """(model, tokenizer) named by config.model: "tiny", the default id, or a path.

    "tiny" is written to run_dir/tiny_model first and loaded from there, so that the model
    has a path: TRL rebuilds the reference model (beta > 0) from the policy's path.
    """
    from microcoder.policy.model import load_model_and_tokenizer, save_tiny_model

    name = config.model
    if name == "tiny":
        name = str(save_tiny_model(run_dir / TINY_MODEL_DIR, config.seed))  # kept when already there
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[config.dtype]
    model, tokenizer = load_model_and_tokenizer(name, dtype)
    model.train()
    if config.train_top_layers is not None:
        freeze_below_top_layers(model, config.train_top_layers)
    return model, tokenizer


def freeze_below_top_layers(model, count: int) -> None:
    """Only the top `count` decoder layers and the final norm keep requires_grad.

    On a CPU the update dominates a step (backward ~2x forward through every layer); with
    the lower layers and the (tied) embeddings frozen, backward stops `count` layers down.
    Our choice for the CPU default; the paper fine-tunes the whole model.
    """
    layers = model.model.layers
    if count > len(layers):
        raise ValueError(f"train_top_layers: {count} > the model's {len(layers)} layers")
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    for module in [*layers[len(layers) - count:], model.model.norm]:
        for parameter in module.parameters():
            parameter.requires_grad_(True)


def load_problem_split(config: TrainConfig) -> tuple[list[Problem], list[Problem]]:
    """(train, held-out) problems named by config.problems / heldout_problems / heldout_size."""
    from microcoder.problem_sets import GENERATED_SETS, named_problems

    generated = config.problems in GENERATED_SETS  # a set with its own held-out split
    if generated:
        train, heldout = GENERATED_SETS[config.problems](config.seed)
        heldout = heldout[: config.heldout_size]
    else:
        train, heldout = named_problems(config.problems, "train", config.seed), []
    if config.heldout_problems is not None:
        heldout = named_problems(config.heldout_problems, "heldout", config.seed)
    elif not generated:
        shuffled = list(train)
        random.Random(config.seed).shuffle(shuffled)
        heldout, train = shuffled[: config.heldout_size], shuffled[config.heldout_size:]
    if config.train_difficulties is not None:
        train = [problem for problem in train if problem.difficulty in config.train_difficulties]
        if not train:
            raise ValueError(f"train_difficulties: no training problem in {config.problems!r} has difficulty "
                             f"{' or '.join(config.train_difficulties)}")
    if not train:
        raise ValueError(f"problems: no training problems left in {config.problems!r}")
    return train, heldout


def truncate_metrics(path: Path, last_step: int) -> None:
    """Drop metrics lines of steps after the checkpoint being resumed (they will be redone).

    A last line without its newline was cut short by a kill while it was written; it is
    dropped too: a step's line is written before its checkpoint is saved, so its step is
    after any checkpoint. Any other line that is not a record stops the resume, naming it.
    """
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        lines.pop()
    kept = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            step = json.loads(line)["step"]
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"--resume: {path} line {number} is not a metrics record ({error})") from None
        if step <= last_step:
            kept.append(line)
    partial = path.with_suffix(f".{os.getpid()}.tmp")  # a kill while cutting back leaves the file whole
    partial.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    os.replace(partial, path)


def resume_checkpoint(run_dir: Path, processes) -> str:
    """The checkpoint a resume of `run_dir` continues from: the newest that loads
    (`choose_checkpoint`). The main process chooses, sets aside newer ones that do not
    load and says so in one line; the other processes take its choice, or its error."""
    from accelerate.utils import broadcast_object_list

    choice = None
    if processes.is_main_process:
        try:
            folder, set_aside = choose_checkpoint(run_dir / "checkpoints", processes.num_processes)
            choice = str(folder)
            if set_aside:
                print(f"--resume: {'; '.join(set_aside)}; resuming from {folder.name}", flush=True)
        except (FileNotFoundError, UnusableCheckpoint) as error:
            choice = error
    if processes.num_processes > 1:
        [choice] = broadcast_object_list([choice])
    if isinstance(choice, Exception):
        raise choice
    return choice


def build_trainer(config: TrainConfig, run_dir: Path, model=None, tokenizer=None,
                  problems: tuple[list[Problem], list[Problem]] | None = None,
                  evaluator: Evaluator | None = None) -> MicroCoderTrainer:
    """A MicroCoderTrainer for `config` writing into `run_dir` (model, problems, evaluator injectable)."""
    from datasets import Dataset

    from microcoder.policy.prompts import render_prompt

    if model is None:
        model, tokenizer = load_model(config, run_dir)
    train, heldout = problems if problems is not None else load_problem_split(config)
    if evaluator is None:
        evaluator = Evaluator(reward_evaluator_config(config))
    reward = reward_of_config(evaluator, train + heldout, config)
    dataset = Dataset.from_list([{"prompt": render_prompt(problem, tokenizer), "problem_id": problem.id}
                                 for problem in train])
    from accelerate import PartialState

    # Batch sizes are global: each of W processes samples and trains its 1/W share.
    use_cuda = torch.cuda.is_available()
    args = GRPOConfig(**grpo_arguments(config, str(run_dir / "checkpoints"),
                                       world_size=PartialState(cpu=not use_cuda).num_processes, use_cuda=use_cuda))
    return MicroCoderTrainer(config=config, model=model, tokenizer=tokenizer, train_dataset=dataset,
                             reward=reward, args=args, heldout=heldout, run_dir=run_dir)


def new_run_dir(name: str, root: str | Path = "runs") -> Path:
    """Create and return root/<name>-<timestamp>-<6 hex>: never an existing directory."""
    for _ in range(100):
        run_dir = Path(root) / f"{name}-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
        try:
            run_dir.mkdir(parents=True)
            return run_dir
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a new run directory under {root}")


def run_training(config: TrainConfig, resume: bool = False,
                 problems: tuple[list[Problem], list[Problem]] | None = None,
                 evaluator: Evaluator | None = None, name: str = "train") -> Path:
    """Train; returns the run directory.

    The run directory holds config.yaml (the config snapshot), metrics.jsonl (one line per
    step, plus the step-0 held-out accuracy), checkpoints/checkpoint-N (TRL's, with our
    mask and refill generators' and controller's state), summary.json and plots/training.png.
    With `resume`, `config.run_dir` must exist; training continues from its newest checkpoint
    whose files all load (`resume_checkpoint`), its metrics cut back to that checkpoint's step.
    Without it, `config.run_dir` must not exist or be empty (a finished or running run is
    never overwritten); None creates runs/<name>-<timestamp>-<id> (`name`: the preset).
    `problems` ((train, held-out)) and `evaluator` replace the configured ones (tests).
    """
    from transformers.trainer_utils import get_last_checkpoint

    import transformers

    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    transformers.utils.logging.disable_progress_bar()  # "Writing model shards" bars at every checkpoint
    # TRL 1.16 calls transformers' deprecated gradient_checkpointing_* names on every rollout.
    warnings.filterwarnings("ignore", category=FutureWarning, message=".*gradient_checkpointing.*")
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    checkpoint = None
    if resume and config.run_dir is None:
        raise ValueError("--resume needs the run directory to continue")
    # Under `accelerate launch` every process runs this; the main one prepares the run
    # directory (and names it, for all), the others wait for it.
    processes = PartialState(cpu=not torch.cuda.is_available())  # on CPU: gloo across processes (MULTI_CPU)
    run_dir = Path(config.run_dir) if config.run_dir is not None else None
    if run_dir is None:
        [run_dir] = broadcast_object_list([new_run_dir(name) if processes.is_main_process else None]) \
            if processes.num_processes > 1 else [new_run_dir(name)]
    if resume:
        checkpoint = resume_checkpoint(run_dir, processes)
        updates = int(Path(checkpoint).name.rsplit("-", 1)[1])
        if processes.is_main_process:
            truncate_metrics(run_dir / METRICS_FILE, updates // config.updates_per_step)
    elif processes.is_main_process:
        if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
            raise FileExistsError(f"run_dir {run_dir} exists and is not empty: continue it with --resume {run_dir}, "
                                  "or choose another run_dir")
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / METRICS_FILE).write_text("", encoding="utf-8")
    config = config.model_copy(update={"run_dir": str(run_dir)})
    if processes.is_main_process:
        dump_config(config, run_dir / "config.yaml")
        if config.model == "tiny":  # written here, once: only rank 0 writes a model's files
            from microcoder.policy.model import save_tiny_model

            save_tiny_model(run_dir / TINY_MODEL_DIR, config.seed)
    processes.wait_for_everyone()

    trainer = build_trainer(config, run_dir, problems=problems, evaluator=evaluator)
    start = time.perf_counter()
    try:
        before, before_scores = None, None
        if trainer.heldout and trainer.accelerator.is_main_process:
            if resume:
                before, before_scores = _read_heldout_start(run_dir)
            else:
                accuracies = start_heldout(trainer, config)
                before, before_scores = accuracies["heldout_accuracy"], trainer.heldout_scores.get("heldout_accuracy")
                _write_json(run_dir / HELDOUT_START_FILE, {"accuracies": accuracies, "scores": trainer.heldout_scores})
                trainer.write_record({"step": 0, **accuracies})
        trainer.train(resume_from_checkpoint=checkpoint)
    finally:
        trainer.reward.close()
    seconds = time.perf_counter() - start
    # The summary is the main process's: another reading metrics.jsonl here would race the
    # main one's last appends to it (and the checkpoint folder its rotation of them).
    if not trainer.accelerator.is_main_process:
        return run_dir
    after = (trainer.last_record or {}).get("heldout_accuracy")
    gain = paired_gain(before_scores, trainer.heldout_scores.get("heldout_accuracy")) \
        if after is not None and trainer.heldout else None
    if after is not None and trainer.heldout:
        last = {key: value for key, value in trainer.last_record.items() if key.startswith("heldout_accuracy")}
        _write_json(run_dir / HELDOUT_END_FILE, {"step": trainer.last_record.get("step"), "accuracies": last,
                                                 "scores": trainer.heldout_scores})
    summary = {"heldout_accuracy_before": before, "heldout_accuracy_after": after, "steps": config.total_steps,
               "seconds": seconds, "heldout_problems": len(trainer.heldout),
               **({"heldout_gain": gain[0], "heldout_gain_se": gain[1]} if gain else {}),
               **({"resumed": True} if resume else {}),  # then `seconds` counts from the resume
               "final_checkpoint": get_last_checkpoint(str(run_dir / "checkpoints"))
               if (run_dir / "checkpoints").is_dir() else None}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    plot = _plot(run_dir)
    decoding = ("greedy" if config.heldout_temperature == 0
                else f"{config.heldout_samples} samples at T={config.heldout_temperature:g}")
    gain_text = f"; gain {gain[0]:+.3f} (SE {gain[1]:.3f}, paired by problem)" if gain else ""
    print(f"held-out accuracy: before {_fmt(before)}, after {_fmt(after)} "
          f"({len(trainer.heldout)} problems, {decoding}){gain_text}; {seconds / 60:.1f} min{' since resuming' if resume else ''}; run dir {run_dir}"
          + (f"; plot {plot}" if plot else ""), flush=True)
    return run_dir


def paired_gain(before: dict[str, float] | None, after: dict[str, float] | None) -> tuple[float, float] | None:
    """(mean, standard error) over held-out problems of after - before, each problem's
    pass@1 paired with itself (problems scored both times; None with fewer than 2)."""
    if not before or not after:
        return None
    differences = [after[problem] - before[problem] for problem in before if problem in after]
    if len(differences) < 2:
        return None
    mean = sum(differences) / len(differences)
    variance = sum((d - mean) ** 2 for d in differences) / (len(differences) - 1)
    return mean, math.sqrt(variance / len(differences))


START_KEY_FIELDS = ("model", "dtype", "seed", "max_new_tokens", "top_p", "heldout_temperature", "heldout_samples",
                    "heldout_long_factor", "reward_time_limit_s", "reward_time_limit_scale")


def start_key(config: TrainConfig, heldout: list[Problem]) -> str:
    """What the step-0 held-out evaluation depends on, hashed: the starting model (by name or
    path: a checkpoint directory is keyed by its path, not its weights), the decoding and
    limits, the seed, and the held-out problems themselves."""
    import hashlib

    fields = {name: getattr(config, name) for name in START_KEY_FIELDS}
    if config.heldout_temperature == 0:
        fields.pop("heldout_samples")  # greedy decodes once whatever it says
    text = json.dumps({"config": fields, "heldout": [problem.model_dump(mode="json") for problem in heldout]},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def start_heldout(trainer: MicroCoderTrainer, config: TrainConfig) -> dict[str, float]:
    """The step-0 held-out accuracies, read from `heldout_start_cache` when a run with the
    same key stored them there, else evaluated (and stored, when the cache is set)."""
    if config.heldout_start_cache is None:
        return trainer.heldout_accuracies()
    path = Path(config.heldout_start_cache) / f"heldout-start-{start_key(config, trainer.heldout)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    # One evaluation per key: the arms of a seed start together in a parallel grid, and the
    # second waits for the first's file instead of evaluating the same model beside it.
    with open(path.with_suffix(".lock"), "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            stored = json.loads(path.read_text(encoding="utf-8"))
            trainer.heldout_scores.update(stored["scores"])
            return stored["accuracies"]
        accuracies = trainer.heldout_accuracies()
        _write_json(path, {"accuracies": accuracies, "scores": trainer.heldout_scores})
    return accuracies


def _write_json(path: Path, value: dict) -> None:
    """Write whole files only: runs in parallel may read the path at any moment."""
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(value), encoding="utf-8")
    os.replace(partial, path)


def _read_heldout_start(run_dir: Path) -> tuple[float | None, dict[str, float] | None]:
    """A resumed run's step-0 accuracy and per-problem scores (run directories written
    before the scores were kept have the accuracy alone, in metrics.jsonl)."""
    path = run_dir / HELDOUT_START_FILE
    if not path.is_file():
        return _first_heldout(run_dir / METRICS_FILE), None
    stored = json.loads(path.read_text(encoding="utf-8"))
    return stored["accuracies"].get("heldout_accuracy"), stored["scores"].get("heldout_accuracy")


def _first_heldout(path: Path):
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if "heldout_accuracy" in record:
            return record["heldout_accuracy"]
    return None


def _fmt(value) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def _plot(run_dir: Path) -> Path | None:
    """plots/training.png through `microcoder plot`'s code; None when matplotlib is missing."""
    try:
        from microcoder.training.plots import plot_runs

        (run_dir / "plots").mkdir(exist_ok=True)
        return plot_runs([run_dir], run_dir / "plots" / "training.png")
    except ImportError:
        return None
