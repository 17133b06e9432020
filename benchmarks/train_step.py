"""Where a training step's time goes, and what our trainer costs beside plain TRL and plain HF.

    python benchmarks/train_step.py                          # tiny random-init model, every comparison but vllm
    python benchmarks/train_step.py --smoke                  # tiny model, the phases only: seconds
    python benchmarks/train_step.py --model smollm2-135m-instruct --config configs/grpo.yaml \\
        --config configs/experiments/cpu-scale.yaml --problems config --steps 2 --rounds 1 \\
        --compare phases --against 0fe4f08 max_new_tokens=64   # the CPU-scale GRPO step, against that commit

Comparisons (`--compare a,b`, all by default):

- `phases`: one run of our trainer, and with `--against COMMIT` (or a checkout's path) the
  same run of that commit's trainer in a subprocess (a git worktree of it on PYTHONPATH),
  the runs alternating `--rounds` times. Per rollout step, the CPU seconds of this process
  and the wall seconds of each phase: sampling (the trainer's `generate` calls), the old
  and the reference log-prob passes (TRL's passes without gradients, told apart by the
  model they run), the update (the step minus its rollout), the judging (`seconds_reward`,
  wall only: it runs in the sandbox's processes; `seconds_reward_visible` is what the step
  waited for it) and one held-out evaluation after the run (`--heldout` problems of the
  config's held-out split, the config's decoding). Beside each, a floor measured in the
  same run on the same tensors: for sampling, a plain `model.generate` of the same batch
  (same random state: the same tokens); for each log-prob pass, one forward pass of the
  same tokens (the base model, the LM head on the completion positions); for the update,
  forward and backward of the trained layers only (the frozen layers' output computed
  beforehand and not counted), one per micro-batch and epoch; for the held-out
  evaluation, the same prompts through plain `model.generate`. Floors run between the
  trainer's calls and are taken out of the step's times. The old commit's run measures
  the phases without floors. The step's CPU ratio old / new is the headline: on a shared
  machine wall time moves with the neighbours' load.

- `trl`: seconds per rollout step, MicroCoderTrainer against plain TRL GRPOTrainer, same
  model (fresh copy from the same seed), prompts, batch mapping (`grpo_arguments`),
  sampling settings and reward (the same Evaluator). Plain GRPOTrainer uses TRL's own
  advantages and "bnpo" loss; ours adds the temperature control, the recomputed
  advantages with the truncation mask, our loss and metrics, and metrics.jsonl.
  tokens/s = generated response tokens per second of the whole step.
- `generate`: inside our trainer's rollout, the same batch sampled again by a plain
  `model.generate` (same inputs, same torch random state, so the same tokens; no_grad, as
  a script would call it) right after the trainer's call. Prints sampling tokens/s of
  both and their ratio, and the rollout's tokens/s (seconds_rollout also holds the old
  and reference log-prob passes, each a forward pass over prompt + response).
- `checkpointing`: our trainer with `gradient_checkpointing=true` (TRL 1.16's default,
  what runs did before the key existed) and `false` (ours): seconds_rollout and
  seconds_update as logged, and the update's CPU seconds of this process (on a shared
  machine wall time moves with the neighbours' load; with one torch thread, CPU time
  does much less).

- `overlap`: our trainer with `reward_overlap=false` and `true` at the same
  `rollout_chunks` (`--chunks`, 2 by default): seconds_reward (the judging) and
  seconds_reward_visible (what the step waited for it), and whether the two runs got the
  same rewards. A random tiny model writes no program, so here the real Evaluator judges,
  in place of each response, one of three programs picked by the response's hash: a
  correct `add`, a wrong one, and a correct one that first burns `--judge-ms` of CPU per
  test (the work of a real rollout's judging, the same verdicts every run). The issue's
  target: visible reward time with overlap below 25% of the reward time without.

- `vllm`: our trainer sampling with `model.generate` and with vLLM (`use_vllm=true`, TRL's
  colocate engine; needs vLLM: run it with the vLLM environment's python, built by
  scripts/test_vllm.sh), each quiet and with the judge loading the host: `--load-workers`
  sandbox workers judging programs that burn CPU for the whole run, as a run's judge does
  beside sampling. Per engine and load: the sampling phase (wall seconds of the trainer's
  sampling calls, vLLM's weight sync included), the whole step, tokens/s and the step's
  metrics; then the ratios generate / vLLM. The engine's start (20-40 s) happens when the
  trainer is built and is not in any step. The targets: sampling >= 1.5x quiet and >= 2x
  under load, the step >= 1.3x. Prints the host's load average beside each run.

The first step of each run is warm-up and is not counted; runs alternate between the
variants compared so that load on the machine hits them alike.
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

COMPARISONS = ("trl", "generate", "checkpointing", "overlap", "phases", "vllm")
DEFAULT_COMPARISONS = COMPARISONS[:-1]  # vllm only by name: it needs the vLLM environment and a checkpoint


def tiny_add_problems(count: int):
    from microcoder.problems import Problem

    return [Problem(id=f"bench/add-{i}", kind="call", entry_point="add", starter_code="def add(a, b):\n    pass",
                    prompt=f"Return the sum of a and b (variant {i}).",
                    tests=[{"input": "1\n2", "output": "3"}, {"input": f"{i}\n5", "output": str(i + 5)}])
            for i in range(count)]


def step_timer(updates_per_step: int, tokens: list[int]):
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        """Wall and CPU time of each rollout step (between rollout-step ends) and its generated tokens."""

        def __init__(self):
            self.times, self.cpu, self.tokens, self.last, self.last_cpu, self.seen = [], [], [], None, None, 0

        def on_train_begin(self, args, state, control, **kwargs):
            self.last, self.last_cpu = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % updates_per_step == 0:
                now, cpu = time.perf_counter(), time.process_time()
                self.times.append(now - self.last)
                self.cpu.append(cpu - self.last_cpu)
                self.tokens.append(sum(tokens[self.seen:]))
                self.seen = len(tokens)
                self.last, self.last_cpu = now, cpu

    return StepTimer()



def plain_generate_replay(generate, kwargs: dict, rng_state):
    """The trainer's generate call again as a plain HF `generate` of the same batch, from the
    random state `rng_state` the trainer's call started with (the same draws: the same tokens
    if the two samplers agree); returns (tokens, wall s, CPU s) and leaves the random state
    where the trainer's call left it, so training goes on as if the replay had not happened."""
    import torch

    after = torch.get_rng_state()
    torch.set_rng_state(rng_state)
    config = kwargs["generation_config"]
    start, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        plain = generate(input_ids=kwargs["input_ids"], attention_mask=kwargs["attention_mask"], do_sample=True,
                         temperature=config.temperature, top_p=config.top_p, top_k=0,
                         max_new_tokens=config.max_new_tokens, pad_token_id=config.pad_token_id,
                         eos_token_id=config.eos_token_id)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    torch.set_rng_state(after)
    return plain, wall, cpu

