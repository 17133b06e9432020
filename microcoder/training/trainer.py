"""MicroCoder-GRPO, with GRPO and DAPO beside it, as a thin subclass of TRL's GRPOTrainer.

One rollout step, top to bottom (every piece of math comes from `microcoder.algorithms`):

    1. temperature  T for this step: staged schedule or adaptive controller; set on BOTH
                    the sampler and the fused LM head that computes training log-probs.
    2. rollout      TRL samples G responses per prompt at T, in `rollout_chunks` calls
                    (and the old / reference log-probs at T).
    3. score        `EvaluatorReward`: extract each program, run it in the sandbox (an
                    identical program judged once: the verdict cache), 0/1 reward or the
                    fraction of tests passed (`reward_mode`), plus DAPO's overlong
                    penalty when configured; with `reward_overlap` each chunk is judged
                    in the background as soon as it is sampled, behind the next chunk
                    and the log-prob passes; a judge_error is unscorable (reward None:
                    no reward, advantage 0, out of the group's baseline).
       refill       DAPO's dynamic sampling: while fewer than train_batch_size groups
                    have mixed rewards, sample more prompts (at most
                    `dynamic_sampling_max_rounds` extra rounds) and keep the mixed groups.
    4. advantage    `group_advantages` x the `truncation_mask` keep (none, conditional,
                    all), then the DAPO group filter (`dynamic_sampling_filter`).
    5. update       `clipped_policy_loss` (eps_low / eps_high / dual clip) + beta * KL,
                    reduced by `aggregate_loss`; train_batch_size / ppo_mini_batch_size
                    optimizer updates per step (TRL's buffered generation batch).
    6. log          one line of metrics.jsonl and one console line; held-out accuracy
                    every `eval_every` steps.

Old log-probs (the ratio's denominator) exist when a rollout feeds more than one
optimizer update (train_batch_size > ppo_mini_batch_size, or ppo_epochs > 1): TRL then
computes them at T right after sampling, and the ratio of every later update moves.
With one update per rollout the ratio is exactly 1 and clipping never acts.

Steps 1-4 are `MicroCoderTrainer.rollout`, step 5 its `policy_loss`, step 6 `_finish_step`
(called after the step's last optimizer update).
The reward is `reward.py`; the run around the trainer (run directory, model, problems,
resume, summary) is `run.py`; the metrics line and its console line are `metrics.py`.

Where this class meets TRL's private methods (the rollout, the log-prob pass, the
sampling, the loss, checkpoints, the fused head's temperature) is `trl_hooks.py`, which
states the TRL version it was read against and checks it; what TRL does that we undo or
avoid, and why, is docs/training.md ("TRL 1.16.0 traps, and what we do").

Departures from the paper (and from DAPO), all ours:
- Dynamic sampling's extra prompts are drawn uniformly from the training set by a seeded
  generator of ours (saved in checkpoints), not taken from the next batches of the data
  loader as verl's DAPO recipe does. When the cap of extra rounds is reached, the batch
  is filled with unmixed groups that carry no weight (advantage 0, tokens out of the
  normaliser): the step trains on the mixed groups it found.
- token-mean aggregation is over each micro-batch, then averaged over the micro-batches
  of an update (as verl's actor does with gradient accumulation); it equals the exact
  token mean of the mini-batch when micro_batch_size covers the whole mini-batch.
- A response is truncated when it reached max_new_tokens without an EOS (a response
  ending with EOS exactly at the limit finished).
- Held-out accuracy is greedy pass@1 by default (`heldout_temperature: 0`, one response
  per problem); `heldout_temperature: T` with `heldout_samples: n` gives sampled pass@1,
  as the paper reports it.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PrinterCallback, ProgressCallback, TrainerCallback
from trl import GRPOConfig

from microcoder.algorithms import (
    aggregate_loss,
    batch_diversity,
    clipped_policy_loss,
    dynamic_sampling_filter,
    group_advantages,
    is_repetitive,
    is_truncated,
    kl_estimate,
    non_incorrect,
    truncation_mask,
)
from microcoder.algorithms.masking import TruncationMask
from microcoder.evaluator import Sample, summarize
from microcoder.problems import Problem
from microcoder.training.config import TrainConfig
from microcoder.training.frozen_prefix import FrozenPrefix, decoder_layers
from microcoder.training.metrics import METRIC_KEYS, METRICS_FILE, console_line
from microcoder.training.reward import EvaluatorReward, ScoredBatch, chunk_bounds, concat_scored
from microcoder.training.rollouts import merge_rollouts
from microcoder.training.scoring import completion_log_probs, final_norm
from microcoder.training.temperature import AdaptiveTemperature, StagedSchedule
from microcoder.training.trl_hooks import TRLHooks
from microcoder.training.vllm_rollout import VLLM_METRIC_KEYS, correction_stats, heldout_generate

STATE_FILE = "microcoder_state.json"


@dataclass
class Sampling:
    """How a step's batch was gathered (global counts)."""

    groups_generated: int
    rounds: int
    """Generation rounds: 1, plus the extra rounds of dynamic sampling."""
    rewards: list[float]
    """Process-local rewards of every generated response, all rounds (groups the filter dropped included)."""
    correct: list[float]
    """Process-local 0/1 correctness (NaN unscorable) of every generated response, all rounds."""


