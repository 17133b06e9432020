"""The frozen layers' output computed once per rollout (`reuse_frozen_prefix`), on the real
trainer: the same losses, metrics and updated weights as running every layer in every
pass, with the frozen layers run once per row instead of once per pass."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from microcoder.policy.model import tiny_model_and_tokenizer
from microcoder.training.config import load_config
from microcoder.training.run import build_trainer, freeze_below_top_layers
from tests.test_training_presets import CONFIGS
from tests.training_support import ScriptedEvaluator, tiny_problems

pytestmark = pytest.mark.slow  # trains the tiny model twice


def train_counting_frozen_rows(run_dir, reuse: str):
    """Two steps on a 4-layer tiny model, the top layer trained, beta > 0 (a reference pass)
    and two updates per rollout (an old-log-prob pass); returns the trainer and how many
    rows went through the bottom layer outside sampling."""
    config = load_config(CONFIGS / "microcoder-tiny.yaml", [
        f"run_dir={run_dir}", "heldout_size=0", "total_steps=2", "train_top_layers=1", "save_every=0",
        "beta=0.01", f"reuse_frozen_prefix={reuse}", "shared_prefill=false"])  # every prompt forward inside generate
    model, tokenizer = tiny_model_and_tokenizer(seed=0, layers=4)
    saved = run_dir / "initial"  # TRL builds the reference model from the policy's path
    model.save_pretrained(saved)
    model = AutoModelForCausalLM.from_pretrained(saved)
    freeze_below_top_layers(model, 1)
    train_problems, _ = tiny_problems()
    trainer = build_trainer(config, run_dir, model, tokenizer, problems=(train_problems, []),
                            evaluator=ScriptedEvaluator())
    rows = [0]
    sampling = [False]
    bottom_layers = [trainer.accelerator.unwrap_model(trainer.model).model.layers[0]]
    if trainer.ref_model is not None:
        bottom_layers.append(trainer.accelerator.unwrap_model(trainer.ref_model).model.layers[0])
    for layer in bottom_layers:
        layer.register_forward_hook(lambda module, args, output: None if sampling[0] else
                                    rows.__setitem__(0, rows[0] + args[0].shape[0]))
    policy = trainer.accelerator.unwrap_model(trainer.model)
    generate = policy.generate

    def flagged_generate(*args, **kwargs):
        sampling[0] = True
        try:
            return generate(*args, **kwargs)
        finally:
            sampling[0] = False

    policy.generate = flagged_generate
    trainer.train()
    return trainer, rows[0]


def test_reusing_the_frozen_prefix_changes_no_number_and_runs_the_frozen_layers_once_per_row(tmp_path):
    records, parameters, frozen_rows = [], [], []
    for reuse in ("false", "true"):
        trainer, rows = train_counting_frozen_rows(tmp_path / reuse, reuse)
        assert trainer.ref_model is not None and (trainer.frozen_prefix is not None) == (reuse == "true")
        records.append(trainer.last_record)
        parameters.append({name: value.detach().clone() for name, value in trainer.model.named_parameters()})
        frozen_rows.append(rows)
    timing = {"tokens_per_second"}
    for key, value in records[0].items():
        if key.startswith("seconds") or key in timing:
            continue
        assert records[1][key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    assert parameters[0].keys() == parameters[1].keys()
    for name, value in parameters[0].items():
        torch.testing.assert_close(parameters[1][name], value, rtol=1e-5, atol=1e-6, msg=name)
    assert any(not torch.equal(value, tiny_model_and_tokenizer(seed=0, layers=4)[0].state_dict()[name])
               for name, value in parameters[1].items() if "layers.3" in name)  # the top layer trained
    # Per rollout of 8 rows, every layer in every pass: old log-probs, reference, and the two
    # updates' forwards (4 rows each) = 8 + 8 + 8 rows; reused: the 8 rows once.
    assert frozen_rows == [2 * 24, 2 * 8]
