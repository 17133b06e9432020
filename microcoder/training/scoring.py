"""Log-probs (and entropies) of a batch's completion tokens, the LM head run on those positions only.

A rollout row is a left-padded prompt of P tokens followed by K completion tokens, and the
old-log-prob, reference and update passes each need the K next-token log-probs at the end
of it. TRL's fused LM head scores only the labelled positions on Triton devices; elsewhere
(CPU) it projects every position of the row through the (V x H) head, P + K - 1 of them,
and its backward does the same. At CPU scale (P ~ 160, K = 64, V = 49,152) that head was
a third of a training step. `last_positions` keeps the final norm's output to the last
K + 1 positions, so the head and its backward see K per row; the final norm acts per
position, so those rows are the full output's rows and only the head's tile shapes (and
so its rounding) change.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn


def final_norm(model) -> nn.Module | None:
    """The norm whose output is the decoder's last hidden state (`model.model.norm` on
    Llama-like models), or None where the model has none by that name."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    return getattr(decoder, "norm", None)


@contextmanager
def last_positions(norm: nn.Module, count: int):
    """Inside, `norm`'s output (B, S, H) keeps its last `count` positions (B, count, H)."""
    handle = norm.register_forward_hook(lambda module, args, output: output[:, -count:])
    try:
        yield
    finally:
        handle.remove()


def completion_log_probs(model, norm: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         logits_to_keep: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log-probs, entropies), each (B, K) for K = logits_to_keep, of a model carrying TRL's
    fused LM head (`add_fused_lm_head`, its temperature included); entropies are None where
    the head was not asked for them. Padding (attention mask 0) scores 0, as in TRL."""
    keep = logits_to_keep + 1  # position t's hidden state scores token t + 1
    labels = input_ids.masked_fill(attention_mask == 0, -100)[:, -keep:]
    with last_positions(norm, keep):
        output = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True)
    return output.log_probs, output.entropy
