"""What made the CPU training step slow, pinned without timing anything.

TRL 1.16's GRPOConfig turns gradient checkpointing on by default. With it transformers
makes the embeddings' output require grad (`enable_input_require_grads`), so backward
ran through every frozen layer below `train_top_layers` and recomputed every layer's
forward: the CPU-scale step's backward took 1.8x the CPU time for the same gradients.
These tests fail if checkpointing comes back by default, if backward again reaches the
frozen layers, or if sampling stops using the KV cache; and they show that turning
checkpointing off changes no number of a run.
"""

from __future__ import annotations

import pytest
import torch
from trl import GRPOConfig

from microcoder.training.config import TrainConfig, grpo_arguments, load_config
from microcoder.policy.model import tiny_model_and_tokenizer
from microcoder.training.run import build_trainer, freeze_below_top_layers
from tests.test_training_presets import CONFIGS
from tests.training_support import ScriptedEvaluator, tiny_problems

pytestmark = pytest.mark.slow  # each test trains the tiny model (tens of seconds on 2 cores)


def test_default_config_builds_a_grpo_config_without_checkpointing():
    args = GRPOConfig(**grpo_arguments(TrainConfig(), "out"))
    assert args.gradient_checkpointing is False and args.activation_checkpointing is False
    on = GRPOConfig(**grpo_arguments(load_config(None, ["gradient_checkpointing=true"]), "out"))
    assert on.gradient_checkpointing is True and on.activation_checkpointing is True


def tiny_trainer(run_dir, *overrides):
    """A trainer on the tiny model (2 layers), only the top layer trained, one step."""
    config = load_config(CONFIGS / "microcoder-tiny.yaml", [f"run_dir={run_dir}", "heldout_size=0", "total_steps=1",
                                                            "train_top_layers=1", "save_every=0", *overrides])
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    freeze_below_top_layers(model, 1)
    train_problems, _ = tiny_problems()
    return build_trainer(config, run_dir, model, tokenizer, problems=(train_problems, []),
                         evaluator=ScriptedEvaluator())


def test_backward_stops_at_the_trained_layers_and_sampling_uses_the_cache(tmp_path):
    # The frozen layers run inside the update's forward here (not replayed from the
    # rollout), so that their output shows whether backward would reach them.
    # Plain generate (no shared prefill): its first call is the prefill this test looks for.
    trainer = tiny_trainer(tmp_path, "reuse_frozen_prefix=false", "shared_prefill=false")
    backbone = trainer.model.model
    frozen_output_needs_grad: list[bool] = []  # layer 0's output in the training forwards
    decode_lengths: list[int] = []  # input length of each backbone call inside generate
    sampling = [False]

    def frozen_layer_hook(module, args, output):
        if torch.is_grad_enabled():
            frozen_output_needs_grad.append((output[0] if isinstance(output, tuple) else output).requires_grad)

    def backbone_hook(module, args, kwargs):
        if sampling[0]:
            decode_lengths.append(kwargs["input_ids"].shape[1])

    backbone.layers[0].register_forward_hook(frozen_layer_hook)
    backbone.register_forward_pre_hook(backbone_hook, with_kwargs=True)
    generate = trainer.accelerator.unwrap_model(trainer.model).generate

    def recording_generate(*args, **kwargs):
        sampling[0] = True
        try:
            return generate(*args, **kwargs)
        finally:
            sampling[0] = False

    trainer.accelerator.unwrap_model(trainer.model).generate = recording_generate
    trainer.train()
    assert frozen_output_needs_grad and not any(frozen_output_needs_grad)
    assert not trainer.model.is_activation_checkpointing
    # One prefill over the prompts, then one token per call: the KV cache holds the rest.
    assert len(decode_lengths) > 2 and decode_lengths[0] > 1 and set(decode_lengths[1:]) == {1}


def test_checkpointing_changes_no_number_of_a_step(tmp_path):
    parameters, records = [], []
    for checkpointing in ("false", "true"):
        trainer = tiny_trainer(tmp_path / checkpointing, f"gradient_checkpointing={checkpointing}")
        trainer.train()
        assert trainer.model.is_activation_checkpointing == (checkpointing == "true")
        parameters.append({name: value.detach().clone() for name, value in trainer.model.named_parameters()})
        records.append({key: value for key, value in trainer.last_record.items() if not key.startswith("seconds")
                        and key != "tokens_per_second"})
    assert records[0] == records[1]
    assert all(torch.equal(parameters[0][name], parameters[1][name]) for name in parameters[0])