class RolloutProbe:
    """Wraps the trainer's sampler and rollout: per rollout (one per step), the seconds and
    tokens of the trainer's `generate` calls (several with rollout_chunks > 1 or DAPO's
    refill, summed), of a plain `generate` of the same batches, and the rollout's CPU
    seconds. A `generate` outside a rollout (held-out evaluation) is not recorded."""

    def __init__(self, trainer, replay: bool):
        import torch

        self.trainer, self.replay = trainer, replay
        self.steps: list[dict] = []
        self.current: dict | None = None  # the record of the rollout under way
        model = trainer.accelerator.unwrap_model(trainer.model)
        trainer_generate = model.generate

        def add(name, value):
            self.current[name] = self.current.get(name, 0) + value

        def generate(*args, **kwargs):
            if self.current is None:
                return trainer_generate(*args, **kwargs)
            state = torch.get_rng_state()
            start, cpu = time.perf_counter(), time.process_time()
            output = trainer_generate(*args, **kwargs)
            add("generate_s", time.perf_counter() - start)
            add("generate_cpu_s", time.process_time() - cpu)
            # token slots: rows x new positions (a row that ended early is padded to the longest)
            add("tokens", output[:, kwargs["input_ids"].size(1):].numel())
            add("generate_calls", 1)
            if self.replay:
                plain, wall, cpu = plain_generate_replay(trainer_generate, kwargs, state)
                add("plain_generate_s", wall)
                add("plain_generate_cpu_s", cpu)
                self.current["same_tokens"] = self.current.get("same_tokens", True) and bool(torch.equal(plain, output))
            return output

        model.generate = generate
        rollout = trainer.rollout  # the hook TRL's rollout calls in training (trl_hooks.py)

        def timed_rollout(inputs):
            self.current = {}
            cpu = time.process_time()
            try:
                output = rollout(inputs)
            finally:
                self.current["rollout_cpu_s"] = time.process_time() - cpu
                self.steps.append(self.current)
                self.current = None
            return output

        trainer.rollout = timed_rollout


class CannedPrograms:
    """The Evaluator judging a canned program in place of each response (see `overlap` above)."""

    def __init__(self, evaluator, burn_ms: float):
        self.evaluator = evaluator
        burn = (f"    import time\n    end = time.process_time() + {burn_ms / 1000}\n"
                f"    while time.process_time() < end:\n        pass\n")
        self.programs = ["def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a - b\n",
                         f"def add(a, b):\n{burn}    return a + b\n"]

    def evaluate(self, problems, samples, on_result=None):
        import hashlib

        from microcoder.evaluator import Sample

        canned = [Sample(sample.problem_id, code=self.programs[
            hashlib.sha256((sample.response or "").encode()).digest()[0] % len(self.programs)]) for sample in samples]
        return self.evaluator.evaluate(problems, canned, on_result)

    def judging(self, mode):
        return self

    def close(self):
        pass  # the Evaluator is main()'s


