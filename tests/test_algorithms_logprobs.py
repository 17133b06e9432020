"""Token log-probs and entropy from logits at a temperature."""

import math
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch

from microcoder.algorithms.logprobs import entropy_from_logits, token_logprobs

torch.set_num_threads(1)

LN3 = math.log(3)
# p = [0.25, 0.75]: H = -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.25 * 1.386294 + 0.75 * 0.287682
#                     = 0.346574 + 0.215762 = 0.562335
H_QUARTER = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))


def test_uniform_logits():
    # 4 equal logits: p = 1/4 each, H = ln 4 = 1.386294, log p(token) = -ln 4.
    logits = torch.zeros(1, 2, 4)
    torch.testing.assert_close(entropy_from_logits(logits), torch.full((1, 2), math.log(4)))
    torch.testing.assert_close(token_logprobs(logits, torch.tensor([[0, 3]])), torch.full((1, 2), -math.log(4)))


def test_two_token_distribution_by_hand():
    # logits [0, ln 3] -> p = [1/4, 3/4]; H = 0.562335; log p(1) = ln 0.75 = -0.287682.
    logits = torch.tensor([[[0.0, LN3]]])
    assert entropy_from_logits(logits).item() == pytest.approx(H_QUARTER, rel=1e-6)
    assert token_logprobs(logits, torch.tensor([[1]])).item() == pytest.approx(math.log(0.75), rel=1e-6)


def test_temperature_divides_logits():
    # logits [0, 2 ln 3] at T = 2 are [0, ln 3]: the same p = [1/4, 3/4] as above.
    logits = torch.tensor([[[0.0, 2 * LN3]]])
    assert entropy_from_logits(logits, temperature=2.0).item() == pytest.approx(H_QUARTER, rel=1e-6)
    assert token_logprobs(logits, torch.tensor([[0]]), temperature=2.0).item() == pytest.approx(
        math.log(0.25), rel=1e-6
    )
    # At T = 1 the same logits give p = [1/10, 9/10], a lower entropy.
    assert entropy_from_logits(logits).item() < H_QUARTER


def test_extreme_logits_are_stable():
    # [1000, 0]: p = [1, e^-1000 ~ 0], H ~ 0. [1000, 1000]: H = ln 2. A naive softmax overflows to NaN.
    logits = torch.tensor([[[1000.0, 0.0], [1000.0, 1000.0]]])
    torch.testing.assert_close(entropy_from_logits(logits), torch.tensor([[0.0, math.log(2)]]))
    torch.testing.assert_close(token_logprobs(logits, torch.tensor([[1, 1]])), torch.tensor([[-1000.0, -math.log(2)]]))


def test_banned_tokens_with_minus_inf_logits():
    # [0, 0, -inf]: the third token has p = 0 and adds nothing: H = ln 2, not NaN.
    logits = torch.tensor([[[0.0, 0.0, float("-inf")]]])
    assert entropy_from_logits(logits).item() == pytest.approx(math.log(2))


def test_low_precision_logits_are_upcast():
    logits = torch.zeros(1, 1, 8, dtype=torch.bfloat16)
    assert entropy_from_logits(logits).dtype == torch.float32
    assert entropy_from_logits(logits).item() == pytest.approx(math.log(8), rel=1e-6)


def test_temperature_must_be_positive():
    with pytest.raises(ValueError):
        entropy_from_logits(torch.zeros(1, 1, 2), temperature=0.0)
    with pytest.raises(ValueError):
        token_logprobs(torch.zeros(1, 1, 2), torch.zeros(1, 1, dtype=torch.long), temperature=-1.0)


def test_match_plain_loop_on_random_logits():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 5, 7, generator=gen, dtype=torch.float64) * 4
    token_ids = torch.randint(0, 7, (3, 5), generator=gen)
    temperature = 0.7
    expected_entropy, expected_logp = [], []
    for b in range(3):
        row_h, row_lp = [], []
        for s in range(5):
            z = [value / temperature for value in logits[b, s].tolist()]
            top = max(z)
            weights = [math.exp(value - top) for value in z]
            total = sum(weights)
            probs = [w / total for w in weights]
            row_h.append(-sum(p * math.log(p) for p in probs))
            row_lp.append(math.log(probs[token_ids[b, s].item()]))
        expected_entropy.append(row_h)
        expected_logp.append(row_lp)
    torch.testing.assert_close(
        entropy_from_logits(logits, temperature), torch.tensor(expected_entropy, dtype=torch.float64)
    )
    torch.testing.assert_close(
        token_logprobs(logits, token_ids, temperature), torch.tensor(expected_logp, dtype=torch.float64)
    )