@dataclass
class StepAdvantages:
    """What `compute_advantages` decides for the process-local responses of one rollout."""

    advantages: torch.Tensor
    """(B,) group advantage x truncation keep x group keep; 0 for unscorable responses."""
    mask: TruncationMask
    truncated: torch.Tensor
    """(B,) bool: reached max_new_tokens without EOS."""
    loss_keep: torch.Tensor | None
    """(B,) float or None: 0 takes a response's tokens out of the loss and its normaliser (mask 'all', DAPO filter)."""
    group_keep: torch.Tensor | None
    """(B,) float or None: the DAPO filter, 1 for responses of groups with mixed correctness."""


def problem_scores(results) -> dict[str, float]:
    """{problem id: accepted / judged samples}, judge errors left out (pass@1 per problem)."""
    tally: dict[str, list[int]] = {}
    for result in results:
        if result.verdict != "judge_error":
            counts = tally.setdefault(result.problem_id, [0, 0])
            counts[0] += 1
            counts[1] += result.verdict == "accepted"
    return {problem_id: accepted / judged for problem_id, (judged, accepted) in tally.items()}


# ---- the trainer ----------------------------------------------------------------------------

class MicroCoderTrainer(TRLHooks):
    """GRPOTrainer with our temperature control, advantages, masks, loss and metrics (TRL's
    private methods reach them through `TRLHooks`)."""

    def __init__(self, *, config: TrainConfig, model, tokenizer, train_dataset, reward: EvaluatorReward,
                 args: GRPOConfig, heldout: Sequence[Problem] = (), run_dir: str | Path | None = None):
        super().__init__(model=model, reward_funcs=[reward], args=args, train_dataset=train_dataset,
                         processing_class=tokenizer)
        self.config = config
        self.reward = reward
        self.heldout = list(heldout)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.schedule = StagedSchedule(config.temperature_stages)
        self.controller = None
        if config.temperature_control == "adaptive":
            self.controller = AdaptiveTemperature(
                [t for _, t in config.temperature_stages], floor=config.adaptive_diversity_floor,
                average_window=config.adaptive_average_window, patience=config.adaptive_patience,
                min_dwell=config.adaptive_min_dwell)
        # U(0,1) draws of the truncation mask: its own seeded stream, saved in checkpoints.
        self.mask_generator = torch.Generator().manual_seed(config.seed * 1000 + self.accelerator.process_index)
        # Prompts of dynamic sampling's extra rounds: another seeded stream, also saved.
        self.refill_generator = torch.Generator().manual_seed(config.seed * 1000 + 500 + self.accelerator.process_index)
        if config.dynamic_sampling and config.train_batch_size % self.accelerator.num_processes:
            raise ValueError(f"dynamic_sampling: train_batch_size ({config.train_batch_size}) must be a multiple of "
                             f"the process count ({self.accelerator.num_processes}) so that each holds whole groups")
        self.rollout_record: dict = {}
        self.rollout_scored: ScoredBatch | None = None  # the last rollout's rows, in the order TRL trains on them
        self.update_stats: dict[str, list[float]] = defaultdict(list)
        self.scored_at = 0.0
        self.last_record: dict | None = None
        self.totals = {"groups_generated_total": 0, "responses_judged_total": 0, "seconds_total": 0.0}
        self.heldout_scores: dict[str, dict[str, float]] = {}
        """Per held-out problem, the share of its samples accepted, of the last evaluation (by metric name)."""
        self.frozen_prefix = None
        layers = len(decoder_layers(self.accelerator.unwrap_model(self.model)))
        if config.reuse_frozen_prefix and config.train_top_layers is not None and config.train_top_layers < layers:
            self.frozen_prefix = FrozenPrefix(layers - config.train_top_layers)
        self.remove_callback(PrinterCallback)
        self.remove_callback(ProgressCallback)
        self.add_callback(_StepEnd(self))

    @property
    def rollout_step(self) -> int:
        """Rollout steps completed so far."""
        return self.state.global_step // self.config.updates_per_step

    # ---- steps 1-4: temperature, rollout, score, advantage ----------------------------------
    def rollout(self, inputs: list[dict]) -> dict:
        """One training rollout of the generation batch `inputs` (TRL's layout: each prompt's
        row group_size times), with our advantages and masks in the dict TRL trains on."""
        step = self.rollout_step + 1
        temperature = self.controller.temperature if self.controller else self.schedule.temperature(step)
        self.set_temperature(temperature)  # 1
        if self.frozen_prefix is not None:
            self.frozen_prefix.clear()  # a new rollout: its rows are new
        start = time.perf_counter()
        output, scored = self.sample_and_score(inputs)  # 2, 3: sample, old log-probs, reward
        groups = self.accelerator.num_processes * len(scored.verdicts) // self.config.group_size
        sampling = Sampling(groups_generated=groups, rounds=1, rewards=list(scored.rewards),
                            correct=list(scored.correct))
        if self.config.dynamic_sampling:  # refill
            output, scored, sampling = self.sample_mixed_groups(output, scored)
        self.rollout_scored = scored
        correction = correction_stats(output, self.config.vllm_importance_sampling_cap) if self.use_vllm else {}
        decided = self.compute_advantages(scored)  # 4
        output["advantages"] = decided.advantages.to(output["advantages"].device)
        if decided.loss_keep is not None:  # the response leaves the loss and its normaliser
            mask = output["completion_mask"]
            output["completion_mask"] = mask * decided.loss_keep.to(mask).unsqueeze(1)
        output["num_items_in_batch"] = self.accelerator.gather(output["completion_mask"].sum()).sum()
        seconds_total = time.perf_counter() - start
        self.record_rollout(step, temperature, scored, decided, sampling,
                            seconds_rollout=seconds_total - scored.seconds_visible, seconds_reward=scored.seconds,
                            seconds_reward_visible=scored.seconds_visible)
        self.rollout_record.update(correction)
        return output

    def completion_log_probs(self, model, input_ids, attention_mask, logits_to_keep: int, batch_size: int | None,
                             compute_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """TRL's log-probs (and entropies), each (B, K), of the completion tokens, batch by
        batch, the LM head run on the completion positions only (`scoring`), each batch
        starting from the frozen layers' recorded output when this rollout has seen its rows.
        None for a model without a final norm (TRL's own pass is used)."""
        unwrapped = self.accelerator.unwrap_model(model)
        norm = final_norm(unwrapped)
        if norm is None:
            return None
        batch_size = batch_size or input_ids.size(0)
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids, mask = input_ids[start:start + batch_size], attention_mask[start:start + batch_size]
            replay = (self.frozen_prefix.around_forward(unwrapped, ids, mask)
                      if self.frozen_prefix is not None else contextlib.nullcontext())
            with replay, self.accelerator.autocast():
                part = completion_log_probs(model, norm, ids, mask, logits_to_keep)
            logps.append(part[0])
            entropies.append(part[1])
        return torch.cat(logps), torch.cat(entropies) if compute_entropy else None

    def sample_and_score(self, inputs: list[dict]) -> tuple[dict, ScoredBatch]:
        """TRL's rollout of `inputs` (sample, old / reference log-probs, reward) and its
        scored batch, the reward told the rows' problems first so that it can judge each
        chunk as soon as it is sampled."""
        self.reward.begin_round([row["problem_id"] for row in inputs])
        return self.trl_rollout(inputs)

    def score(self, inputs: list[dict], completions: list[str], completion_ids: list[list[int]]) -> ScoredBatch:
        """The reward's scored batch of a round's process-local responses (TRL's hook hands
        it to `sample_and_score`, and TRL's rewards are taken from it)."""
        return self.reward.score(completions, completion_ids, [row["problem_id"] for row in inputs])

    def sample_rows(self, prompt_ids: list[list[int]], sample, text_only: bool):
        """TRL's sampling (`sample`, rows -> (completion ids, vLLM log-probs or None)) of the
        process-local rows, in `rollout_chunks` calls (training rollouts, HF generate), each
        chunk handed to the reward's early judging when sampled.

        Chunks are consecutive rows; each `generate` call left-pads its chunk to the chunk's
        longest prompt and draws from the torch random stream where the previous one
        stopped, so the samples depend on `rollout_chunks` (not on `reward_overlap`).
        """
        chunks = self.config.rollout_chunks if self.model.training else 1
        if chunks > 1 and (self.use_vllm or not text_only):
            raise NotImplementedError("rollout_chunks > 1 samples text prompts with HF generate only")
        completion_ids: list[list[int]] = []
        logprobs = None
        shared = self.config.shared_prefill and self.model.training and not self.use_vllm and text_only
        for start, end in chunk_bounds(len(prompt_ids), chunks):
            with self.shared_prefill() if shared else contextlib.nullcontext():
                ids, logprobs = sample(prompt_ids[start:end])
            completion_ids += ids
            # Decoded as TRL decodes them for the reward (prompts are plain text); only when
            # the reward judges early, since TRL decodes the whole batch again afterwards.
            if self.model.training and self.reward.overlap:
                self.reward.judge_early(start, self.processing_class.batch_decode(ids, skip_special_tokens=True))
        return completion_ids, logprobs  # logprobs: vLLM's (one chunk), None from HF generate

    def sample_mixed_groups(self, output: dict, scored: ScoredBatch) -> tuple[dict, ScoredBatch, Sampling]:
        """DAPO's dynamic sampling: a batch of groups whose correctness differs, refilled.

        While some process holds fewer mixed groups than it has groups per rollout,
        sample that many more prompts (drawn by `refill_generator`) and score them, for at
        most `dynamic_sampling_max_rounds` extra rounds. The batch is then the first mixed
        groups in sampling order, filled up, when the rounds ran out, with unmixed groups
        of the first round (the group filter in `compute_advantages` gives them no weight).
        Every process runs the same number of rounds (TRL gathers inside each).
        """
        size = self.config.group_size
        wanted = len(scored.verdicts) // size  # this process's groups per rollout
        rounds = [(output, scored)]
        mixed = [self.mixed_groups(scored)]
        while len(rounds) <= self.config.dynamic_sampling_max_rounds and self.any_process_short(
                sum(len(groups) for groups in mixed), wanted):
            rows = self.draw_prompts(wanted)
            rounds.append(self.sample_and_score(rows))
            mixed.append(self.mixed_groups(rounds[-1][1]))
        chosen: list[list[int]] = [[] for _ in rounds]  # group indices taken from each round
        taken = 0
        for index, groups in enumerate(mixed):
            chosen[index] = groups[: wanted - taken]
            taken += len(chosen[index])
        fill = [group for group in range(wanted) if group not in mixed[0]][: wanted - taken]
        chosen[0] = chosen[0] + fill
        selected = [(rounds[index], [group * size + offset for group in groups for offset in range(size)])
                    for index, groups in enumerate(chosen) if groups]
        merged = merge_rollouts([(round_output, rows) for (round_output, _), rows in selected],
                                self.processing_class.pad_token_id)
        # Judging (and waiting) time counts every round, the discarded groups' too.
        merged_scored = concat_scored([round_scored.take(rows) for (_, round_scored), rows in selected],
                                      seconds=sum(round_scored.seconds for _, round_scored in rounds),
                                      seconds_visible=sum(round_scored.seconds_visible for _, round_scored in rounds))
        generated = self.accelerator.num_processes * wanted * len(rounds)
        return merged, merged_scored, Sampling(
            groups_generated=generated, rounds=len(rounds),
            rewards=[value for _, round_scored in rounds for value in round_scored.rewards],
            correct=[value for _, round_scored in rounds for value in round_scored.correct])

    def mixed_groups(self, scored: ScoredBatch) -> list[int]:
        """Indices of the process-local groups whose task rewards (the reward mode's, before shaping) differ."""
        keep = dynamic_sampling_filter(torch.tensor(scored.task_rewards), self.config.group_size).group_keep
        return torch.nonzero(keep).squeeze(-1).tolist()

    def any_process_short(self, mixed: int, wanted: int) -> bool:
        """True when some process has fewer than `wanted` mixed groups (all processes agree)."""
        short = torch.tensor([float(mixed < wanted)], device=self.accelerator.device)
        return bool(self.accelerator.gather(short).sum().item() > 0)

    def draw_prompts(self, count: int) -> list[dict]:
        """`count` training rows, each repeated group_size times, as TRL's sampler lays them out."""
        size = len(self.train_dataset)
        if count <= size:
            indices = torch.randperm(size, generator=self.refill_generator)[:count]
        else:
            indices = torch.randint(size, (count,), generator=self.refill_generator)
        return [self.train_dataset[int(index)] for index in indices for _ in range(self.config.group_size)]

    def compute_advantages(self, scored: ScoredBatch) -> StepAdvantages:
        """Advantages of the process-local responses: group-normalised, x truncation keep, x group filter.

        Rewards are gathered across processes so that a group split across processes is
        normalised as a whole, then the local slice is taken back. Unscorable responses
        (NaN) are out of their group's baseline and get advantage 0.
        """
        local = len(scored.rewards)
        rank_slice = slice(self.accelerator.process_index * local, (self.accelerator.process_index + 1) * local)
        rewards = self.accelerator.gather(torch.tensor(scored.rewards, device=self.accelerator.device)).cpu()
        advantages = group_advantages(rewards, self.config.group_size, self.config.advantage_mode,
                                      self.config.advantage_eps)[rank_slice]
        truncated = torch.tensor([is_truncated(ids, self.config.max_new_tokens, self.eos_token_ids)
                                  for ids in scored.completion_ids], dtype=torch.bool)
        mask = truncation_mask(
            self.config.truncation_mask,
            truncated=truncated,
            non_incorrect=[non_incorrect(verdict) for verdict in scored.verdicts],
            repetitive=[is_repetitive(ids, self.config.repetition_m) for ids in scored.completion_ids],
            rho=self.config.truncation_mask_rho,
            generator=self.mask_generator,
        )
        advantages = advantages * mask.keep
        loss_keep = mask.keep.clone() if self.config.truncation_mask == "all" else None
        group_keep = None
        if self.config.dynamic_sampling:
            # on the reward mode's reward before the overlong penalty (binary: correctness)
            task = self.accelerator.gather(torch.tensor(scored.task_rewards, device=self.accelerator.device)).cpu()
            kept = dynamic_sampling_filter(task, self.config.group_size).group_keep
            group_keep = kept.repeat_interleave(self.config.group_size)[rank_slice].to(advantages.dtype)
            advantages = advantages * group_keep
            loss_keep = group_keep if loss_keep is None else loss_keep * group_keep
        return StepAdvantages(advantages, mask, truncated, loss_keep, group_keep)

    # ---- step 5: update -----------------------------------------------------------------------
    def policy_loss(self, inputs: dict, logp: torch.Tensor, entropies: torch.Tensor) -> torch.Tensor:
        """The loss of one micro-batch from its log-probs and entropies (B, K) at T; the
        update's statistics are recorded on the way."""
        completion_mask = inputs["completion_mask"]
        old_logp = inputs.get("old_per_token_logps")
        old_logp = logp.detach() if old_logp is None else old_logp  # on-policy: ratio 1, gradient of logp
        per_token_loss, clip = clipped_policy_loss(
            logp, old_logp, inputs["advantages"], completion_mask,
            eps_low=self.config.eps_low, eps_high=self.config.eps_high, dual_clip=self.config.dual_clip)
        if "importance_sampling_ratio" in inputs:  # vLLM sampled: min(pi_train / pi_vllm, cap) per token (TRL's)
            per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]
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
            self.update_stats["ppo_kl"].append(clip["ppo_kl"].item())
            self.update_stats["ratio_deviation"].append(clip["ratio_deviation"].item())
            if self.config.beta > 0:
                self.update_stats["kl"].append(((per_token_kl * completion_mask).sum() / tokens).item())
        return loss

    # ---- step 6: log ----------------------------------------------------------------------------
    def record_rollout(self, step: int, temperature: float, scored: ScoredBatch, decided: StepAdvantages,
                       sampling: Sampling, seconds_rollout: float, seconds_reward: float,
                       seconds_reward_visible: float) -> None:
        """Rollout-side metrics of `step` (over all processes), completed by `_finish_step` after the update."""
        from accelerate.utils import gather_object

        device = self.accelerator.device

        def gathered(values) -> torch.Tensor:
            return self.accelerator.gather(torch.as_tensor(values, dtype=torch.float32, device=device)).cpu()

        rewards, correct, task = gathered(scored.rewards), gathered(scored.correct), gathered(scored.task_rewards)
        # every generated response, DAPO's dropped groups and refill rounds included
        rewards_generated, correct_generated = gathered(sampling.rewards), gathered(sampling.correct)
        lengths = gathered([len(ids) for ids in scored.completion_ids])
        masked = decided.mask.keep == 0
        flags = gathered(torch.stack([decided.truncated, decided.mask.qualifying, masked]).T.float())  # (B, 3)
        all_ids = gather_object(scored.completion_ids)
        size = self.config.group_size
        groups = [all_ids[start:start + size] for start in range(0, len(all_ids), size)]
        mixed = dynamic_sampling_filter(task, size).group_keep
        kept = (gathered(decided.group_keep).view(-1, size)[:, 0] > 0 if decided.group_keep is not None
                else torch.ones(len(groups), dtype=torch.bool))
        self.rollout_record = {
            "step": step,
            "reward_mean": rewards.nanmean().item(),
            "accuracy_mean": correct.nanmean().item(),
            "reward_mean_generated": rewards_generated.nanmean().item(),
            "accuracy_mean_generated": correct_generated.nanmean().item(),
            "response_length_mean": lengths.mean().item(),
            "response_length_max": int(lengths.max().item()),
            "fraction_truncated": flags[:, 0].mean().item(),
            "fraction_qualifying": flags[:, 1].mean().item(),
            "fraction_masked": flags[:, 2].mean().item(),
            "fraction_unscorable": correct.isnan().float().mean().item(),
            "groups_generated": sampling.groups_generated,
            "groups_kept": int(kept.sum().item()),
            "groups_mixed": int(mixed.sum().item()),
            "sampling_rounds": sampling.rounds,
            "diversity": sum(batch_diversity(groups, self.config.diversity_ngram)) / len(groups),
            "temperature": temperature,
            "seconds_rollout": seconds_rollout,
            "seconds_reward": seconds_reward,
            "seconds_reward_visible": seconds_reward_visible,
            "_tokens": lengths.sum().item(),
            "_responses_judged": len(rewards_generated),
        }
        # what the rewards were judged on: the share of hidden tests (not in the statement)
        self.rollout_record["reward_tests_hidden"] = gathered(scored.tests_hidden).nanmean().item()
        if self.reward.cache is not None:
            # responses whose verdict was reused instead of judged, out of all the step's
            self.rollout_record["reward_cache_hit_rate"] = gathered([float(hit) for hit in scored.cache_hits]).mean().item()
        self.update_stats = defaultdict(list)
        self.scored_at = time.perf_counter()

    def _finish_step(self) -> dict:
        """After a step's last optimizer update: complete, evaluate, write and print its record."""
        record = dict(self.rollout_record)
        record["seconds_update"] = time.perf_counter() - self.scored_at
        tokens = record.pop("_tokens")
        judged = record.pop("_responses_judged")
        step = record["step"]
        for key in ("entropy", "ppo_kl", "ratio_deviation", "clip_fraction_low", "clip_fraction_high", "kl", "loss"):
            values = self.update_stats.get(key)
            if values:
                record[key] = sum(values) / len(values)
        # the step's wall time: judging hidden behind sampling is not counted twice
        seconds = record["seconds_rollout"] + record["seconds_reward_visible"] + record["seconds_update"]
        record["tokens_per_second"] = tokens / seconds if seconds > 0 else 0.0
        # the budget so far, for plotting against compute (held-out evaluation not counted)
        self.totals["groups_generated_total"] += record["groups_generated"]
        self.totals["responses_judged_total"] += judged
        self.totals["seconds_total"] += seconds
        record.update(self.totals)
        if self.controller is not None:
            self.controller.observe(record["diversity"])
        if self.is_eval_step(step) and self.accelerator.is_main_process:  # once, not on every process
            # the long evaluation only before the first step and after the last
            record.update(self.heldout_accuracies(long=step == self.config.total_steps))
        record = {key: record[key] for key in METRIC_KEYS + VLLM_METRIC_KEYS if key in record}
        self.log_to_trl({key: value for key, value in record.items() if key != "step"})  # to report_to backends
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

    def heldout_accuracies(self, long: bool = True) -> dict[str, float]:
        """{"heldout_accuracy": at max_new_tokens} plus, with `long` and heldout_long_factor
        set, "heldout_accuracy_long" (at heldout_long_factor x max_new_tokens)."""
        accuracies = {"heldout_accuracy": self.heldout_accuracy(self.config.max_new_tokens, "heldout_accuracy")}
        if long and self.config.heldout_long_factor:
            long_tokens = round(self.config.heldout_long_factor * self.config.max_new_tokens)
            accuracies["heldout_accuracy_long"] = self.heldout_accuracy(long_tokens, "heldout_accuracy_long")
        return accuracies

    def heldout_accuracy(self, max_new_tokens: int, name: str = "heldout_accuracy") -> float:
        """pass@1 on the held-out problems: greedy, or `heldout_samples` samples at
        heldout_temperature, judged robustly whatever judge the reward uses. NaN when
        every sample is a judge_error (nothing was measured: not an accuracy of 0).
        Each problem's share of accepted samples goes to `heldout_scores[name]` (for the
        paired standard error of a gain; a problem whose samples are all judge errors is
        left out, as pass@1 leaves it out)."""
        from microcoder.policy.generation import generate
        from microcoder.policy.prompts import render_prompt

        model = self.accelerator.unwrap_model(self.model)
        tokenizer = self.processing_class
        prompts = [render_prompt(problem, tokenizer) for problem in self.heldout]
        greedy = self.config.heldout_temperature == 0  # n greedy samples would all be the same
        n = 1 if greedy else self.config.heldout_samples
        started = time.monotonic()  # minutes on a CPU: a log shows it begin, its sampling, and its end
        print(f"{name}: {len(prompts)} held-out problems x {n}, up to {max_new_tokens} new tokens", flush=True)
        if self.use_vllm and self.vllm_mode == "colocate":  # the rollout engine, current weights pushed first
            groups = heldout_generate(self, prompts, n=n, max_new_tokens=max_new_tokens,
                                      temperature=self.config.heldout_temperature, top_p=self.config.top_p,
                                      seed=self.config.seed)
        else:
            groups = generate(model, tokenizer, prompts, n=n, max_new_tokens=max_new_tokens,
                              temperature=self.config.heldout_temperature, top_p=self.config.top_p,
                              seed=self.config.seed, batch_size=16, backend="hf")
        samples = [Sample(problem.id, response=sample.text)
                   for problem, group in zip(self.heldout, groups) for sample in group]
        results = self.reward.evaluator.judging("robust").evaluate(self.heldout, samples)
        self.heldout_scores[name] = problem_scores(results)
        # The evaluator's own pass@1: unbiased per problem, broken problems left out.
        accuracy = summarize(results, ks=(1,)).get("pass@1", math.nan)
        print(f"{name}: {accuracy:.3f} in {time.monotonic() - started:.0f} s", flush=True)
        return accuracy

    # ---- checkpoints: our own state beside TRL's ---------------------------------------------------
    def save_own_state(self, folder: Path) -> None:
        """Our state beside TRL's in the checkpoint `folder`; every process saves its own
        generators (as TRL saves rng_state_<rank>.pth)."""
        state = {
            "mask_generator": self.mask_generator.get_state().tolist(),
            "refill_generator": self.refill_generator.get_state().tolist(),
            "controller": self.controller.state_dict() if self.controller else None,
            "rollout_step": self.rollout_step,
            "totals": self.totals,
        }
        (folder / self.state_file).write_text(json.dumps(state), encoding="utf-8")

    @property
    def state_file(self) -> str:
        """This process's state file in a checkpoint: STATE_FILE alone, microcoder_state_<rank>.json with several."""
        if self.accelerator.num_processes == 1:
            return STATE_FILE
        return STATE_FILE.replace(".json", f"_{self.accelerator.process_index}.json")

    def load_own_state(self, folder: Path) -> None:
        """Our state from the checkpoint `folder` being resumed (absent: a checkpoint of TRL's alone)."""
        path = folder / self.state_file
        if path.is_file():
            state = json.loads(path.read_text(encoding="utf-8"))
            self.mask_generator.set_state(torch.tensor(state["mask_generator"], dtype=torch.uint8))
            if "refill_generator" in state:
                self.refill_generator.set_state(torch.tensor(state["refill_generator"], dtype=torch.uint8))
            self.totals.update(state.get("totals", {}))
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