def build(kind: str, args, problems, evaluator, workdir: Path, overrides: list[str]):
    """(trainer, tokens list the reward fills, config) for `kind`: "plain" (TRL's GRPOTrainer) or "ours"."""
    import torch
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from microcoder.evaluator import Sample
    from microcoder.training.config import grpo_arguments, load_config

    try:
        from microcoder.policy.prompts import render_prompt
        from microcoder.training.run import build_trainer, load_model
    except ImportError:  # an older commit's layout (--against)
        from microcoder.training.prompts import render_prompt
        from microcoder.training.trainer import build_trainer, load_model

    config = load_config(args.config, [f"model={args.model}", f"total_steps={args.steps}", "save_every=0",
                                       "eval_every=0", f"run_dir={workdir}", *args.overrides, *overrides])
    workdir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model, tokenizer = load_model(config, workdir)
    tokens: list[int] = []
    if kind == "ours":
        trainer = build_trainer(config, workdir, model, tokenizer, problems=(problems, []), evaluator=evaluator)
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
        trl_args = GRPOConfig(**grpo_arguments(config, str(workdir / "checkpoints")))
        trainer = GRPOTrainer(model=model, reward_funcs=[evaluator_reward], args=trl_args, train_dataset=dataset,
                              processing_class=tokenizer)
        trainer.remove_callback(PrinterCallback)  # TRL's log dicts; ours prints one line per step
    return trainer, tokens, config


def run(kind: str, args, problems, evaluator, workdir: Path, overrides: list[str] = (), replay: bool = False) -> dict:
    """Train one run; per counted step: wall and CPU seconds, tokens, our metrics and the probe's records."""
    trainer, tokens, config = build(kind, args, problems, evaluator, workdir, list(overrides))
    timer = step_timer(config.updates_per_step, tokens)
    trainer.add_callback(timer)
    probe = RolloutProbe(trainer, replay) if kind == "ours" else None
    trainer.train()
    metrics = []
    if kind == "ours":
        import json

        metrics = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
        metrics = [record for record in metrics if "reward_mean" in record]
    return {"times": timer.times[1:], "cpu": timer.cpu[1:], "tokens": timer.tokens[1:], "metrics": metrics[1:],
            "probe": probe.steps[1:] if probe else []}


def compare_trl(args, problems, evaluator, tmp: Path) -> None:
    results = {"plain": [], "ours": []}
    for round_index in range(args.rounds):
        for kind in ("plain", "ours"):
            result = run(kind, args, problems, evaluator, tmp / f"trl-{round_index}-{kind}")
            results[kind].append(result)
            print(f"round {round_index} {kind:>5}: " + " ".join(f"{t:.2f}s" for t in result["times"]), flush=True)

    def summary(kind):
        times = [t for result in results[kind] for t in result["times"]]
        tokens = [n for result in results[kind] for n in result["tokens"]]
        return statistics.median(times), sum(tokens) / sum(times)

    plain_s, plain_tps = summary("plain")
    ours_s, ours_tps = summary("ours")
    print(f"\n{'trainer':<20}{'s/step (median)':>16}{'tokens/s':>12}")
    print(f"{'GRPOTrainer':<20}{plain_s:>16.2f}{plain_tps:>12.1f}")
    print(f"{'MicroCoderTrainer':<20}{ours_s:>16.2f}{ours_tps:>12.1f}")
    print(f"ratio ours/plain: {ours_s / plain_s:.3f} s/step ({(ours_s / plain_s - 1) * 100:+.1f}%), "
          f"{ours_tps / plain_tps:.3f} tokens/s\n", flush=True)


def compare_generate(args, problems, evaluator, tmp: Path) -> None:
    steps, metrics = [], []
    for round_index in range(args.rounds):
        result = run("ours", args, problems, evaluator, tmp / f"generate-{round_index}", replay=True)
        steps += result["probe"]
        metrics += result["metrics"]
    def total(name):
        return sum(step[name] for step in steps)

    tokens = total("tokens")
    # seconds_rollout holds the replay too (it runs inside the trainer's sampling call)
    rollout = sum(record["seconds_rollout"] for record in metrics) - total("plain_generate_s")
    rollout_cpu = total("rollout_cpu_s") - total("plain_generate_cpu_s")
    rows = [("plain model.generate, same batch", total("plain_generate_s"), total("plain_generate_cpu_s")),
            ("trainer generate", total("generate_s"), total("generate_cpu_s")),
            ("trainer rollout (seconds_rollout)", rollout, rollout_cpu)]
    print(f"{'sampling: ' + str(len(steps)) + ' steps, ' + str(tokens) + ' token slots':<40}{'wall s':>9}"
          f"{'tokens/s':>10}{'CPU s':>9}{'tokens/CPU s':>14}")
    for label, wall, cpu in rows:
        print(f"{label:<40}{wall:>9.2f}{tokens / wall:>10.1f}{cpu:>9.2f}{tokens / cpu:>14.1f}")
    print(f"ratio trainer/plain sampling: {total('generate_s') / total('plain_generate_s'):.3f} wall, "
          f"{total('generate_cpu_s') / total('plain_generate_cpu_s'):.3f} CPU (same tokens: "
          f"{all(step['same_tokens'] for step in steps)}); the rollout's other {rollout - total('generate_s'):.2f} s "
          f"are the old / reference log-prob passes (forward passes over prompt + response) and TRL's bookkeeping\n",
          flush=True)


