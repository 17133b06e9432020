"""MicroCoder-GRPO, with GRPO and DAPO beside it, as a thin subclass of TRL's GRPOTrainer.

One rollout step, top to bottom (every piece of math comes from `microcoder.algorithms`):

    1. temperature  T for this step: staged schedule or adaptive controller; set on BOTH
                    the sampler and the fused LM head that computes training log-probs.
    2. rollout      TRL samples G responses per prompt at T (and the old / reference
                    log-probs at T).
    3. score        `EvaluatorReward`: extract each program, run it in the sandbox, 0/1
                    reward, plus DAPO's overlong penalty when configured.
    4. advantage    `group_advantages` x `conditional_truncation_mask` keep, then the
                    DAPO group filter (`dynamic_sampling_filter`) when configured.
    5. update       `clipped_policy_loss` (eps_low / eps_high / dual clip) + beta * KL,
                    reduced by `aggregate_loss`; train_batch_size / ppo_mini_batch_size
                    optimizer updates per step (TRL's buffered generation batch).
    6. log          one line of metrics.jsonl and one console line; held-out accuracy
                    every `eval_every` steps.

Steps 1-4 are `MicroCoderTrainer._generate_and_score_completions`, step 5 its
`_compute_loss`, step 6 `_finish_step` (called after the step's last optimizer update).

What TRL 1.16.0 does that we undo or avoid (measured, see issue 3):
- The fused LM head captures the temperature in a closure when the trainer is built, so
  changing `trainer.temperature` alone changes sampling but not the training log-probs.
  `set_temperature` rewrites that closure cell (and the reference model's) as well.
- `mask_truncated_completions` masks every truncated response and removes its tokens
  from the loss normaliser; the paper's conditional mask zeroes the advantage of a
  random fraction rho of the qualifying responses and keeps their tokens in the
  normaliser. We leave TRL's option off and multiply the advantages by our keep-mask.
- TRL's advantages are recomputed from the same rewards with `group_advantages` (eps
  1e-6 as verl, TRL uses 1e-4); TRL's loss is replaced by ours (verl's clip fractions,
  dual clip, k1/k3, three aggregation modes).

Departures from the paper (and from DAPO), all ours:
- Dynamic sampling drops the groups whose correctness rewards are all equal from the
  loss (advantage 0 and tokens out of the normaliser) but does not sample more prompts
  to refill the batch: the effective batch shrinks instead. DAPO resamples until
  train_batch_size informative groups are collected.
- token-mean aggregation is over each micro-batch, then averaged over the micro-batches
  of an update (as verl's actor does with gradient accumulation); it equals the exact
  token mean of the mini-batch when micro_batch_size covers the whole mini-batch.
- A response is truncated when it reached max_new_tokens without an EOS (a response
  ending with EOS exactly at the limit finished).
- Held-out accuracy is sampled pass@1 (`heldout_samples` at `heldout_temperature`, 4 at
  0.7 by default), as the paper reports it; `heldout_temperature: 0` decodes greedily.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import torch
from transformers import PrinterCallback, ProgressCallback, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from microcoder.algorithms import (
    aggregate_loss,
    batch_diversity,
    clipped_policy_loss,
    conditional_truncation_mask,
    dynamic_sampling_filter,
    group_advantages,
    is_repetitive,
    kl_estimate,
    non_incorrect,
    overlong_penalty,
)
from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample, summarize
from microcoder.problems import Problem
from microcoder.training.config import TrainConfig, dump_config, grpo_arguments
from microcoder.training.plots import METRICS_FILE
from microcoder.training.temperature import AdaptiveTemperature, StagedSchedule

STATE_FILE = "microcoder_state.json"
# The keys of a metrics.jsonl line, in order; "heldout_accuracy" only on eval steps and
# "kl" only when beta > 0. The step-0 line (before training) holds step and heldout_accuracy.
METRIC_KEYS = (
    "step", "reward_mean", "heldout_accuracy", "response_length_mean", "response_length_max",
    "fraction_truncated", "fraction_masked", "diversity", "entropy", "clip_fraction_low",
    "clip_fraction_high", "kl", "temperature", "seconds_rollout", "seconds_reward", "seconds_update",
    "tokens_per_second", "loss",
)


# ---- score -------------------------------------------------------------------------------

@dataclass
class ScoredBatch:
    """What the reward saw and decided for the process-local responses of one rollout.

    TRL calls the reward on the process-local samples, in the same order as the local slice
    of the advantages, so index i here is row i of the local batch.
    """

    verdicts: list[str]
    correct: list[float]
    """The evaluator's 0/1 reward (accepted or not)."""
    rewards: list[float]
    """correct plus the overlong penalty when enabled: what the advantages are computed from."""
    completion_ids: list[list[int]]
    seconds: float


