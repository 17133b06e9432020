"""verl reward manager that gives the reward function the response's tokens and codes its facts into the reward.

Configure it with

    reward.reward_manager.source=importlib
    reward.reward_manager.name=MicroCoderRewardManager
    reward.reward_manager.module.path=pkg://microcoder.integrations.verl.reward_manager
    reward.custom_reward_function.path=pkg://microcoder.integrations.verl.reward
    reward.custom_reward_function.name=compute_score

Why not verl's `naive` manager: it calls the reward function with the decoded text only,
so nothing downstream knows whether a response was truncated or looped. This one does
what `naive` does (decode the valid response of the session's last output, call
`compute_score(data_source, solution_str, ground_truth, extra_info)` with extra_info
holding `num_turns`, `rollout_reward_scores` and a tool agent's extra fields, return its
dict as reward_extra_info) and adds:

- `extra_info["microcoder"] = {"response_ids": [...], "truncated": bool}`, on a copy of the
  row's extra_info (the G responses to a prompt share one dict). Truncated: the response
  reached `actor_rollout_ref.rollout.response_length` tokens and its last token is none of
  the EOS ids, our TRL trainer's definition: the checkpoint's generation_config EOS ids
  (read from `actor_rollout_ref.model.path`) and the tokenizer's (`eos_token_ids`).
- the reward it returns to verl is `encode_score(score, qualifying, unscorable,
  several_outputs)`: the plain score with the facts in its low bits, which is how they
  reach the `microcoder_grpo` estimator (see `score_bits`). reward_extra_info keeps the
  plain values. several_outputs: verl's agent loop handed over a session of more than one
  output (a multi-turn agent loop that returns one per turn); the response judged is the
  last, as in verl's managers, and the estimator refuses the batch (advantage.py says why).
- a reward function that raises on a response makes that response a judge_error (logged at
  ERROR with the traceback, the exception in reward_extra_info["error"]) instead of
  failing its agent-loop session, which verl would log and then train on the group's
  other responses; the returned keys are ours, as `compute_score` returns them.

The reward function must be ours (`custom_reward_function` as above) or return the same
keys: without `custom_reward_function` verl passes its `default_compute_score`, which
knows nothing of our problems, and the manager refuses it when built.
"""

from __future__ import annotations

import functools
import inspect
import logging
from types import SimpleNamespace
from typing import Any

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
from verl.utils.reward_score import default_compute_score

from microcoder.algorithms.masking import PAPER_REPETITION_M, is_truncated
from microcoder.integrations.verl.reward import judged, mask_facts
from microcoder.integrations.verl.reward import compute_score as microcoder_compute_score
from microcoder.integrations.verl.score_bits import encode_score
from microcoder.policy.generation import eos_token_ids as trainer_eos_token_ids

REQUIRED_KEYS = ("score", "qualifying", "unscorable")
WRONG_REWARD_FUNCTION = (
    "MicroCoderRewardManager needs microcoder's reward function: set "
    "reward.custom_reward_function.path=pkg://microcoder.integrations.verl.reward and "
    "reward.custom_reward_function.name=compute_score (or a function returning the keys "
    f"{', '.join(REQUIRED_KEYS)})")

logger = logging.getLogger(__name__)


def eos_token_ids(model_path: str | None, tokenizer: Any) -> list[int]:
    """Every token id that ends a response, as our TRL trainer counts them: the checkpoint's
    generation_config EOS ids (Qwen3: <|im_end|> and <|endoftext|>) and the tokenizer's.

    Without a readable generation_config.json at `model_path` (a path that is not a local
    checkpoint or a reachable hub id), only the tokenizer's EOS ends a response, with a warning.
    """
    generation_config = None
    if model_path:
        from transformers import GenerationConfig

        try:
            generation_config = GenerationConfig.from_pretrained(model_path)
        except OSError as error:
            logger.warning("no generation_config.json at %s (%s): only the tokenizer's EOS ends a response",
                           model_path, error)
    return trainer_eos_token_ids(SimpleNamespace(generation_config=generation_config), tokenizer)


