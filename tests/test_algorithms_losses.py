"""Clipped policy loss, loss aggregation and KL estimators."""

import math
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch

from microcoder.algorithms.losses import aggregate_loss, clipped_policy_loss, kl_estimate

torch.set_num_threads(1)

EPS_LOW, EPS_HIGH = 0.2, 0.28  # clip-higher: ratio range [0.8, 1.28]

# Seven valid tokens (A, ratio) and one padding position, laid out (2, 4):
#   t0: A= 1, r=1.5  objective min(1.5, 1.28) = 1.28   loss -1.28  clipped high
#   t1: A= 1, r=0.5  objective min(0.5, 0.8)  = 0.5    loss -0.5   (unclipped term is the min)
#   t2: A=-1, r=0.5  objective min(-0.5,-0.8) = -0.8   loss  0.8   clipped low
#   t3: A=-1, r=1.5  objective min(-1.5,-1.28)= -1.5   loss  1.5   (unclipped term is the min)
#   t4: A=-1, r=4.0  objective -4.0                   loss  4.0   (dual clip c=3 caps it at 3.0)
#   t5: A= 0, r=2.0  loss 0, never counted
#   t6: A= 1, r=1.1  inside the range: loss -1.1
#   pad: A= 1, r=100 excluded by the mask
ADVANTAGES = torch.tensor([[1.0, 1.0, -1.0, -1.0], [-1.0, 0.0, 1.0, 1.0]], dtype=torch.float64)
RATIOS = torch.tensor([[1.5, 0.5, 0.5, 1.5], [4.0, 2.0, 1.1, 100.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])


def _loss(dual_clip=None, logp=None):
    logp = torch.log(RATIOS) if logp is None else logp
    return clipped_policy_loss(
        logp, torch.zeros_like(logp), ADVANTAGES, MASK, eps_low=EPS_LOW, eps_high=EPS_HIGH, dual_clip=dual_clip
    )


def test_per_token_loss_by_hand():
    loss, _ = _loss()
    expected = torch.tensor([[-1.28, -0.5, 0.8, 1.5], [4.0, 0.0, -1.1, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(loss, expected)


def test_dual_clip_caps_negative_advantage_loss():
    # t4: A = -1, r = 4 > c = 3: loss = min(4.0, -3 * -1) = 3.0. t3 (r = 1.5 < 3) is untouched.
    loss, metrics = _loss(dual_clip=3.0)
    assert loss[1, 0].item() == pytest.approx(3.0)
    assert loss[0, 3].item() == pytest.approx(1.5)
    assert metrics["dual_clip_frac"].item() == pytest.approx(1 / 7)


def test_clip_fractions_by_hand():
    # Over 7 valid tokens: high bound changes t0 only -> 1/7; low bound changes t2 only -> 1/7.
    # Without dual clip the dual fraction is 0.
    # ppo_kl = mean(old_logp - logp) = -(ln 1.5 + ln 0.5 + ln 0.5 + ln 1.5 + ln 4 + ln 2 + ln 1.1) / 7
    #        = -ln(1.5 * 0.5 * 0.5 * 1.5 * 4 * 2 * 1.1) / 7 = -ln(4.95) / 7.
    _, metrics = _loss()
    assert metrics["clip_frac_high"].item() == pytest.approx(1 / 7)
    assert metrics["clip_frac_low"].item() == pytest.approx(1 / 7)
    assert metrics["dual_clip_frac"].item() == 0.0
    assert metrics["ppo_kl"].item() == pytest.approx(-math.log(4.95) / 7)
    # ratio_deviation = mean |r - 1| over the valid ratios 1.5, 0.5, 0.5, 1.5, 4, 2, 1.1
    #                 = (0.5 + 0.5 + 0.5 + 0.5 + 3 + 1 + 0.1) / 7 = 6.1 / 7.
    assert metrics["ratio_deviation"].item() == pytest.approx(6.1 / 7)


def test_gradient_is_zero_where_clipped():
    # d loss / d logp = -A * ratio where the unclipped term is active, 0 where a clip is active.
    # t0 (clipped high), t2 (clipped low), t5 (A=0), pad: 0.  t1: -1 * 0.5 = -0.5. t3: 1.5. t4: 4.0. t6: -1.1.
    logp = torch.log(RATIOS).requires_grad_(True)
    loss, _ = _loss(logp=logp)
    loss.sum().backward()
    expected = torch.tensor([[0.0, -0.5, 0.0, 1.5], [4.0, 0.0, -1.1, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(logp.grad, expected)


def test_per_response_advantages_broadcast_over_tokens():
    # A of shape (B,) = [2, -1] must equal the same A repeated along S.
    logp = torch.log(RATIOS)
    per_response = torch.tensor([2.0, -1.0], dtype=torch.float64)
    loss_a, metrics_a = clipped_policy_loss(
        logp, torch.zeros_like(logp), per_response, MASK, eps_low=EPS_LOW, eps_high=EPS_HIGH
    )
    loss_b, metrics_b = clipped_policy_loss(
        logp, torch.zeros_like(logp), per_response[:, None].expand(2, 4), MASK, eps_low=EPS_LOW, eps_high=EPS_HIGH
    )
    torch.testing.assert_close(loss_a, loss_b)
    assert metrics_a == metrics_b


def test_log_ratio_is_clamped_to_20():
    # logp - old_logp = 50 would be exp(50) ~ 5e21; it is clamped to 20. With A = -1 and the ratio above
    # 1 + eps_high, min() picks the unclipped term, so loss = exp(20) = 4.85e8 (finite); dual clip caps it at 3.
    logp, old_logp, advantage, mask = torch.tensor([[50.0]]), torch.zeros(1, 1), torch.tensor([-1.0]), torch.ones(1, 1)
    loss, _ = clipped_policy_loss(logp, old_logp, advantage, mask, eps_low=0.2, eps_high=0.2)
    assert loss.item() == pytest.approx(math.exp(20), rel=1e-5)
    loss, _ = clipped_policy_loss(logp, old_logp, advantage, mask, eps_low=0.2, eps_high=0.2, dual_clip=3.0)
    assert loss.item() == pytest.approx(3.0)


def test_bad_clip_arguments_raise():
    with pytest.raises(ValueError):
        _loss(dual_clip=1.0)
    with pytest.raises(ValueError):
        zeros = torch.zeros(1, 1)
        clipped_policy_loss(zeros, zeros, torch.zeros(1), torch.ones(1, 1), eps_low=-0.1, eps_high=0.2)


def _loop_policy_loss(logp, old_logp, adv, mask, eps_low, eps_high, c):
    rows, cols = len(logp), len(logp[0])
    loss = [[0.0] * cols for _ in range(rows)]
    high = low = dual = valid = 0
    for i in range(rows):
        for j in range(cols):
            if not mask[i][j]:
                continue
            valid += 1
            r = math.exp(max(-20.0, min(20.0, logp[i][j] - old_logp[i][j])))
            a = adv[i][j]
            clipped = min(max(r, 1 - eps_low), 1 + eps_high)
            value = -min(r * a, clipped * a)
            high += a > 0 and r > 1 + eps_high
            low += a < 0 and r < 1 - eps_low
            if c is not None and a < 0 and value > -c * a:
                value = -c * a
                dual += 1
            loss[i][j] = value
    return loss, high / valid, low / valid, dual / valid


@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_matches_plain_loop_on_random_inputs(dual_clip):
    gen = torch.Generator().manual_seed(0)
    logp = -torch.rand(6, 9, generator=gen, dtype=torch.float64) * 3
    old_logp = logp + torch.randn(6, 9, generator=gen, dtype=torch.float64) * 0.6
    adv = torch.randn(6, 9, generator=gen, dtype=torch.float64)
    mask = (torch.rand(6, 9, generator=gen) < 0.8).long()
    loss, metrics = clipped_policy_loss(logp, old_logp, adv, mask, eps_low=0.2, eps_high=0.28, dual_clip=dual_clip)
    expected, high, low, dual = _loop_policy_loss(
        logp.tolist(), old_logp.tolist(), adv.tolist(), mask.tolist(), 0.2, 0.28, dual_clip
    )
    torch.testing.assert_close(loss, torch.tensor(expected, dtype=torch.float64))
    assert metrics["clip_frac_high"].item() == pytest.approx(high)
    assert metrics["clip_frac_low"].item() == pytest.approx(low)
    assert metrics["dual_clip_frac"].item() == pytest.approx(dual)
    assert high > 0 and low > 0  # the random inputs do exercise both bounds


# --- aggregate_loss --------------------------------------------------------------

LOSS = torch.tensor([[1.0, 2.0, 3.0, 7.0], [4.0, 7.0, 7.0, 7.0], [100.0, 100.0, 100.0, 100.0]])
LOSS_MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])


def test_token_mean_by_hand():
    # Valid tokens 1, 2, 3 and 4: (1 + 2 + 3 + 4) / 4 = 2.5. The 7s and 100s are padding.
    assert aggregate_loss(LOSS, LOSS_MASK, "token-mean").item() == pytest.approx(2.5)


def test_seq_mean_token_sum_by_hand():
    # Sequence sums 6 and 4 (the empty third row is left out): (6 + 4) / 2 = 5.
    assert aggregate_loss(LOSS, LOSS_MASK, "seq-mean-token-sum").item() == pytest.approx(5.0)


def test_seq_mean_token_mean_by_hand():
    # Sequence means 6 / 3 = 2 and 4 / 1 = 4: (2 + 4) / 2 = 3.
    assert aggregate_loss(LOSS, LOSS_MASK, "seq-mean-token-mean").item() == pytest.approx(3.0)


def test_no_valid_token_gives_connected_zero():
    loss = torch.ones(2, 3, requires_grad=True)
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
        value = aggregate_loss(loss, torch.zeros(2, 3), mode)
        assert value.item() == 0.0
        value.backward()  # the graph is intact


def test_invalid_aggregation_mode_names_valid_choices():
    with pytest.raises(ValueError, match="token-mean.*seq-mean-token-sum.*seq-mean-token-mean"):
        aggregate_loss(LOSS, LOSS_MASK, "sum")


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_aggregation_matches_plain_loop(mode):
    gen = torch.Generator().manual_seed(5)
    loss = torch.randn(7, 11, generator=gen, dtype=torch.float64)
    mask = (torch.rand(7, 11, generator=gen) < 0.6).long()
    mask[3] = 0  # one empty response
    rows = [
        [value for value, keep in zip(loss_row, mask_row) if keep]
        for loss_row, mask_row in zip(loss.tolist(), mask.tolist())
    ]
    if mode == "token-mean":
        flat = [value for row in rows for value in row]
        expected = sum(flat) / len(flat)
    else:
        per_seq = [sum(row) if mode == "seq-mean-token-sum" else sum(row) / len(row) for row in rows if row]
        expected = sum(per_seq) / len(per_seq)
    assert aggregate_loss(loss, mask, mode).item() == pytest.approx(expected)


# --- kl_estimate -----------------------------------------------------------------


def test_k1_k3_by_hand():
    # p(x) = 0.5 under the policy, 0.25 under the reference:
    #   k1 = ln 0.5 - ln 0.25 = ln 2 = 0.693147
    #   d = ln 0.25 - ln 0.5 = -ln 2; k3 = e^d - d - 1 = 0.5 + 0.693147 - 1 = 0.193147
    # Swapped (0.25 vs 0.5): k1 = -ln 2; d = ln 2; k3 = 2 - 0.693147 - 1 = 0.306853.
    logp = torch.log(torch.tensor([0.5, 0.25, 0.3]))
    ref = torch.log(torch.tensor([0.25, 0.5, 0.3]))
    torch.testing.assert_close(kl_estimate(logp, ref, "k1"), torch.tensor([math.log(2), -math.log(2), 0.0]))
    torch.testing.assert_close(
        kl_estimate(logp, ref, "k3"), torch.tensor([0.5 + math.log(2) - 1, 2 - math.log(2) - 1, 0.0])
    )


def test_estimators_are_unbiased_for_exact_kl():
    # p = [0.5, 0.25, 0.25], q = [0.25, 0.25, 0.5].
    # KL(p || q) = 0.5 ln 2 + 0.25 ln 1 + 0.25 ln 0.5 = 0.25 ln 2 = 0.173287.
    # The expectation over x ~ p of either estimator is KL(p || q) exactly:
    #   k1: sum p (ln p - ln q) = KL;  k3: sum p (q/p - ln(q/p) - 1) = sum q - 1 + KL = KL.
    p = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    q = torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64)
    for estimator in ("k1", "k3"):
        expectation = (p * kl_estimate(p.log(), q.log(), estimator)).sum().item()
        assert expectation == pytest.approx(0.25 * math.log(2)), estimator


def test_k3_is_clamped_like_verl():
    # ref - logp = 30 is clamped to 20 before exp, and e^20 - 20 - 1 is capped at 10.
    assert kl_estimate(torch.tensor([-30.0]), torch.tensor([0.0]), "k3").item() == 10.0
    # ref - logp = -30: d clamped to -20, k3 = e^-20 + 20 - 1 = 19.0000000021, capped at 10.
    assert kl_estimate(torch.tensor([0.0]), torch.tensor([-30.0]), "k3").item() == 10.0
    # k1 is not clamped.
    assert kl_estimate(torch.tensor([0.0]), torch.tensor([-30.0]), "k1").item() == 30.0


def test_k3_matches_plain_loop():
    gen = torch.Generator().manual_seed(11)
    logp = -torch.rand(4, 6, generator=gen, dtype=torch.float64) * 5
    ref = -torch.rand(4, 6, generator=gen, dtype=torch.float64) * 5
    expected = [
        [math.exp(r - lp) - (r - lp) - 1 for lp, r in zip(row_lp, row_r)]
        for row_lp, row_r in zip(logp.tolist(), ref.tolist())
    ]
    torch.testing.assert_close(kl_estimate(logp, ref, "k3"), torch.tensor(expected, dtype=torch.float64).clamp(max=10))


def test_unknown_estimator_names_valid_choices():
    with pytest.raises(ValueError, match="k1.*k3"):
        kl_estimate(torch.zeros(1), torch.zeros(1), "k2")


def test_masked_response_stays_in_token_mean_normaliser():
    # Conditional truncation masking sets a response's advantage to 0 but keeps its tokens.
    # Response 0: A = 1, 2 tokens at ratio 1 -> loss -1 each. Response 1: masked, A = 0, 3 tokens -> loss 0.
    # token-mean = (-1 - 1 + 0 + 0 + 0) / 5 = -0.4. Dropping response 1 from the mask instead
    # (TRL's mask_truncated_completions) would give (-1 - 1) / 2 = -1.
    logp = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    advantages = torch.tensor([1.0, 1.0]) * torch.tensor([1.0, 0.0])  # group advantage * keep
    loss, _ = clipped_policy_loss(logp, logp, advantages, mask, eps_low=0.2, eps_high=0.28)
    assert aggregate_loss(loss, mask, "token-mean").item() == pytest.approx(-0.4)