def compare_checkpointing(args, problems, evaluator, tmp: Path) -> None:
    results = {"true": [], "false": []}
    for round_index in range(args.rounds):
        for value in ("true", "false"):
            result = run("ours", args, problems, evaluator, tmp / f"checkpointing-{round_index}-{value}",
                         [f"gradient_checkpointing={value}"])
            results[value].append(result)

    def column(value, name):
        records = [record for result in results[value] for record in result["metrics"]]
        return statistics.median(record[name] for record in records)

    def update_cpu(value):
        # the step's CPU seconds minus its rollout's (sampling, log-prob passes, reward call)
        pairs = [(cpu, step["rollout_cpu_s"]) for result in results[value]
                 for cpu, step in zip(result["cpu"], result["probe"])]
        return statistics.median(cpu - rollout for cpu, rollout in pairs)

    print(f"{'gradient_checkpointing':<24}{'seconds_rollout':>16}{'seconds_update':>16}{'update CPU s':>14}")
    for value, label in (("true", "true (TRL's default)"), ("false", "false (ours)")):
        print(f"{label:<24}{column(value, 'seconds_rollout'):>16.2f}{column(value, 'seconds_update'):>16.2f}"
              f"{update_cpu(value):>14.2f}")
    print(f"update CPU ratio before/after: {update_cpu('true') / update_cpu('false'):.2f} (medians over "
          f"{sum(len(result['metrics']) for result in results['true'])} steps each)\n", flush=True)


def compare_overlap(args, problems, evaluator, tmp: Path) -> None:
    judge = CannedPrograms(evaluator, args.judge_ms)
    results = {"false": [], "true": []}
    for round_index in range(args.rounds):
        for value in ("false", "true"):
            result = run("ours", args, problems, judge, tmp / f"overlap-{round_index}-{value}",
                         [f"reward_overlap={value}", f"rollout_chunks={args.chunks}"])
            results[value].append(result)

    def total(value, name):
        return sum(record[name] for result in results[value] for record in result["metrics"])

    def rewards(value):
        return [[record["reward_mean"], record["accuracy_mean"]] for result in results[value]
                for record in result["metrics"]]

    steps = sum(len(result["metrics"]) for result in results["false"])
    print(f"{'reward_overlap':<16}{'seconds_reward':>16}{'seconds_reward_visible':>24}{'seconds_rollout':>17}"
          f"{'rollout + visible':>19}")
    for value in ("false", "true"):
        print(f"{value:<16}{total(value, 'seconds_reward'):>16.2f}{total(value, 'seconds_reward_visible'):>24.2f}"
              f"{total(value, 'seconds_rollout'):>17.2f}"
              f"{total(value, 'seconds_rollout') + total(value, 'seconds_reward_visible'):>19.2f}")
    print(f"visible with overlap / reward time without: "
          f"{total('true', 'seconds_reward_visible') / total('false', 'seconds_reward'):.3f} (target < 0.25; "
          f"{steps} steps each, rollout_chunks={args.chunks}, {args.judge_ms:g} ms CPU per test of a slow program); "
          f"same rewards: {rewards('true') == rewards('false')}\n", flush=True)


PHASES = ("sampling", "old log-probs", "ref log-probs", "update", "judging", "judging (waited)", "held-out")


