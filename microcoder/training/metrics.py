"""What a training step logs: the file, the keys of a metrics.jsonl line, in order, and its console line."""

from __future__ import annotations

METRICS_FILE = "metrics.jsonl"
"""The file in a run directory the trainer appends one line per step to."""

# The keys of a metrics.jsonl line, in order; "heldout_accuracy" only on eval steps
# ("heldout_accuracy_long" too when heldout_long_factor is set), "kl" only when beta > 0 and
# "reward_cache_hit_rate" only with the verdict cache on (reward_cache_size > 0, the default).
# reward_mean / accuracy_mean are over the batch trained on (DAPO: the kept groups, filled
# up with dropped ones when refill ran out); the *_generated pair over every response
# generated in the step (DAPO's dropped groups and refill rounds included; the same numbers
# without dynamic sampling). The *_total keys are the run's budget so far: groups generated,
# responses judged, and step seconds (rollout + visible reward + update; held-out
# evaluation not counted).
# reward_tests_hidden: the share of hidden tests (not in the statement) among the tests the
# step's rewards were judged on (1.0 for problems whose tests are all hidden).
# The step-0 line (before training) holds step and the held-out accuracies.
# Every preset logs the same keys (see docs/training.md, "Metrics").
METRIC_KEYS = (
    "step", "reward_mean", "accuracy_mean", "reward_mean_generated", "accuracy_mean_generated", "heldout_accuracy", "heldout_accuracy_long", "response_length_mean", "response_length_max",
    "fraction_truncated", "fraction_qualifying", "fraction_masked", "fraction_unscorable",
    "groups_generated", "groups_kept", "groups_mixed", "sampling_rounds", "diversity", "entropy",
    "ppo_kl", "ratio_deviation", "clip_fraction_low", "clip_fraction_high", "kl", "temperature",
    "seconds_rollout", "seconds_reward", "seconds_reward_visible", "seconds_update", "tokens_per_second", "loss",
    "reward_cache_hit_rate", "reward_tests_hidden",
    "groups_generated_total", "responses_judged_total", "seconds_total",
)


def console_line(record: dict, total_steps: int) -> str:
    """One compact line per step."""
    if "reward_mean" not in record:  # the step-0 line: held-out accuracy only
        return f"step {record['step']:>3}/{total_steps}  held-out accuracy {_heldout_text(record)}"
    parts = [
        f"step {record['step']:>3}/{total_steps}",
        f"T {record['temperature']:.2f}",
        f"reward {record['reward_mean']:.3f}",
        f"acc {record['accuracy_mean']:.3f}",
        f"len {record['response_length_mean']:.0f}/{record['response_length_max']}",
        f"trunc {record['fraction_truncated']:.2f}",
        f"masked {record['fraction_masked']:.2f}",
        f"groups {record['groups_kept']}/{record['groups_generated']}",
        f"div {record['diversity']:.2f}",
        f"H {record.get('entropy', float('nan')):.2f}",
        f"|r-1| {record.get('ratio_deviation', float('nan')):.4f}",
        f"clip {record.get('clip_fraction_low', float('nan')):.3f}/{record.get('clip_fraction_high', float('nan')):.3f}",
    ]
    if "kl" in record:
        parts.append(f"kl {record['kl']:.4f}")
    parts += [
        f"loss {record.get('loss', float('nan')):+.4f}",
        f"{record['seconds_rollout']:.1f}+{record['seconds_reward_visible']:.1f}+{record['seconds_update']:.1f}s",
        f"{record['tokens_per_second']:.0f} tok/s",
    ]
    if "heldout_accuracy" in record:
        parts.append(f"held-out {_heldout_text(record)}")
    return "  ".join(parts)


def _heldout_text(record: dict) -> str:
    text = f"{record['heldout_accuracy']:.3f}"
    if "heldout_accuracy_long" in record:
        text += f" (long {record['heldout_accuracy_long']:.3f})"
    return text
