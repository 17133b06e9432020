"""A temperature change reaches the training log-probs, not only the sampler.

TRL 1.16's fused LM head captures the temperature when the trainer is built; setting
`trainer.temperature` afterwards changes sampling only. `set_temperature` must move both.
"""

import torch

from microcoder.algorithms import token_logprobs
from microcoder.training.config import load_config
from microcoder.training.run import build_trainer
from tests.test_training_presets import CONFIGS
from tests.training_support import ScriptedEvaluator, tiny_problems


def test_temperature_change_shows_in_training_logprobs(tmp_path):
    config = load_config(CONFIGS / "microcoder-tiny.yaml", [f"run_dir={tmp_path}"])
    trainer = build_trainer(config, tmp_path, problems=tiny_problems(), evaluator=ScriptedEvaluator())
    model, tokenizer = trainer.model, trainer.processing_class
    input_ids = tokenizer("def add(a, b):\n    return a + b", return_tensors="pt")["input_ids"]
    attention_mask = torch.ones_like(input_ids)
    keep = input_ids.shape[1] - 1

    def training_logprobs():  # the path _compute_loss and the old/ref log-probs take
        with torch.no_grad():
            return trainer._get_per_token_logps_and_entropies(model, input_ids, attention_mask, keep)[0]

    def reference(temperature):  # plain logits, our pure function
        with torch.no_grad():
            logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        return token_logprobs(logits[:, :-1], input_ids[:, 1:], temperature)

    trainer.set_temperature(1.0)
    at_one = training_logprobs()
    torch.testing.assert_close(at_one, reference(1.0), atol=1e-4, rtol=1e-4)

    trainer.set_temperature(0.5)
    at_half = training_logprobs()
    torch.testing.assert_close(at_half, reference(0.5), atol=1e-4, rtol=1e-4)
    assert (at_one - at_half).abs().max() > 0.1
    assert trainer.generation_config.temperature == 0.5 and trainer.temperature == 0.5

    # The trap this guards against: TRL's attribute alone does not reach the log-probs.
    trainer.temperature = 2.0
    torch.testing.assert_close(training_logprobs(), at_half)