class PhaseProbe:
    """Per rollout step: CPU and wall seconds of sampling, the old and reference log-prob
    passes and the rollout, and with `floors` the floors of each (see `phases` above).
    Works on the trainer of an older commit too (TRL's method names)."""

    def __init__(self, trainer, config, floors: bool):
        import torch

        self.trainer, self.config, self.floors = trainer, config, floors
        self.steps: list[dict] = []
        self.current: dict | None = None
        model = trainer.accelerator.unwrap_model(trainer.model)
        trainer_generate = model.generate

        def add(name, wall, cpu):
            self.current[name] = self.current.get(name, 0.0) + wall
            self.current[name + " cpu"] = self.current.get(name + " cpu", 0.0) + cpu

        def generate(*args, **kwargs):
            # the floor: the same call as plain generate (the trainer's may continue a prompt cache)
            if self.current is None:
                return trainer_generate(*args, **kwargs)
            state = torch.get_rng_state()
            output = trainer_generate(*args, **kwargs)
            if self.floors:
                plain, wall, cpu = plain_generate_replay(trainer_generate, kwargs, state)
                add("sampling floor", wall, cpu)
                self.current["same tokens"] = self.current.get("same tokens", True) and bool(torch.equal(plain, output))
            return output

        model.generate = generate
        single_turn = trainer.sample_rows  # the hook TRL's sampling calls (trl_hooks.py)

        def sampling(*args, **kwargs):  # the trainer's sampling, whatever it calls
            floor = self.current.get("sampling floor", 0.0), self.current.get("sampling floor cpu", 0.0)
            start, cpu = time.perf_counter(), time.process_time()
            output = single_turn(*args, **kwargs)
            add("sampling", time.perf_counter() - start - (self.current.get("sampling floor", 0.0) - floor[0]),
                time.process_time() - cpu - (self.current.get("sampling floor cpu", 0.0) - floor[1]))
            return output

        trainer.sample_rows = sampling
        logps = trainer.token_log_probs  # every log-prob pass TRL makes (trl_hooks.py)

        def timed_logps(pass_model, input_ids, attention_mask, logits_to_keep, batch_size=None, **kwargs):
            if self.current is None or torch.is_grad_enabled():  # the update's forward, or outside a rollout
                return logps(pass_model, input_ids, attention_mask, logits_to_keep, batch_size, **kwargs)
            name = "ref log-probs" if pass_model is trainer.ref_model else "old log-probs"
            start, cpu = time.perf_counter(), time.process_time()
            output = logps(pass_model, input_ids, attention_mask, logits_to_keep, batch_size, **kwargs)
            add(name, time.perf_counter() - start, time.process_time() - cpu)
            if self.floors:
                start, cpu = time.perf_counter(), time.process_time()
                self.forward_floor(trainer.accelerator.unwrap_model(pass_model), input_ids, attention_mask,
                                   logits_to_keep, batch_size or input_ids.size(0))
                add(name + " floor", time.perf_counter() - start, time.process_time() - cpu)
            return output

        trainer.token_log_probs = timed_logps
        rollout = trainer.rollout

        def timed_rollout(inputs):
            self.current = {}
            start, cpu = time.perf_counter(), time.process_time()
            try:
                output = rollout(inputs)
            finally:
                add("rollout", time.perf_counter() - start, time.process_time() - cpu)
            if self.floors:
                start, cpu = time.perf_counter(), time.process_time()
                add("update floor", *self.update_floor(output))
                add("probe", time.perf_counter() - start, time.process_time() - cpu)
            self.steps.append(self.current)
            self.current = None
            return output

        trainer.rollout = timed_rollout

    @staticmethod
    def probe_seconds(step: dict, cpu: bool, rollout_only: bool = False) -> float:
        """Seconds the floors took inside the step, or inside its rollout (taken out of their times)."""
        suffix = " cpu" if cpu else ""
        inside = sum(step.get(name + " floor" + suffix, 0.0) for name in ("sampling", "old log-probs", "ref log-probs"))
        return inside if rollout_only else inside + step.get("probe" + suffix, 0.0)

    @staticmethod
    def completion_log_probs(model, input_ids, attention_mask, logits_to_keep, temperature):
        import torch

        hidden = model.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = model.lm_head(hidden[:, -logits_to_keep - 1:-1]) / temperature
        targets = input_ids[:, -logits_to_keep:]
        return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)

    def forward_floor(self, model, input_ids, attention_mask, logits_to_keep, batch_size) -> None:
        import torch

        with torch.no_grad():
            for start in range(0, input_ids.size(0), batch_size):
                self.completion_log_probs(model, input_ids[start:start + batch_size],
                                          attention_mask[start:start + batch_size], logits_to_keep,
                                          self.trainer.temperature)

    def update_floor(self, output: dict) -> tuple[float, float]:
        """(wall, CPU) seconds of forward + backward of the trained layers only, per micro-batch
        and epoch; the frozen layers' output is computed first (not counted) and replayed."""
        import torch

        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        layers = model.model.layers
        trained = [parameter for parameter in model.parameters() if parameter.requires_grad]
        frozen = len(layers) - (self.config.train_top_layers or len(layers))
        input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        keep = output["completion_ids"].size(1)
        size = self.config.micro_batch_size
        wall = cpu = 0.0
        for _ in range(self.config.ppo_epochs):
            for start in range(0, input_ids.size(0), size):
                ids, batch_mask = input_ids[start:start + size], mask[start:start + size]
                completion_mask = output["completion_mask"][start:start + size].float()
                prefix = None
                if frozen:
                    from microcoder.training.frozen_prefix import FrozenPrefix

                    prefix = FrozenPrefix(frozen)
                    with torch.no_grad(), prefix.around_forward(model, ids, batch_mask):  # records
                        model.model(input_ids=ids, attention_mask=batch_mask)
                start, start_cpu = time.perf_counter(), time.process_time()
                with prefix.around_forward(model, ids, batch_mask) if prefix else _nothing():  # replays
                    logp = self.completion_log_probs(model, ids, batch_mask, keep, self.trainer.temperature)
                    loss = -(logp * completion_mask).sum() / completion_mask.sum().clamp(min=1)
                    torch.autograd.grad(loss, trained)  # the backward, leaving the trainer's .grad alone
                wall += time.perf_counter() - start
                cpu += time.process_time() - start_cpu
        return wall, cpu


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def phase_run(args, problems, heldout, evaluator, workdir: Path, floors: bool) -> dict:
    """One run of the current PYTHONPATH's trainer with a PhaseProbe; per counted step the
    phases' seconds, then one held-out evaluation. JSON-able."""
    import json
    import statistics as _statistics

    import torch

    trainer, tokens, config = build("ours", args, problems, evaluator, workdir, [])
    timer = step_timer(config.updates_per_step, tokens)
    trainer.add_callback(timer)
    probe = PhaseProbe(trainer, config, floors)
    trainer.train()
    metrics = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    metrics = [record for record in metrics if "reward_mean" in record]
    steps = []
    for wall, cpu, step, record in list(zip(timer.times, timer.cpu, probe.steps, metrics))[1:]:
        wall -= probe.probe_seconds(step, cpu=False)
        cpu -= probe.probe_seconds(step, cpu=True)
        rollout = step["rollout"] - probe.probe_seconds(step, cpu=False, rollout_only=True)
        rollout_cpu = step["rollout cpu"] - probe.probe_seconds(step, cpu=True, rollout_only=True)
        row = {"step": wall, "step cpu": cpu, **step, "rollout": rollout, "rollout cpu": rollout_cpu,
               "update": wall - rollout, "update cpu": cpu - rollout_cpu,
               "judging": record["seconds_reward"], "judging (waited)": record["seconds_reward_visible"],
               "tokens": record["response_length_mean"]}
        for name in ("old log-probs", "ref log-probs"):
            row.setdefault(name, 0.0)
            row.setdefault(name + " cpu", 0.0)
        steps.append(row)
    # held-out: the trainer's evaluation, then the same prompts through plain generate
    held = {}
    if heldout:
        model = trainer.accelerator.unwrap_model(trainer.model)
        trainer.heldout = list(heldout)
        start, cpu = time.perf_counter(), time.process_time()
        accuracy = trainer.heldout_accuracy(config.max_new_tokens)
        held = {"held-out": time.perf_counter() - start, "held-out cpu": time.process_time() - cpu,
                "accuracy": accuracy}
        if floors:
            from microcoder.policy.generation import generate as plain_generate
            from microcoder.policy.prompts import render_prompt

            prompts = [render_prompt(problem, trainer.processing_class) for problem in heldout]
            greedy = config.heldout_temperature == 0
            start, cpu = time.perf_counter(), time.process_time()
            plain_generate(model, trainer.processing_class, prompts, n=1 if greedy else config.heldout_samples,
                           max_new_tokens=config.max_new_tokens, temperature=config.heldout_temperature,
                           seed=config.seed, batch_size=16, backend="hf", progress=False)
            held.update({"held-out floor": time.perf_counter() - start, "held-out floor cpu": time.process_time() - cpu})
    del torch, _statistics
    return {"steps": steps, "heldout": held}


