"""The math of training and evaluation as pure functions (no I/O, no training framework)."""

# Names resolve on first use (PEP 562), so that importing one submodule (the evaluator
# needs only pass_at_k) does not import torch through the others.
import importlib

_SUBMODULE_OF = {
    "ADVANTAGE_MODES": "advantages",
    "AGGREGATION_MODES": "losses",
    "DEFAULT_RHO": "masking",
    "GroupFilter": "dapo",
    "KL_ESTIMATORS": "losses",
    "NON_INCORRECT_VERDICTS": "masking",
    "PAPER_REPETITION_M": "masking",
    "REWARD_MODES": "rewards",
    "TRUNCATION_MASK_MODES": "masking",
    "TruncationMask": "masking",
    "WRONG_VERDICTS": "masking",
    "aggregate_loss": "losses",
    "batch_diversity": "diversity",
    "clipped_policy_loss": "losses",
    "conditional_truncation_mask": "masking",
    "dynamic_sampling_filter": "dapo",
    "entropy_from_logits": "logprobs",
    "group_advantages": "advantages",
    "group_diversity": "diversity",
    "is_repetitive": "masking",
    "is_truncated": "masking",
    "jaccard_distance": "diversity",
    "kl_estimate": "losses",
    "mean_pass_at_k": "pass_at_k",
    "needs_all_tests": "rewards",
    "ngram_set": "diversity",
    "non_incorrect": "masking",
    "overlong_penalty": "dapo",
    "pass_at_k": "pass_at_k",
    "problem_seed": "rewards",
    "reward_from_tests": "rewards",
    "select_tests": "rewards",
    "token_logprobs": "logprobs",
    "truncation_mask": "masking",
}
__all__ = sorted(_SUBMODULE_OF)


def __getattr__(name: str):
    if name not in _SUBMODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_SUBMODULE_OF[name]}"), name)
    globals()[name] = value
    return value
