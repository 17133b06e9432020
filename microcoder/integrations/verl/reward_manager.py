"""verl reward manager that gives the reward function the response's tokens and codes its facts into the reward.

Configure it with

    reward.reward_manager.source=importlib
    reward.reward_manager.name=MicroCoderRewardManager
    reward.reward_manager.module.path=pkg://microcoder.integrations.verl.reward_manager
    reward.custom_reward_function.path=pkg://microcoder.integrations.verl.reward
    reward.custom_reward_function.name=compute_score

Why not verl's `naive` manager: it calls the reward function with the decoded text only,
so nothing downstream knows whether a response was truncated or looped. This one does
what `naive` does (decode the valid response, call `compute_score(data_source,
solution_str, ground_truth, extra_info)`, return its dict as reward_extra_info) and adds:

- `extra_info["microcoder"] = {"response_ids": [...], "truncated": bool}`, on a copy of the
  row's extra_info (the G responses to a prompt share one dict). Truncated: the response
  reached `actor_rollout_ref.rollout.response_length` tokens and its last token is not the
  tokenizer's EOS, our TRL trainer's definition.
- the reward it returns to verl is `encode_score(score, qualifying, unscorable)`: the
  plain score with the facts in its low bits, which is how they reach the
  `microcoder_grpo` estimator (see `score_bits`). reward_extra_info keeps the plain values.
"""

from __future__ import annotations

import inspect
from typing import Any

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from microcoder.integrations.verl.reward import compute_score as microcoder_compute_score
from microcoder.integrations.verl.score_bits import encode_score

REQUIRED_KEYS = ("score", "qualifying", "unscorable")


class MicroCoderRewardManager(RewardManagerBase):
    """One response at a time, like verl's naive manager, with the mask's facts added (module docstring)."""

    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None, reward_model_tokenizer=None):
        super().__init__(config, tokenizer, compute_score)
        self.compute_score = compute_score or microcoder_compute_score
        self.is_async = inspect.iscoroutinefunction(self.compute_score)
        self.max_response_length = int(config.actor_rollout_ref.rollout.response_length)
        self.eos_token_id = tokenizer.eos_token_id

    def truncated(self, response_ids: list[int]) -> bool:
        """Reached the length limit without EOS (ending with EOS exactly at the limit is finished)."""
        return len(response_ids) >= self.max_response_length and response_ids[-1] != self.eos_token_id

    async def run_single(self, data: DataProto) -> dict:
        item = data[-1]  # a multi-turn trajectory is judged on its last sequence, as verl's managers do
        response = item.batch["responses"]
        valid_length = int(item.batch["attention_mask"][-response.shape[-1]:].sum())
        response_ids = response[:valid_length].tolist()
        text = await self.loop.run_in_executor(
            None, lambda: self.tokenizer.decode(response_ids, skip_special_tokens=True))
        extra_info = dict(item.non_tensor_batch.get("extra_info") or {})
        extra_info["microcoder"] = {"response_ids": response_ids, "truncated": self.truncated(response_ids)}
        kwargs = {"data_source": item.non_tensor_batch["data_source"], "solution_str": text,
                  "ground_truth": item.non_tensor_batch["reward_model"]["ground_truth"], "extra_info": extra_info}
        if self.is_async:
            result = await self.compute_score(**kwargs)
        else:
            result = await self.loop.run_in_executor(None, lambda: self.compute_score(**kwargs))
        missing = [key for key in REQUIRED_KEYS if key not in result]
        if missing:
            raise ValueError(f"compute_score returned no {missing}: MicroCoderRewardManager needs "
                             "microcoder.integrations.verl.reward.compute_score (or a function returning the same keys)")
        reward = encode_score(float(result["score"]), bool(result["qualifying"]), bool(result["unscorable"]))
        return {"reward_score": reward, "reward_extra_info": dict(result)}