def worker(args) -> None:
    """`--worker OUT`: phase_run in this process (the tree on sys.path first), its result to OUT."""
    import json

    from microcoder.evaluator import Evaluator, EvaluatorConfig

    problems, heldout = load_problems(args)
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator, tempfile.TemporaryDirectory() as tmp:
        result = phase_run(args, problems, heldout, evaluator, Path(tmp) / "run", floors=False)
    Path(args.worker).parent.mkdir(parents=True, exist_ok=True)
    Path(args.worker).write_text(json.dumps(result), encoding="utf-8")


def load_problems(args):
    """(training problems, held-out problems for the held-out phase)."""
    if args.problems == "bench":
        problems = tiny_add_problems(16 + args.heldout)
        return problems[:16], problems[16:]
    from microcoder.training.config import load_config

    try:
        from microcoder.training.run import load_problem_split
    except ImportError:  # an older commit's layout
        from microcoder.training.trainer import load_problem_split
    train, heldout = load_problem_split(load_config(args.config, args.overrides))
    return train, heldout[: args.heldout]


def compare_phases(args, problems, evaluator, tmp: Path) -> None:
    import json
    import subprocess

    try:  # run as a script: benchmarks/ is on the path
        from workloads import old_tree
    except ImportError:
        from benchmarks.workloads import old_tree

    _, heldout = load_problems(args)
    tmp.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict]] = {"new": [], "old": []}
    tree = old_tree(args.against, []) if args.against else None
    for round_index in range(args.rounds):
        if tree is not None:  # the old commit first in each round, in its own process
            out = tmp / f"old-{round_index}.json"
            command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(out), "--tree", str(tree),
                       "--model", args.model, "--steps", str(args.steps), "--problems", args.problems,
                       "--heldout", str(args.heldout), *sum((["--config", c] for c in args.config), []),
                       *args.overrides]
            environment = {**os.environ, "PYTHONPATH": str(tree)}
            done = subprocess.run(command, env=environment, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"the run at {args.against} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
            runs["old"].append(json.loads(out.read_text()))
        runs["new"].append(phase_run(args, problems, heldout, evaluator, tmp / f"new-{round_index}", floors=True))

    def per_step(kind, name):
        steps = [step for run in runs[kind] for step in run["steps"]]
        return sum(step.get(name, 0.0) for step in steps) / len(steps) if steps else float("nan")

    def held(kind, name):
        values = [run["heldout"][name] for run in runs[kind] if name in run["heldout"]]
        return sum(values) / len(values) if values else float("nan")

    def value(kind, phase, cpu, floor=False):
        name = phase + (" floor" if floor else "") + (" cpu" if cpu else "")
        return held(kind, name) if phase == "held-out" else per_step(kind, name)

    count = sum(len(run["steps"]) for run in runs["new"])
    print(f"per rollout step, mean of {count} counted steps (the first of each run is warm-up); held-out: one "
          f"evaluation of {len(heldout)} problems after each run. CPU: this process's; wall: elapsed.")
    header = f"{'phase':<18}{'CPU s':>8}{'wall s':>8}{'floor CPU':>10}{'floor wall':>11}{'CPU/floor':>10}"
    if tree is not None:
        header += f"{'old CPU s':>10}{'old wall s':>11}{'old/new CPU':>12}"
    print(header)
    for phase in ("step", *PHASES):
        wall_only = phase.startswith("judging")
        cpu, wall = value("new", phase, True), value("new", phase, False)
        line = f"{phase:<18}{'-' if wall_only else f'{cpu:.2f}':>8}{wall:>8.2f}"
        has_floor = phase in ("sampling", "old log-probs", "ref log-probs", "update", "held-out")
        if has_floor:
            floor_cpu, floor_wall = value("new", phase, True, True), value("new", phase, False, True)
            ratio = cpu / floor_cpu if floor_cpu > 0 else float("nan")
            line += f"{floor_cpu:>10.2f}{floor_wall:>11.2f}{ratio:>10.2f}"
        else:
            line += f"{'-':>10}{'-':>11}{'-':>10}"
        if tree is not None:
            old_cpu, old_wall = value("old", phase, True), value("old", phase, False)
            ratio = old_cpu / cpu if cpu > 0 and not wall_only else float("nan")
            line += f"{'-' if wall_only else f'{old_cpu:.2f}':>10}{old_wall:>11.2f}{ratio:>12.2f}"
        print(line)
    same = all(step.get("same tokens", True) for run in runs["new"] for step in run["steps"])
    print(f"sampling floor drew the same tokens: {same}; mean response length "
          f"{per_step('new', 'tokens'):.1f}" + (f" (old: {per_step('old', 'tokens'):.1f})" if tree else ""))
    if tree is not None:
        print(f"step old / new: {per_step('old', 'step cpu') / per_step('new', 'step cpu'):.2f}x CPU, "
              f"{per_step('old', 'step') / per_step('new', 'step'):.2f}x wall (against {args.against}; "
              f"held-out accuracy old {held('old', 'accuracy'):.3f}, new {held('new', 'accuracy'):.3f})")
    print(flush=True)


class JudgeLoad:
    """While inside: `workers` sandbox processes kept busy judging a program that burns
    `burn_ms` of CPU per test, from a thread of this process, as a run's judge loads the host."""

    def __init__(self, workers: int, burn_ms: float = 200.0):
        self.workers, self.burn_ms = workers, burn_ms

    def __enter__(self):
        import threading

        from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample

        self.stop = threading.Event()
        self.evaluator = Evaluator(EvaluatorConfig(workers=self.workers))
        problem = tiny_add_problems(1)[0]
        burn = CannedPrograms(self.evaluator, self.burn_ms).programs[2]
        samples = [Sample(problem.id, code=burn) for _ in range(self.workers * 4)]

        def loop():
            while not self.stop.is_set():
                self.evaluator.evaluate([problem], samples)

        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.evaluator.close()


def compare_vllm(args, problems, evaluator, tmp: Path) -> None:
    import contextlib

    results: dict[tuple[str, str], list[dict]] = {}
    loads = ("quiet", "judge") if args.load_workers else ("quiet",)
    for round_index in range(args.rounds):
        for load in loads:
            for engine in ("generate", "vllm"):
                trainer, tokens, config = build("ours", args, problems, evaluator,
                                                tmp / f"vllm-{round_index}-{load}-{engine}",
                                                [f"use_vllm={engine == 'vllm'}"])
                timer = step_timer(config.updates_per_step, tokens)
                trainer.add_callback(timer)
                sampling: list[float] = []
                inner = trainer.sample_rows  # the hook TRL's sampling calls (trl_hooks.py)

                def timed(*a, _inner=inner, _sampling=sampling, **kw):
                    start = time.perf_counter()
                    output = _inner(*a, **kw)
                    _sampling.append(time.perf_counter() - start)
                    return output

                trainer.sample_rows = timed
                before = os.getloadavg()[0]
                with JudgeLoad(args.load_workers) if load == "judge" else contextlib.nullcontext():
                    trainer.train()
                import json

                metrics = [json.loads(line) for line in
                           (tmp / f"vllm-{round_index}-{load}-{engine}" / "metrics.jsonl").read_text().splitlines()]
                metrics = [record for record in metrics if "reward_mean" in record][1:]
                result = {"sampling": sampling[1:], "times": timer.times[1:], "tokens": timer.tokens[1:],
                          "metrics": metrics, "load": (before, os.getloadavg()[0])}
                results.setdefault((load, engine), []).append(result)
                del trainer
                if engine == "vllm":  # TRL's colocate engine left a process group: the next trainer would wrap in DDP
                    from microcoder.policy.vllm_hooks import release_distributed_state

                    release_distributed_state()
                print(f"round {round_index} {load:>5} {engine:>8}: sampling "
                      + " ".join(f"{t:.1f}s" for t in result["sampling"]) + ", step "
                      + " ".join(f"{t:.1f}s" for t in result["times"])
                      + f" (host load average {before:.1f} -> {result['load'][1]:.1f})", flush=True)

    def total(load, engine, key):
        return sum(value for result in results[(load, engine)] for value in result[key])

    def mean_metric(load, engine, key):
        values = [record[key] for result in results[(load, engine)] for record in result["metrics"] if key in record]
        return statistics.mean(values) if values else float("nan")

    print(f"\n{'load':<7}{'engine':<10}{'sampling s':>12}{'step s':>9}{'tokens/s':>10}{'reward':>8}"
          f"{'length':>8}{'entropy':>9}")
    for load in loads:
        for engine in ("generate", "vllm"):
            step = total(load, engine, "times")
            print(f"{load:<7}{engine:<10}{total(load, engine, 'sampling'):>12.2f}{step:>9.2f}"
                  f"{total(load, engine, 'tokens') / step:>10.1f}{mean_metric(load, engine, 'reward_mean'):>8.3f}"
                  f"{mean_metric(load, engine, 'response_length_mean'):>8.1f}{mean_metric(load, engine, 'entropy'):>9.3f}")
    for load in loads:
        sampling = total(load, "generate", "sampling") / total(load, "vllm", "sampling")
        step = total(load, "generate", "times") / total(load, "vllm", "times")
        print(f"ratio generate / vLLM, {load}: sampling {sampling:.2f}x, step {step:.2f}x", flush=True)
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="tiny, smollm2-135m-instruct, or a checkpoint path")
    parser.add_argument("--config", action="append", default=None,
                        help="config file (repeat to layer them, later keys winning); "
                             "default configs/microcoder-tiny.yaml")
    parser.add_argument("--steps", type=int, default=4, help="rollout steps per run (the first is warm-up)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each variant, alternating")
    parser.add_argument("--problems", choices=("bench", "config"), default="bench",
                        help="bench: 16 one-line add problems (short prompts); config: the config's training problems")
    parser.add_argument("--compare", default=",".join(DEFAULT_COMPARISONS),
                        help=f"comma-separated, of {', '.join(COMPARISONS)} (default: all but vllm, which "
                             "runs in the vLLM environment on a model from a checkpoint)")
    parser.add_argument("--chunks", type=int, default=2, help="overlap: rollout_chunks of both runs")
    parser.add_argument("--judge-ms", type=float, default=100.0, help="overlap: CPU ms per test of the slow program")
    parser.add_argument("--against", default=None,
                        help="phases: a commit (or a checkout's path) whose step runs beside ours, e.g. 0fe4f08")
    parser.add_argument("--heldout", type=int, default=16, help="phases: held-out problems evaluated after each run")
    parser.add_argument("--load-workers", type=int, default=2,
                        help="vllm: sandbox workers loading the host in the 'judge' runs (0: quiet runs only)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny model, 2 steps of 8-token responses, the phases only (seconds; for the test suite)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # phases: write one run's phases as JSON here
    parser.add_argument("--tree", help=argparse.SUPPRESS)  # ... with this checkout first on sys.path
    parser.add_argument("overrides", nargs="*", help="key=value config overrides for every run")
    args = parser.parse_args()
    if args.tree:  # an older checkout's package, not this one's
        sys.path[0:1] = [args.tree]
        for name in [name for name in sys.modules if name == "microcoder" or name.startswith("microcoder.")]:
            del sys.modules[name]
    if args.smoke:
        args.model, args.steps, args.rounds, args.compare, args.heldout = "tiny", 2, 1, "phases", 4
        args.judge_ms = 5.0
        args.overrides = [*args.overrides, "max_new_tokens=8", "train_top_layers=1"]
    if args.config is None:
        args.config = [str(Path(__file__).resolve().parents[1] / "configs" / "microcoder-tiny.yaml")]
    args.compare = args.compare.split(",")
    if set(args.compare) - set(COMPARISONS):
        parser.error(f"--compare: valid: {', '.join(COMPARISONS)}")
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step is warm-up)")

    import torch
    import transformers

    from microcoder.evaluator import Evaluator, EvaluatorConfig

    transformers.utils.logging.disable_progress_bar()
    if args.worker:
        worker(args)
        return
    print(f"torch threads {torch.get_num_threads()}, model {args.model}, configs {args.config}, "
          f"overrides {args.overrides}, {args.steps} steps x {args.rounds} rounds\n", flush=True)
    if args.problems == "bench":
        problems = tiny_add_problems(16)
    else:
        from microcoder.training.config import load_config
        from microcoder.training.run import load_problem_split

        problems = load_problem_split(load_config(args.config, args.overrides))[0]
    comparisons = {"trl": compare_trl, "generate": compare_generate, "checkpointing": compare_checkpointing,
                   "overlap": compare_overlap, "phases": compare_phases, "vllm": compare_vllm}
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator, tempfile.TemporaryDirectory() as tmp:
        for name in args.compare:
            print(f"== {name}", flush=True)
            comparisons[name](args, problems, evaluator, Path(tmp) / name)


if __name__ == "__main__":
    main()