def is_verls_default_score(compute_score: Any) -> bool:
    """Whether `compute_score` is verl's default_compute_score (as verl's loader passes it,
    possibly inside functools.partial), which verl uses when no custom function is set."""
    while isinstance(compute_score, functools.partial):
        compute_score = compute_score.func
    return compute_score is default_compute_score


class MicroCoderRewardManager(RewardManagerBase):
    """One response at a time, like verl's naive manager, with the mask's facts added (module docstring)."""

    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None, reward_model_tokenizer=None):
        super().__init__(config, tokenizer, compute_score)
        if is_verls_default_score(compute_score):
            raise ValueError(WRONG_REWARD_FUNCTION + "; reward.custom_reward_function.path is not set, so verl "
                             "passed its default_compute_score")
        self.compute_score = compute_score or microcoder_compute_score  # None: built by hand, not by verl's loader
        self.is_async = inspect.iscoroutinefunction(self.compute_score)
        self.max_response_length = int(config.actor_rollout_ref.rollout.response_length)
        self.eos_token_ids = frozenset(eos_token_ids(config.actor_rollout_ref.model.get("path"), tokenizer))
        reward_kwargs = (config.reward.get("custom_reward_function") or {}).get("reward_kwargs") or {}
        self.repetition_m = int(reward_kwargs.get("repetition_m", PAPER_REPETITION_M))

    def truncated(self, response_ids: list[int]) -> bool:
        """Reached the length limit without EOS (ending with an EOS exactly at the limit is finished)."""
        return is_truncated(response_ids, self.max_response_length, self.eos_token_ids)

    def judge_failure(self, error: Exception, extra_info: dict) -> dict:
        """The result for a response whose reward function raised: a judge_error (out of its
        group's baseline, advantage 0), logged at ERROR with the traceback, the exception in
        reward_extra_info["error"]. Raising instead would make verl mark the whole group
        failed and train on its other responses, with the failure only in the worker's log."""
        logger.error("compute_score raised on problem %s; the response counts as a judge_error",
                     extra_info.get("problem_id", "?"), exc_info=error)
        tokens = extra_info["microcoder"]
        return {**judged("judge_error", 0.0, f"{type(error).__name__}: {error}"),
                **mask_facts("judge_error", tokens["response_ids"], tokens["truncated"], self.repetition_m)}

    async def run_single(self, data: DataProto) -> dict:
        # data: one agent-loop session, one row per output (verl's single_turn_agent: one)
        item = data[-1]  # the session's last output is judged, as in verl's managers
        response = item.batch["responses"]
        valid_length = int(item.batch["attention_mask"][-response.shape[-1]:].sum())
        response_ids = response[:valid_length].tolist()
        text = await self.loop.run_in_executor(
            None, lambda: self.tokenizer.decode(response_ids, skip_special_tokens=True))
        extra_info = dict(item.non_tensor_batch.get("extra_info") or {})
        tool_extra_fields = item.non_tensor_batch.get("tool_extra_fields", None)
        if tool_extra_fields is not None:
            extra_info.update(tool_extra_fields.items())
        extra_info["num_turns"] = item.non_tensor_batch.get("__num_turns__", None)
        extra_info["rollout_reward_scores"] = item.non_tensor_batch.get("reward_scores", {})
        extra_info["microcoder"] = {"response_ids": response_ids, "truncated": self.truncated(response_ids)}
        kwargs = {"data_source": item.non_tensor_batch["data_source"], "solution_str": text,
                  "ground_truth": item.non_tensor_batch["reward_model"]["ground_truth"], "extra_info": extra_info}
        try:
            if self.is_async:
                result = await self.compute_score(**kwargs)
            else:
                result = await self.loop.run_in_executor(None, lambda: self.compute_score(**kwargs))
        except Exception as error:  # noqa: BLE001 - one response's judge failed: it is unscorable, not fatal
            result = self.judge_failure(error, extra_info)
        missing = [key for key in REQUIRED_KEYS if not isinstance(result, dict) or key not in result]
        if missing:
            raise ValueError(f"compute_score returned no {missing}: " + WRONG_REWARD_FUNCTION)
        reward = encode_score(float(result["score"]), bool(result["qualifying"]), bool(result["unscorable"]),
                              several_outputs=len(data) > 1)
        return {"reward_score": reward, "reward_extra_info": dict(result)}