class EvaluatorReward:
    """TRL reward function: judge each response's program with the Evaluator.

    Called by TRL as reward(prompts=, completions=, completion_ids=, problem_id=, ...) with
    the process-local samples; returns one float per sample and keeps the verdicts in
    `last` for the advantage step.
    """

    __name__ = "evaluator"  # TRL names reward functions by __name__

    def __init__(self, evaluator: Evaluator, problems: Sequence[Problem], max_new_tokens: int,
                 overlong_cache_length: int = 0, overlong_penalty_factor: float = 1.0):
        self.evaluator = evaluator
        self.problems = {problem.id: problem for problem in problems}
        self.max_new_tokens = max_new_tokens
        self.overlong_cache_length = overlong_cache_length
        self.overlong_penalty_factor = overlong_penalty_factor
        self.last: ScoredBatch | None = None

    def __call__(self, prompts, completions, completion_ids, problem_id, **_) -> list[float]:
        start = time.perf_counter()
        samples = [Sample(pid, response=text) for pid, text in zip(problem_id, completions, strict=True)]
        results = self.evaluator.evaluate(self.problems, samples)
        verdicts = [result.verdict for result in results]
        correct = [float(result.reward) for result in results]
        rewards = list(correct)
        if self.overlong_cache_length:
            lengths = torch.tensor([len(ids) for ids in completion_ids])
            penalty = overlong_penalty(lengths, self.max_new_tokens, self.overlong_cache_length,
                                       self.overlong_penalty_factor)
            rewards = [r + float(p) for r, p in zip(rewards, penalty)]
        self.last = ScoredBatch(verdicts, correct, rewards, [list(ids) for ids in completion_ids],
                                time.perf_counter() - start)
        return rewards


# ---- temperature reaching the training log-probs ------------------------------------------

def fused_head_temperature_cell(model):
    """The closure cell holding the temperature of TRL's fused LM head on `model`.

    `trl.trainer.utils.add_fused_lm_head` replaces `model.forward` with a closure over
    `temperature`; the training and old/reference log-probs are softmax(logits / that T).
    Writing the cell changes T for every later call, whatever wraps the forward later.
    """
    function = getattr(model.forward, "__func__", model.forward)
    names = function.__code__.co_freevars
    if "temperature" not in names:
        raise RuntimeError("model.forward is not TRL's fused LM head (no `temperature` in its closure); "
                           "trl's internals changed: pin trl==1.16.0 or update fused_head_temperature_cell")
    return function.__closure__[names.index("temperature")]


# ---- the trainer ----------------------------------------------------------------------------

