"""The frozen layers' output, computed once per rollout and replayed to every later pass.

With `train_top_layers: N` only the top N decoder layers train; the layers below never
change. A rollout's tokens then go through those frozen layers up to three times with the
same result: the old-log-prob pass (when a rollout feeds several updates), the reference
pass (when beta > 0; the reference model is a copy of the initial policy, whose frozen
layers are the policy's by construction) and the forward of every update. `FrozenPrefix`
records the hidden state leaving the last frozen layer the first time a row is seen in a
rollout, and later passes over the same row skip the frozen layers and start from it.

A row is the same row when its token ids, attention mask and padded length are: its
hidden states depend on nothing else (positions come from the padded length, attention
from the mask). Rows not seen yet in this rollout (the first pass, or rows re-padded by
DAPO's merge of sampling rounds) go through every layer, and are recorded. Replayed
states equal recomputed ones up to the rounding of a different batch shape.

Shapes: input_ids and attention_mask (B, S); a recorded row (S, H), H the hidden size.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn


class _PassThrough(nn.Module):
    """Stands in for a frozen layer whose output is replayed: returns its input."""

    def forward(self, hidden_states, *args, **kwargs):
        return hidden_states


class _Replay(nn.Module):
    """Stands in for the last frozen layer: returns the recorded output of the whole prefix."""

    def __init__(self, hidden_states: torch.Tensor):
        super().__init__()
        self.hidden_states = hidden_states

    def forward(self, hidden_states, *args, **kwargs):
        return self.hidden_states.to(device=hidden_states.device, dtype=hidden_states.dtype)


def decoder_layers(model) -> nn.ModuleList:
    """The decoder layers of a causal LM (`model.model.layers`, as `freeze_below_top_layers` uses)."""
    return model.model.layers


class FrozenPrefix:
    """Per-row records of the frozen layers' output for the current rollout (see module doc)."""

    def __init__(self, frozen_layers: int):
        if frozen_layers < 1:
            raise ValueError(f"frozen_layers must be >= 1, got {frozen_layers}")
        self.frozen_layers = frozen_layers
        self.rows: dict[bytes, torch.Tensor] = {}
        self.replayed_rows = 0
        self.computed_rows = 0

    def clear(self) -> None:
        """Forget the rollout's rows (call when a new rollout starts: the policy moved)."""
        self.rows.clear()

    @staticmethod
    def row_key(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> bytes:
        """Identity of one row: its padded length, ids and mask."""
        length = input_ids.shape[-1].to_bytes(4, "little")
        ids = input_ids.detach().to("cpu", torch.int64).numpy().tobytes()
        mask = attention_mask.detach().to("cpu", torch.int8).numpy().tobytes()
        return length + ids + mask

    @contextmanager
    def around_forward(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """Inside, a forward of `model` on these rows skips the frozen layers when every row
        was recorded in this rollout, and otherwise runs them and records the rows."""
        keys = [self.row_key(ids, mask) for ids, mask in zip(input_ids, attention_mask)]
        layers = decoder_layers(model)
        if all(key in self.rows for key in keys):
            recorded = torch.stack([self.rows[key] for key in keys])
            if torch.is_grad_enabled() and getattr(model, "is_gradient_checkpointing", False):
                # Reentrant checkpointing gives parameters no gradient unless an input needs one.
                recorded = recorded.detach().requires_grad_(True)
            originals = [layers[index] for index in range(self.frozen_layers)]
            for index in range(self.frozen_layers - 1):
                layers[index] = _PassThrough()
            layers[self.frozen_layers - 1] = _Replay(recorded)
            try:
                yield
            finally:
                for index, layer in enumerate(originals):
                    layers[index] = layer
            self.replayed_rows += len(keys)
            return

        def record(module, args, output):
            hidden = output[0] if isinstance(output, tuple) else output
            for key, row in zip(keys, hidden.detach()):
                self.rows[key] = row.clone()

        handle = layers[self.frozen_layers - 1].register_forward_hook(record)
        try:
            yield
        finally:
            handle.remove()
        self.computed_rows += len(keys)
