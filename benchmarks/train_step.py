"""Seconds per rollout step and tokens/s: MicroCoderTrainer against plain TRL GRPOTrainer.

    python benchmarks/train_step.py                          # tiny random-init model, 4 steps, 2 rounds
    python benchmarks/train_step.py --model smollm2-135m-instruct --steps 3 --rounds 1

Both trainers get the same model (fresh copy from the same seed), prompts, batch mapping
(`grpo_arguments`), sampling settings and reward (the same Evaluator). Plain GRPOTrainer
uses TRL's own advantages and "bnpo" loss; ours adds the temperature control, the
recomputed advantages with the truncation mask, our loss and metrics, and metrics.jsonl.
The first step of each run is warm-up and is not counted; runs alternate plain / ours
so that load on the machine hits both alike. tokens/s = generated response tokens per
second of the whole step (rollout + reward + update).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")


def tiny_add_problems(count: int):
    from microcoder.problems import Problem

    return [Problem(id=f"bench/add-{i}", kind="call", entry_point="add", starter_code="def add(a, b):\n    pass",
                    prompt=f"Return the sum of a and b (variant {i}).",
                    tests=[{"input": "1\n2", "output": "3"}, {"input": f"{i}\n5", "output": str(i + 5)}])
            for i in range(count)]


def step_timer(updates_per_step: int, tokens: list[int]):
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        """Wall time of each rollout step (between rollout-step ends) and its generated tokens."""

        def __init__(self):
            self.times, self.tokens, self.last, self.seen = [], [], None, 0

        def on_train_begin(self, args, state, control, **kwargs):
            self.last = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % updates_per_step == 0:
                now = time.perf_counter()
                self.times.append(now - self.last)
                self.tokens.append(sum(tokens[self.seen:]))
                self.seen = len(tokens)
                self.last = now

    return StepTimer()


def run(kind: str, args, problems, evaluator, workdir: Path) -> tuple[list[float], list[int]]:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from microcoder.evaluator import Sample
    from microcoder.training.config import grpo_arguments, load_config
    from microcoder.training.prompts import render_prompt
    from microcoder.training.trainer import build_trainer, load_model

    config = load_config(args.config, [f"model={args.model}", f"total_steps={args.steps}", "save_every=0",
                                       "eval_every=0", f"run_dir={workdir / kind}", *args.overrides])
    (workdir / kind).mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model, tokenizer = load_model(config, workdir / kind)
    tokens: list[int] = []
    if kind == "ours":
        trainer = build_trainer(config, workdir / kind, model, tokenizer, problems=(problems, []), evaluator=evaluator)
        inner = trainer.reward.__call__

        def counting(*a, **kw):
            tokens.extend(len(ids) for ids in kw["completion_ids"])
            return inner(*a, **kw)

        trainer.reward_funcs[0] = counting
        trainer.reward_funcs[0].__name__ = "evaluator"
    else:
        by_id = {problem.id: problem for problem in problems}

        def evaluator_reward(prompts, completions, completion_ids, problem_id, **_):
            tokens.extend(len(ids) for ids in completion_ids)
            results = evaluator.evaluate(by_id, [Sample(p, response=c) for p, c in zip(problem_id, completions)])
            return [result.reward for result in results]

        dataset = Dataset.from_list([{"prompt": render_prompt(p, tokenizer), "problem_id": p.id} for p in problems])
        trl_args = GRPOConfig(**grpo_arguments(config, str(workdir / kind / "checkpoints")))
        trainer = GRPOTrainer(model=model, reward_funcs=[evaluator_reward], args=trl_args, train_dataset=dataset,
                              processing_class=tokenizer)
    timer = step_timer(config.updates_per_step, tokens)
    trainer.add_callback(timer)
    trainer.train()
    return timer.times[1:], timer.tokens[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="tiny, smollm2-135m-instruct, or a checkpoint path")
    parser.add_argument("--config", default=str(Path(__file__).resolve().parents[1] / "configs" / "microcoder-tiny.yaml"))
    parser.add_argument("--steps", type=int, default=4, help="rollout steps per run (the first is warm-up)")
    parser.add_argument("--rounds", type=int, default=2, help="plain/ours pairs")
    parser.add_argument("overrides", nargs="*", help="key=value config overrides for both trainers")
    args = parser.parse_args()

    import transformers

    from microcoder.evaluator import Evaluator, EvaluatorConfig

    transformers.utils.logging.disable_progress_bar()
    problems = tiny_add_problems(16)
    results = {"plain": ([], []), "ours": ([], [])}
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator, tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.rounds):
            for kind in ("plain", "ours"):
                times, tokens = run(kind, args, problems, evaluator, Path(tmp) / f"{round_index}")
                results[kind][0].extend(times)
                results[kind][1].extend(tokens)
                print(f"round {round_index} {kind:>5}: " + " ".join(f"{t:.2f}s" for t in times), flush=True)

    def summary(kind):
        times, tokens = results[kind]
        seconds = statistics.median(times)
        return seconds, sum(tokens) / sum(times)

    plain_s, plain_tps = summary("plain")
    ours_s, ours_tps = summary("ours")
    print(f"\n{'trainer':<20}{'s/step (median)':>16}{'tokens/s':>12}")
    print(f"{'GRPOTrainer':<20}{plain_s:>16.2f}{plain_tps:>12.1f}")
    print(f"{'MicroCoderTrainer':<20}{ours_s:>16.2f}{ours_tps:>12.1f}")
    print(f"ratio ours/plain: {ours_s / plain_s:.3f} s/step ({(ours_s / plain_s - 1) * 100:+.1f}%), "
          f"{ours_tps / plain_tps:.3f} tokens/s")


if __name__ == "__main__":
    main()