class MicroCoderTrainer(GRPOTrainer):
    """GRPOTrainer with our temperature control, advantages, masks, loss and metrics."""

    def __init__(self, *, config: TrainConfig, model, tokenizer, train_dataset, reward: EvaluatorReward,
                 args: GRPOConfig, heldout: Sequence[Problem] = (), run_dir: str | Path | None = None):
        super().__init__(model=model, reward_funcs=[reward], args=args, train_dataset=train_dataset,
                         processing_class=tokenizer)
        self.config = config
        self.reward = reward
        self.heldout = list(heldout)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.temperature_cells = [fused_head_temperature_cell(self.model)]
        if self.ref_model is not None:
            self.temperature_cells.append(fused_head_temperature_cell(self.accelerator.unwrap_model(self.ref_model)))
        self.schedule = StagedSchedule(config.temperature_stages)
        self.controller = None
        if config.temperature_control == "adaptive":
            self.controller = AdaptiveTemperature(
                [t for _, t in config.temperature_stages], floor=config.adaptive_diversity_floor,
                average_window=config.adaptive_average_window, patience=config.adaptive_patience,
                min_dwell=config.adaptive_min_dwell)
        # U(0,1) draws of the truncation mask: its own seeded stream, saved in checkpoints.
        self.mask_generator = torch.Generator().manual_seed(config.seed * 1000 + self.accelerator.process_index)
        self.rollout_record: dict = {}
        self.update_stats: dict[str, list[float]] = defaultdict(list)
        self.scored_at = 0.0
        self.last_record: dict | None = None
        self.remove_callback(PrinterCallback)
        self.remove_callback(ProgressCallback)
        self.add_callback(_StepEnd(self))

    @property
    def rollout_step(self) -> int:
        """Rollout steps completed so far."""
        return self.state.global_step // self.config.updates_per_step

    def set_temperature(self, temperature: float) -> None:
        """Sample AND compute training / old / reference log-probs at `temperature`."""
        self.temperature = temperature
        if self.use_vllm:  # TRL's vLLM sampler reads its own copy (path not exercised on CPU)
            self.vllm_generation.temperature = temperature
        else:
            self.generation_config.temperature = temperature
            self.generation_kwargs["temperature"] = temperature
        for cell in self.temperature_cells:
            cell.cell_contents = temperature

    # ---- steps 1-4: temperature, rollout, score, advantage ----------------------------------
    def _generate_and_score_completions(self, inputs):
        if not self.model.training:  # TRL's own evaluation loop; unused by run_training
            return super()._generate_and_score_completions(inputs)
        step = self.rollout_step + 1
        temperature = self.controller.temperature if self.controller else self.schedule.temperature(step)
        self.set_temperature(temperature)  # 1
        start = time.perf_counter()
        output = super()._generate_and_score_completions(inputs)  # 2, 3: sample, old log-probs, reward
        scored = self.reward.last
        advantages, _, masked_fraction, truncated_fraction, group_keep = self.compute_advantages(scored)  # 4
        output["advantages"] = advantages.to(output["advantages"].device)
        if group_keep is not None:  # DAPO filter: the group leaves the loss and its normaliser
            output["completion_mask"] = output["completion_mask"] * group_keep.to(output["completion_mask"]).unsqueeze(1)
        seconds_total = time.perf_counter() - start
        self.record_rollout(step, temperature, scored, masked_fraction, truncated_fraction, group_keep,
                            seconds_rollout=seconds_total - scored.seconds, seconds_reward=scored.seconds)
        return output

    def compute_advantages(self, scored: ScoredBatch):
        """Advantages of the process-local responses: group-normalised, x keep-mask, x group filter.

        Returns (advantages (B,), keep (B,), masked fraction, truncated fraction,
        group_keep (B,) or None). Rewards are gathered across processes so that a group split
        across processes is normalised as a whole, then the local slice is taken back.
        """
        local = len(scored.rewards)
        rank_slice = slice(self.accelerator.process_index * local, (self.accelerator.process_index + 1) * local)
        rewards = self.accelerator.gather(torch.tensor(scored.rewards, device=self.accelerator.device)).cpu()
        advantages = group_advantages(rewards, self.config.group_size, self.config.advantage_mode,
                                      self.config.advantage_eps)[rank_slice]
        truncated = [len(ids) >= self.config.max_new_tokens and ids[-1] not in self.eos_token_ids
                     for ids in scored.completion_ids]
        mask = conditional_truncation_mask(
            truncated=truncated,
            non_incorrect=[non_incorrect(verdict) for verdict in scored.verdicts],
            repetitive=[is_repetitive(ids, self.config.repetition_m) for ids in scored.completion_ids],
            rho=self.config.truncation_mask_rho,
            generator=self.mask_generator,
        )
        advantages = advantages * mask.keep
        group_keep = None
        if self.config.dynamic_sampling:
            correct = self.accelerator.gather(torch.tensor(scored.correct, device=self.accelerator.device)).cpu()
            kept = dynamic_sampling_filter(correct, self.config.group_size).group_keep
            group_keep = kept.repeat_interleave(self.config.group_size)[rank_slice].to(advantages.dtype)
            advantages = advantages * group_keep
        return advantages, mask.keep, mask.masked_fraction, mask.truncated_fraction, group_keep

    # ---- step 5: update -----------------------------------------------------------------------
    def _compute_loss(self, model, inputs):
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        logp, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True)  # (B, S) at T
        old_logp = inputs.get("old_per_token_logps")
        old_logp = logp.detach() if old_logp is None else old_logp  # on-policy: ratio 1, gradient of logp
        per_token_loss, clip = clipped_policy_loss(
            logp, old_logp, inputs["advantages"], completion_mask,
            eps_low=self.config.eps_low, eps_high=self.config.eps_high, dual_clip=self.config.dual_clip)
        if self.config.beta > 0:
            per_token_kl = kl_estimate(logp, inputs["ref_per_token_logps"], self.config.kl_estimator)
            per_token_loss = per_token_loss + self.config.beta * per_token_kl * completion_mask
        loss = aggregate_loss(per_token_loss, completion_mask, self.config.loss_aggregation)

        with torch.no_grad():
            tokens = completion_mask.sum().clamp(min=1)
            self.update_stats["loss"].append(loss.item())
            self.update_stats["entropy"].append(((entropies * completion_mask).sum() / tokens).item())
            self.update_stats["clip_fraction_low"].append(clip["clip_frac_low"].item())
            self.update_stats["clip_fraction_high"].append(clip["clip_frac_high"].item())
            if self.config.beta > 0:
                self.update_stats["kl"].append(((per_token_kl * completion_mask).sum() / tokens).item())
        # TRL sets loss_is_scaled_for_ga: the micro-batch losses of an update are summed.
        return loss / self.current_gradient_accumulation_steps

    # ---- step 6: log ----------------------------------------------------------------------------
    def record_rollout(self, step, temperature, scored, masked_fraction, truncated_fraction, group_keep,
                       seconds_rollout, seconds_reward) -> None:
        """Rollout-side metrics of `step`, completed by `_finish_step` after the update."""
        from accelerate.utils import gather_object

        gather = self.accelerator.gather
        device = self.accelerator.device
        rewards = gather(torch.tensor(scored.rewards, device=device)).float()
        lengths = gather(torch.tensor([len(ids) for ids in scored.completion_ids], device=device)).float()
        fractions = gather(torch.tensor([[truncated_fraction, masked_fraction]], device=device)).mean(0)
        all_ids = gather_object(scored.completion_ids)
        size = self.config.group_size
        groups = [all_ids[start:start + size] for start in range(0, len(all_ids), size)]
        self.rollout_record = {
            "step": step,
            "reward_mean": rewards.mean().item(),
            "response_length_mean": lengths.mean().item(),
            "response_length_max": int(lengths.max().item()),
            "fraction_truncated": fractions[0].item(),
            "fraction_masked": fractions[1].item(),
            "diversity": sum(batch_diversity(groups, self.config.diversity_ngram)) / len(groups),
            "temperature": temperature,
            "seconds_rollout": seconds_rollout,
            "seconds_reward": seconds_reward,
            "_tokens": lengths.sum().item(),
        }
        if group_keep is not None:
            self._metrics["train"]["microcoder/groups_kept"].append(gather(group_keep.to(device)).mean().item())
        self.update_stats = defaultdict(list)
        self.scored_at = time.perf_counter()

    def _finish_step(self) -> dict:
        """After a step's last optimizer update: complete, evaluate, write and print its record."""
        record = dict(self.rollout_record)
        record["seconds_update"] = time.perf_counter() - self.scored_at
        tokens = record.pop("_tokens")
        step = record["step"]
        for key in ("entropy", "clip_fraction_low", "clip_fraction_high", "kl", "loss"):
            values = self.update_stats.get(key)
            if values:
                record[key] = sum(values) / len(values)
        seconds = record["seconds_rollout"] + record["seconds_reward"] + record["seconds_update"]
        record["tokens_per_second"] = tokens / seconds if seconds > 0 else 0.0
        if self.controller is not None:
            self.controller.observe(record["diversity"])
        if self.is_eval_step(step):
            record["heldout_accuracy"] = self.heldout_accuracy()
        record = {key: record[key] for key in METRIC_KEYS if key in record}
        for key, value in record.items():  # also through TRL's logging to report_to backends
            if key != "step":
                self._metrics["train"][f"microcoder/{key}"].append(float(value))
        self.write_record(record)
        self.last_record = record
        return record

    def is_eval_step(self, step: int) -> bool:
        every = self.config.eval_every
        return bool(self.heldout) and ((every and step % every == 0) or step == self.config.total_steps)

    def write_record(self, record: dict) -> None:
        if self.run_dir is None or not self.accelerator.is_main_process:
            return
        with open(self.run_dir / METRICS_FILE, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        print(console_line(record, self.config.total_steps), flush=True)

    def heldout_accuracy(self) -> float:
        """pass@1 on the held-out problems: greedy, or `heldout_samples` samples at heldout_temperature."""
        from microcoder.training.generation import generate
        from microcoder.training.prompts import render_prompt

        model = self.accelerator.unwrap_model(self.model)
        tokenizer = self.processing_class
        prompts = [render_prompt(problem, tokenizer) for problem in self.heldout]
        greedy = self.config.heldout_temperature == 0  # n greedy samples would all be the same
        groups = generate(model, tokenizer, prompts, n=1 if greedy else self.config.heldout_samples,
                          max_new_tokens=self.config.max_new_tokens, temperature=self.config.heldout_temperature,
                          top_p=self.config.top_p, seed=self.config.seed, batch_size=16, backend="hf",
                          progress=False)
        samples = [Sample(problem.id, response=sample.text)
                   for problem, group in zip(self.heldout, groups) for sample in group]
        results = self.reward.evaluator.evaluate(self.heldout, samples)
        # The evaluator's own pass@1: unbiased per problem, broken problems left out.
        return summarize(results, ks=(1,)).get("pass@1", 0.0)

    # ---- checkpoints: our own state beside TRL's ---------------------------------------------------
    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if not self.args.should_save:
            return
        folder = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
        state = {
            "mask_generator": self.mask_generator.get_state().tolist(),
            "controller": self.controller.state_dict() if self.controller else None,
            "rollout_step": self.rollout_step,
        }
        (folder / STATE_FILE).write_text(json.dumps(state), encoding="utf-8")

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = Path(checkpoint) / STATE_FILE
        if path.is_file():
            state = json.loads(path.read_text(encoding="utf-8"))
            self.mask_generator.set_state(torch.tensor(state["mask_generator"], dtype=torch.uint8))
            if self.controller is not None and state["controller"] is not None:
                self.controller.load_state_dict(state["controller"])


class _StepEnd(TrainerCallback):
    """Finishes a rollout step after its last optimizer update; saves at the last step."""

    def __init__(self, trainer: MicroCoderTrainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.trainer.config.updates_per_step == 0:
            self.trainer._finish_step()
            if state.global_step >= state.max_steps:
                control.should_save = True
        return control


def console_line(record: dict, total_steps: int) -> str:
    """One compact line per step."""
    if set(record) == {"step", "heldout_accuracy"}:
        return f"step {record['step']:>3}/{total_steps}  held-out accuracy {record['heldout_accuracy']:.3f}"
    parts = [
        f"step {record['step']:>3}/{total_steps}",
        f"T {record['temperature']:.2f}",
        f"reward {record['reward_mean']:.3f}",
        f"len {record['response_length_mean']:.0f}/{record['response_length_max']}",
        f"trunc {record['fraction_truncated']:.2f}",
        f"masked {record['fraction_masked']:.2f}",
        f"div {record['diversity']:.2f}",
        f"H {record.get('entropy', float('nan')):.2f}",
        f"clip {record.get('clip_fraction_low', float('nan')):.3f}/{record.get('clip_fraction_high', float('nan')):.3f}",
    ]
    if "kl" in record:
        parts.append(f"kl {record['kl']:.4f}")
    parts += [
        f"loss {record.get('loss', float('nan')):+.4f}",
        f"{record['seconds_rollout']:.1f}+{record['seconds_reward']:.1f}+{record['seconds_update']:.1f}s",
        f"{record['tokens_per_second']:.0f} tok/s",
    ]
    if "heldout_accuracy" in record:
        parts.append(f"held-out {record['heldout_accuracy']:.3f}")
    return "  ".join(parts)


# ---- the entry point ------------------------------------------------------------------------------

def load_model(config: TrainConfig, run_dir: Path):
    """(model, tokenizer) named by config.model: "tiny", the default id, or a path.

    "tiny" is written to run_dir/tiny_model first and loaded from there, so that the model
    has a path: TRL rebuilds the reference model (beta > 0) from the policy's path.
    """
    from microcoder.training.model import load_model_and_tokenizer, save_tiny_model

    name = config.model
    if name == "tiny":
        name = str(save_tiny_model(run_dir / "tiny_model", config.seed))
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
    from microcoder.training.tasks import default_problems, named_problems

    if config.problems == "default":
        train, heldout = default_problems(config.seed)
        heldout = heldout[: config.heldout_size]
    else:
        train, heldout = named_problems(config.problems, "train", config.seed), []
    if config.heldout_problems is not None:
        heldout = named_problems(config.heldout_problems, "heldout", config.seed)
    elif config.problems != "default":
        shuffled = list(train)
        random.Random(config.seed).shuffle(shuffled)
        heldout, train = shuffled[: config.heldout_size], shuffled[config.heldout_size:]
    if not train:
        raise ValueError(f"problems: no training problems left in {config.problems!r}")
    return train, heldout


def _truncate_metrics(path: Path, last_step: int) -> None:
    """Drop metrics lines of steps after the checkpoint being resumed (they will be redone)."""
    if not path.is_file():
        return
    kept = [line for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line)["step"] <= last_step]
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def build_trainer(config: TrainConfig, run_dir: Path, model=None, tokenizer=None,
                  problems: tuple[list[Problem], list[Problem]] | None = None,
                  evaluator: Evaluator | None = None) -> MicroCoderTrainer:
    """A MicroCoderTrainer for `config` writing into `run_dir` (model, problems, evaluator injectable)."""
    from datasets import Dataset

    from microcoder.training.prompts import render_prompt

    if model is None:
        model, tokenizer = load_model(config, run_dir)
    train, heldout = problems if problems is not None else load_problem_split(config)
    if evaluator is None:
        evaluator = Evaluator(EvaluatorConfig(workers=config.reward_workers, time_limit_s=config.reward_time_limit_s))
    reward = EvaluatorReward(evaluator, train + heldout, config.max_new_tokens,
                             config.overlong_cache_length, config.overlong_penalty_factor)
    dataset = Dataset.from_list([{"prompt": render_prompt(problem, tokenizer), "problem_id": problem.id}
                                 for problem in train])
    args = GRPOConfig(**grpo_arguments(config, str(run_dir / "checkpoints"), use_cuda=torch.cuda.is_available()))
    return MicroCoderTrainer(config=config, model=model, tokenizer=tokenizer, train_dataset=dataset,
                             reward=reward, args=args, heldout=heldout, run_dir=run_dir)


def run_training(config: TrainConfig, resume: bool = False,
                 problems: tuple[list[Problem], list[Problem]] | None = None,
                 evaluator: Evaluator | None = None) -> Path:
    """Train; returns the run directory.

    The run directory holds config.yaml (the config snapshot), metrics.jsonl (one line per
    step, plus the step-0 held-out accuracy), checkpoints/checkpoint-N (TRL's, with our
    mask-generator and controller state), summary.json and plots/training.png.
    With `resume`, `config.run_dir` must exist; training continues from its last checkpoint.
    `problems` ((train, held-out)) and `evaluator` replace the configured ones (tests).
    """
    from transformers.trainer_utils import get_last_checkpoint

    import transformers

    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    transformers.utils.logging.disable_progress_bar()  # "Writing model shards" bars at every checkpoint
    # TRL 1.16 calls transformers' deprecated gradient_checkpointing_* names on every rollout.
    warnings.filterwarnings("ignore", category=FutureWarning, message=".*gradient_checkpointing.*")
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    run_dir = Path(config.run_dir or f"runs/train-{datetime.now():%Y%m%d-%H%M%S}")
    checkpoint = None
    if resume:
        checkpoint = get_last_checkpoint(str(run_dir / "checkpoints")) if (run_dir / "checkpoints").is_dir() else None
        if checkpoint is None:
            raise FileNotFoundError(f"--resume: no checkpoint-N under {run_dir / 'checkpoints'}")
        updates = int(Path(checkpoint).name.rsplit("-", 1)[1])
        _truncate_metrics(run_dir / METRICS_FILE, updates // config.updates_per_step)
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / METRICS_FILE).write_text("", encoding="utf-8")
    config = config.model_copy(update={"run_dir": str(run_dir)})
    dump_config(config, run_dir / "config.yaml")

    trainer = build_trainer(config, run_dir, problems=problems, evaluator=evaluator)
    start = time.perf_counter()
    try:
        before = None
        if not resume and trainer.heldout:
            before = trainer.heldout_accuracy()
            trainer.write_record({"step": 0, "heldout_accuracy": before})
        trainer.train(resume_from_checkpoint=checkpoint)
    finally:
        trainer.reward.evaluator.close()
    seconds = time.perf_counter() - start
    after = (trainer.last_record or {}).get("heldout_accuracy")
    if before is None:
        before = _first_heldout(run_dir / METRICS_FILE)
    summary = {"heldout_accuracy_before": before, "heldout_accuracy_after": after, "steps": config.total_steps,
               "seconds": seconds, "heldout_problems": len(trainer.heldout),
               "final_checkpoint": get_last_checkpoint(str(run_dir / "checkpoints"))
               if (run_dir / "checkpoints").is_dir() else None}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    plot = _plot(run_dir)
    if trainer.accelerator.is_main_process:
        print(f"held-out accuracy: before {_fmt(before)}, after {_fmt(after)} "
              f"({len(trainer.heldout)} problems); {seconds / 60:.1f} min; run dir {run_dir}"
              + (f"; plot {plot}" if plot else ""), flush=True)
    return run_dir


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
