"""The math of training and evaluation as pure functions (no I/O, no training framework)."""

from microcoder.algorithms.advantages import ADVANTAGE_MODES, group_advantages
from microcoder.algorithms.dapo import GroupFilter, dynamic_sampling_filter, overlong_penalty
from microcoder.algorithms.diversity import batch_diversity, group_diversity, jaccard_distance, ngram_set
from microcoder.algorithms.logprobs import entropy_from_logits, token_logprobs
from microcoder.algorithms.losses import (
    AGGREGATION_MODES,
    KL_ESTIMATORS,
    aggregate_loss,
    clipped_policy_loss,
    kl_estimate,
)
from microcoder.algorithms.masking import (
    NON_INCORRECT_VERDICTS,
    WRONG_VERDICTS,
    TruncationMask,
    conditional_truncation_mask,
    is_repetitive,
    non_incorrect,
)
from microcoder.algorithms.pass_at_k import mean_pass_at_k, pass_at_k

__all__ = [
    "ADVANTAGE_MODES",
    "AGGREGATION_MODES",
    "KL_ESTIMATORS",
    "NON_INCORRECT_VERDICTS",
    "WRONG_VERDICTS",
    "GroupFilter",
    "TruncationMask",
    "aggregate_loss",
    "batch_diversity",
    "clipped_policy_loss",
    "conditional_truncation_mask",
    "dynamic_sampling_filter",
    "entropy_from_logits",
    "group_advantages",
    "group_diversity",
    "is_repetitive",
    "jaccard_distance",
    "kl_estimate",
    "mean_pass_at_k",
    "ngram_set",
    "non_incorrect",
    "overlong_penalty",
    "pass_at_k",
    "token_logprobs",
]
