"""vLLM's sampler draws from softmax(logits / T) of the trainer's model, on the path training
uses (TRL's colocated engine, unseeded requests, the step's temperature): before and after a
weight sync.

TRL's requests carry no seed, and vLLM samples those by another code path than seeded
ones (on CPU a compiled Gumbel-max over the whole batch, not per-request generators), so
the seeded draws of tests/test_vllm_generation.py do not cover it. Here thousands of
single-token draws after one prompt are counted per token and compared with the trainer's
own next-token distribution at T by Pearson's chi-square goodness-of-fit test at level
ALPHA: tokens expected fewer than MIN_EXPECTED times are pooled into one bin (the test's
approximation needs about 5 per bin). The same counts must reject a distribution off by a
little (another temperature, the weights before the sync): the test can tell.

The policy is the tiny random model with its final norm's weight scaled up (every logit
x NORM_SCALE), so that its next-token distribution has a head of likely tokens and a long
tail, as a trained model's has: 63 bins at T 0.7 (62 tokens and the pooled tail, 0.22 of
the mass), 101 at T 0.8 after the sync. A random model's is near uniform over 49k tokens
(entropy 10.7 nats), and every token would pool.

Runs where vLLM is installed (scripts/test_vllm.sh); skipped in the main environment.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: scripts/test_vllm.sh runs these in its environment")

import torch  # noqa: E402
from scipy import stats  # noqa: E402

from microcoder.training.run import build_trainer  # noqa: E402
from tests.test_vllm_training import tiny_config  # noqa: E402
from tests.training_support import ScriptedEvaluator, tiny_problems  # noqa: E402

pytestmark = pytest.mark.slow  # starts a vLLM engine (~20 s) and draws thousands of tokens

ALPHA = 0.001
"""Level of the goodness-of-fit test: a correct sampler fails it once in 1,000 seeds (for one seed the draws are fixed)."""
DRAWS = 4000
MIN_EXPECTED = 5.0
NORM_SCALE = 8.0
"""Scale of the random model's final norm weight on disk: next-token entropy 3.8 nats at T 0.7 instead of 10.7."""


def chi_square_p(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """(p-value, bins) of Pearson's test that `counts` (V,) were drawn from `probs` (V,):
    tokens expected fewer than MIN_EXPECTED times pooled into one bin."""
    expected = probs.double() * counts.sum().double()
    kept = expected >= MIN_EXPECTED
    observed = torch.cat([counts[kept].double(), counts[~kept].double().sum().view(1)])
    expected = torch.cat([expected[kept], expected[~kept].sum().view(1)])
    if expected[-1] < MIN_EXPECTED:  # the pooled tail is too small to be a bin of its own: fold it into the last
        observed = torch.cat([observed[:-2], (observed[-2] + observed[-1]).view(1)])
        expected = torch.cat([expected[:-2], (expected[-2] + expected[-1]).view(1)])
    statistic = ((observed - expected) ** 2 / expected).sum().item()
    return float(stats.chi2.sf(statistic, len(observed) - 1)), len(observed)


@pytest.fixture(scope="module")
def peaked_tiny(tmp_path_factory):
    from microcoder.policy.model import load_model_and_tokenizer, save_tiny_model

    path = save_tiny_model(tmp_path_factory.mktemp("vllm") / "tiny", 0, hidden_size=256)
    model, tokenizer = load_model_and_tokenizer(str(path))
    with torch.no_grad():
        model.model.norm.weight.mul_(NORM_SCALE)
    peaked = path.parent / "tiny-peaked"
    model.save_pretrained(peaked)
    tokenizer.save_pretrained(peaked)
    return peaked


def next_token_probs(model, prompt: list[int], temperature: float) -> torch.Tensor:
    """softmax(logits / T) of the token after `prompt`, as the trainer computes it: (V,) float64."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, -1].double()
    return torch.softmax(logits / temperature, dim=-1)


def draw_counts(trainer, prompt: list[int], vocabulary: int) -> torch.Tensor:
    """(V,) counts of DRAWS single-token samples after `prompt` through TRL's colocated vLLM
    call (unseeded, at the trainer's current temperature)."""
    generation = trainer.vllm_generation
    limit = generation.max_completion_length
    generation.max_completion_length = 1
    try:
        _, completions, _, _ = generation.generate(prompts=[prompt] * DRAWS, images=None, num_generations=1)
    finally:
        generation.max_completion_length = limit
    assert all(len(ids) == 1 for ids in completions)
    return torch.bincount(torch.tensor([ids[0] for ids in completions]), minlength=vocabulary)


def test_vllm_draws_follow_the_trainers_softmax_at_t_before_and_after_a_sync(tmp_path, peaked_tiny):
    config = tiny_config(tmp_path, peaked_tiny, "heldout_size=0")
    train, _ = tiny_problems()
    trainer = build_trainer(config, tmp_path, problems=(train, []), evaluator=ScriptedEvaluator())
    model = trainer.accelerator.unwrap_model(trainer.model)
    prompt = trainer.processing_class(trainer.train_dataset[0]["prompt"], add_special_tokens=False)["input_ids"]
    vocabulary = model.config.vocab_size
    (_, first), (_, second) = config.temperature_stages  # (step, T): the run's training temperatures, 0.7 then 0.8
    assert (first, second) == (0.7, 0.8)

    trainer.set_temperature(first)
    before = next_token_probs(model, prompt, first)
    counts = draw_counts(trainer, prompt, vocabulary)
    p, bins = chi_square_p(counts, before)
    off = chi_square_p(counts, next_token_probs(model, prompt, first * 1.1))[0]
    print(f"before the sync, T {first}: p {p:.4f} over {bins} bins; against T x 1.1: p {off:.2e}")
    assert bins >= 20, bins  # enough of the distribution is tested bin by bin
    assert p > ALPHA, (p, bins)
    assert off < ALPHA  # 10% off in T: rejected

    with torch.no_grad():  # "an update": every projection moves
        for name, parameter in model.named_parameters():
            if "proj" in name:
                parameter.mul_(1.3)
    trainer.sync_vllm_weights()
    trainer.set_temperature(second)
    after = next_token_probs(model, prompt, second)
    counts = draw_counts(trainer, prompt, vocabulary)
    p, bins = chi_square_p(counts, after)
    stale = chi_square_p(counts, torch.softmax(torch.log(before) * first / second, dim=-1))[0]  # old weights, new T
    print(f"after the sync, T {second}: p {p:.4f} over {bins} bins; against the old weights: p {stale:.2e}")
    assert bins >= 20, bins
    assert p > ALPHA, (p, bins)
    assert stale < ALPHA  # the engine samples the synced weights, not the old ones
