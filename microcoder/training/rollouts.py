"""DAPO's refill: the kept rows of several TRL rollouts merged into one rollout's tensors."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def merge_rollouts(parts: Sequence[tuple[dict, Sequence[int]]], pad_token_id: int) -> dict:
    """The rows `rows` of each TRL rollout output (dict of tensors), concatenated in order.

    Tensors of shape (B, S) are padded to the widest S: prompt tensors on the left (TRL
    left-pads prompts), the others on the right; ids with `pad_token_id`, masks and
    log-probs with 0, an importance-sampling ratio with 1. `num_items_in_batch` is
    recomputed by the caller. A field that is not a tensor (multimodal inputs) is refused.
    """
    merged = {}
    for key in parts[0][0]:
        if key == "num_items_in_batch":
            continue
        values = [output[key] for output, _ in parts]
        if not all(isinstance(value, torch.Tensor) and value.dim() in (1, 2) for value in values):
            raise NotImplementedError(f"dynamic sampling cannot merge the rollout field {key!r} (multimodal inputs)")
        chosen = [value[torch.as_tensor(list(rows), dtype=torch.long, device=value.device)]
                  for value, (_, rows) in zip(values, parts)]
        if chosen[0].dim() == 2:
            width = max(value.size(1) for value in chosen)
            fill = {"prompt_ids": pad_token_id, "completion_ids": pad_token_id, "importance_sampling_ratio": 1.0}.get(key, 0)
            left = key.startswith("prompt_")
            chosen = [torch.nn.functional.pad(value, (width - value.size(1), 0) if left else (0, width - value.size(1)),
                                              value=fill) for value in chosen]
        merged[key] = torch.cat(chosen)
    return merged
