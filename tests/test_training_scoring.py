"""The LM head on the completion positions only (`training/scoring.py`): the same
log-probs, entropies and gradients as TRL's fused head over every position, by hand on the
tiny model and on the real trainer, with the head projecting K rows per sequence."""

from __future__ import annotations

import pytest
import torch
import trl.trainer.utils as trl_utils
from trl.trainer.utils import add_fused_lm_head

import microcoder.training.trainer as trainer_module
from microcoder.policy.model import tiny_model_and_tokenizer
from microcoder.training.config import load_config
from microcoder.training.run import build_trainer
from microcoder.training.scoring import completion_log_probs, final_norm
from tests.test_training_presets import CONFIGS
from tests.training_support import ScriptedEvaluator, tiny_problems


def trl_scores(model, input_ids, attention_mask, keep):
    """TRL's own call (as GRPOTrainer makes it): every position through the head, the last `keep` kept."""
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    labels[:, :-keep] = -100
    output = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True)
    return output.log_probs[:, -keep:], output.entropy[:, -keep:]


def test_completion_positions_only_give_trls_log_probs_entropies_and_gradients():
    model, _ = tiny_model_and_tokenizer(seed=0, layers=2)
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, 100, (3, 14), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :4] = 0  # a left-padded prompt
    attention_mask[1, -3:] = 0  # a completion that ended early: its padding scores 0
    keep = 6
    parameters = list(model.parameters())
    expected = trl_scores(model, input_ids, attention_mask, keep)
    expected_grads = torch.autograd.grad(expected[0].sum() + expected[1].sum(), parameters, allow_unused=True)
    got = completion_log_probs(model, final_norm(model), input_ids, attention_mask, keep)
    got_grads = torch.autograd.grad(got[0].sum() + got[1].sum(), parameters, allow_unused=True)
    assert got[0].shape == got[1].shape == (3, keep)
    torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[1], expected[1], rtol=1e-5, atol=1e-6)
    assert torch.all(got[0][1, -3:] == 0) and torch.all(got[0][1, :-3] < 0)
    for name, a, b in zip((name for name, _ in model.named_parameters()), got_grads, expected_grads):
        assert (a is None) == (b is None), name
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_final_norm_is_absent_where_the_decoder_has_none():
    assert final_norm(torch.nn.Linear(2, 2)) is None


@pytest.mark.slow  # trains the tiny model twice
def test_the_trainer_scores_completion_rows_only_and_changes_no_number(tmp_path, monkeypatch):
    """Two steps with beta > 0 and two updates per rollout (old-log-prob, reference and update
    passes), once through TRL's head (`final_norm` made to find nothing) and once ours."""
    projected = []
    apply = trl_utils._ChunkedLogProbFunction.apply

    def counting(hidden, *args):
        projected[-1] += hidden.shape[0]
        return apply(hidden, *args)

    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply", counting)
    records, parameters = [], []
    for head in ("trl", "completion"):
        # "trl": our override finds no final norm and hands every call to TRL's own head
        monkeypatch.setattr(trainer_module, "final_norm", (lambda model: None) if head == "trl" else final_norm)
        config = load_config(CONFIGS / "microcoder-tiny.yaml", [
            f"run_dir={tmp_path / head}", "heldout_size=0", "total_steps=2", "save_every=0", "beta=0.01"])
        model, tokenizer = tiny_model_and_tokenizer(seed=0, layers=2)
        saved = tmp_path / head / "initial"  # TRL builds the reference model from the policy's path
        model.save_pretrained(saved)
        model = type(model).from_pretrained(saved)
        trainer = build_trainer(config, tmp_path / head, model, tokenizer, problems=(tiny_problems()[0], []),
                                evaluator=ScriptedEvaluator())
        projected.append(0)
        trainer.train()
        records.append(trainer.last_record)
        parameters.append({name: value.detach().clone() for name, value in trainer.model.named_parameters()})
    for key, value in records[0].items():
        if not key.startswith("seconds") and key != "tokens_per_second":
            assert records[1][key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    for name, value in parameters[0].items():
        torch.testing.assert_close(parameters[1][name], value, rtol=1e-5, atol=1e-6, msg=name)
    assert 0 < projected[1] < projected[0] / 2  # prompt positions no longer reach the head
