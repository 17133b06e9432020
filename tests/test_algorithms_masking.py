"""Conditional truncation masking: verdict rule, repetition test, the keep mask."""

import itertools
import os
import random

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch

from microcoder.algorithms.masking import (
    is_truncated,
    WRONG_VERDICTS,
    conditional_truncation_mask,
    is_repetitive,
    non_incorrect,
    truncation_mask,
)

torch.set_num_threads(1)


# --- non_incorrect ---------------------------------------------------------------


def test_accepted_and_no_code_are_not_incorrect_and_judge_error_never_qualifies():
    # accepted: right. no_code: no complete program (a cut-off answer), "no answer" per the paper.
    # judge_error: unscorable, no reward and advantage 0 already: nothing for the mask to spare.
    assert non_incorrect("accepted")
    assert non_incorrect("no_code")
    assert not non_incorrect("judge_error")


@pytest.mark.parametrize(
    "verdict",
    [
        "wrong_answer",
        "runtime_error",
        "time_limit_exceeded",
        "memory_limit_exceeded",
        "output_limit_exceeded",
        "syntax_error",
    ],
)
def test_judged_wrong_verdicts_are_incorrect(verdict):
    assert verdict in WRONG_VERDICTS
    assert not non_incorrect(verdict)


def test_unknown_verdict_raises_and_names_valid_ones():
    with pytest.raises(ValueError, match="accepted"):
        non_incorrect("Accepted")


# --- is_repetitive ---------------------------------------------------------------


def test_last_m_equal_previous_m():
    # [1, 2, 3, 1, 2, 3], m = 3: last three [1, 2, 3] == the three before [1, 2, 3].
    assert is_repetitive([1, 2, 3, 1, 2, 3], 3)
    # m = 2: last two [2, 3] vs the two before [3, 1]: differ.
    assert not is_repetitive([1, 2, 3, 1, 2, 3], 2)
    # m = 1: last [3] vs [2]: differ.
    assert not is_repetitive([1, 2, 3, 1, 2, 3], 1)
    # m = 1 on [5, 5]: last [5] == [5].
    assert is_repetitive([5, 5], 1)


def test_too_short_is_not_repetitive():
    # length 3 < 2m = 4: cannot hold two copies of 2 tokens.
    assert not is_repetitive([7, 7, 7], 2)
    assert not is_repetitive([], 1)


def test_only_the_tail_counts():
    # A loop early in the response but a different ending: [9, 9] then [1, 2]: not repetitive at m = 2.
    assert not is_repetitive([9, 9, 9, 9, 1, 2], 2)


def test_paper_window_m_128():
    # 10 tokens of preamble, then the same 128-token block twice: the last 128 equal the 128 before.
    block = list(range(1000, 1128))
    assert is_repetitive(list(range(10)) + block + block, 128)
    # Change one token of the first copy: no longer equal.
    broken = list(block)
    broken[0] = 0
    assert not is_repetitive(list(range(10)) + broken + block, 128)


def test_is_repetitive_accepts_tuples_and_rejects_bad_m():
    assert is_repetitive((4, 4), 1)
    with pytest.raises(ValueError):
        is_repetitive([1, 2], 0)


# --- conditional_truncation_mask -------------------------------------------------


def _all_combinations():
    # The 8 rows (truncated, non_incorrect, repetitive), in itertools.product order:
    # index 0 = (F, F, F) ... index 6 = (T, T, F), index 7 = (T, T, T).
    rows = list(itertools.product([False, True], repeat=3))
    truncated, non_incorrect_flags, repetitive = (list(column) for column in zip(*rows))
    return truncated, non_incorrect_flags, repetitive


def test_rho_one_masks_exactly_the_qualifying_row():
    # Only (truncated, non-incorrect, not repetitive) = row 6 qualifies; with rho = 1 every
    # draw u in [0, 1) is < 1, so row 6 is masked and the other 7 keep.
    # Fractions over 8 responses: truncated rows 4..7 -> 4/8 = 0.5; qualifying 1/8; masked 1/8.
    truncated, non_incorrect_flags, repetitive = _all_combinations()
    result = conditional_truncation_mask(
        truncated, non_incorrect_flags, repetitive, rho=1.0, generator=torch.Generator().manual_seed(0)
    )
    assert result.keep.tolist() == [1, 1, 1, 1, 1, 1, 0, 1]
    assert result.keep.dtype == torch.float32
    assert result.qualifying.tolist() == [False] * 6 + [True, False]
    assert result.truncated_fraction == 0.5
    assert result.qualifying_fraction == 0.125
    assert result.masked_fraction == 0.125


def test_rho_zero_masks_nothing():
    truncated, non_incorrect_flags, repetitive = _all_combinations()
    result = conditional_truncation_mask(
        truncated, non_incorrect_flags, repetitive, rho=0.0, generator=torch.Generator().manual_seed(0)
    )
    assert result.keep.tolist() == [1.0] * 8
    assert result.masked_fraction == 0.0
    assert result.qualifying_fraction == 0.125  # still reported


def test_masked_where_draw_below_rho():
    # All 6 responses qualify; response i is masked exactly when its draw u_i < 0.5.
    # The draws are the first 6 numbers of torch.rand on a generator seeded with 7.
    draws = torch.rand(6, generator=torch.Generator().manual_seed(7))
    result = conditional_truncation_mask(
        [True] * 6, [True] * 6, [False] * 6, rho=0.5, generator=torch.Generator().manual_seed(7)
    )
    assert result.keep.tolist() == [0.0 if u < 0.5 else 1.0 for u in draws.tolist()]


def test_masked_share_of_qualifying_is_close_to_rho():
    # 20000 qualifying responses, rho = 0.3: the masked share is Binomial(20000, 0.3) / 20000,
    # std = sqrt(0.3 * 0.7 / 20000) = 0.0032, so +-0.02 is more than 6 standard deviations.
    n = 20000
    result = conditional_truncation_mask(
        [True] * n, [True] * n, [False] * n, rho=0.3, generator=torch.Generator().manual_seed(0)
    )
    assert abs(result.masked_fraction - 0.3) < 0.02


def test_same_seed_same_mask_and_stream_independent_of_data():
    flags_a = ([True, True, False, True], [True, False, True, True], [False, False, False, True])
    flags_b = ([False] * 4, [False] * 4, [False] * 4)
    gen_1, gen_2, gen_3 = (torch.Generator().manual_seed(3) for _ in range(3))
    first = conditional_truncation_mask(*flags_a, rho=0.5, generator=gen_1)
    second = conditional_truncation_mask(*flags_a, rho=0.5, generator=gen_2)
    assert torch.equal(first.keep, second.keep)
    # One draw per response whatever the flags: the generator ends in the same state.
    conditional_truncation_mask(*flags_b, rho=0.5, generator=gen_3)
    assert torch.equal(gen_1.get_state(), gen_3.get_state())


def test_matches_plain_loop_on_random_flags():
    rng = random.Random(42)
    for seed in range(5):
        n = 50
        truncated = [rng.random() < 0.5 for _ in range(n)]
        not_wrong = [rng.random() < 0.5 for _ in range(n)]
        repetitive = [rng.random() < 0.2 for _ in range(n)]
        rho = rng.random()
        draws = torch.rand(n, generator=torch.Generator().manual_seed(seed)).tolist()
        expected = [
            0.0 if (t and ni and not rep and u < rho) else 1.0
            for t, ni, rep, u in zip(truncated, not_wrong, repetitive, draws)
        ]
        result = conditional_truncation_mask(
            torch.tensor(truncated), not_wrong, repetitive, rho=rho, generator=torch.Generator().manual_seed(seed)
        )
        assert result.keep.tolist() == expected
        assert result.masked_fraction == pytest.approx(expected.count(0.0) / n)
        assert result.truncated_fraction == pytest.approx(sum(truncated) / n)


def test_full_masking_ablation_by_composition():
    # "Full masking" = every truncated response masked: all non-incorrect, none repetitive, rho = 1.
    truncated = [True, False, True]
    result = conditional_truncation_mask(
        truncated, [True] * 3, [False] * 3, rho=1.0, generator=torch.Generator().manual_seed(0)
    )
    assert result.keep.tolist() == [0.0, 1.0, 0.0]


def test_mask_multiplies_advantages_after_normalisation():
    # Paper: A_i = (r_i - mean) / std * keep_i with mean/std over the whole group.
    # Group [1, 0, 0, 0] -> A = [1.5, -0.5, -0.5, -0.5] (see test_algorithms_advantages);
    # response 3 truncated with no code, masked with rho = 1 -> A = [1.5, -0.5, -0.5, 0].
    from microcoder.algorithms.advantages import group_advantages

    advantages = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), group_size=4, eps=0.0)
    verdicts = ["accepted", "wrong_answer", "wrong_answer", "no_code"]
    result = conditional_truncation_mask(
        [False, False, True, True],
        [non_incorrect(v) for v in verdicts],
        [False] * 4,
        rho=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    # Response 2 is truncated but judged wrong: it keeps its penalty.
    torch.testing.assert_close(advantages * result.keep, torch.tensor([1.5, -0.5, -0.5, 0.0]))


def test_empty_batch_and_bad_inputs():
    empty = conditional_truncation_mask([], [], [], rho=0.3, generator=torch.Generator().manual_seed(0))
    assert empty.keep.numel() == 0
    assert empty.masked_fraction == 0.0 and empty.truncated_fraction == 0.0
    with pytest.raises(ValueError):
        conditional_truncation_mask([True], [True, False], [False], rho=0.3, generator=torch.Generator())
    with pytest.raises(ValueError):
        conditional_truncation_mask([True], [True], [False], rho=1.5, generator=torch.Generator())


def test_every_evaluator_verdict_is_classified_exactly_once():
    # The mask must know every verdict the evaluator can give, and each in one set only.
    from microcoder.algorithms.masking import NON_INCORRECT_VERDICTS, UNSCORABLE_VERDICTS, WRONG_VERDICTS
    from microcoder.evaluator import VERDICTS

    assert WRONG_VERDICTS | NON_INCORRECT_VERDICTS | UNSCORABLE_VERDICTS == set(VERDICTS)
    assert len(WRONG_VERDICTS) + len(NON_INCORRECT_VERDICTS) + len(UNSCORABLE_VERDICTS) == len(VERDICTS)


def test_truncation_mask_modes():
    # Responses: truncated+non-incorrect (qualifies), truncated+wrong, truncated loop, finished.
    args = dict(truncated=[True, True, True, False], non_incorrect=[True, False, True, True],
                repetitive=[False, False, True, False], rho=1.0)
    none = truncation_mask("none", generator=torch.Generator().manual_seed(0), **args)
    conditional = truncation_mask("conditional", generator=torch.Generator().manual_seed(0), **args)
    everything = truncation_mask("all", generator=torch.Generator().manual_seed(0), **args)
    assert none.keep.tolist() == [1.0, 1.0, 1.0, 1.0] and none.masked_fraction == 0.0
    assert conditional.keep.tolist() == [0.0, 1.0, 1.0, 1.0] and conditional.masked_fraction == 0.25
    assert everything.keep.tolist() == [0.0, 0.0, 0.0, 1.0] and everything.masked_fraction == 0.75
    for mask in (none, conditional, everything):  # every mode reports the same truncated/qualifying
        assert (mask.truncated_fraction, mask.qualifying_fraction) == (0.75, 0.25)
    with pytest.raises(ValueError, match="valid: none, conditional, all"):
        truncation_mask("some", generator=torch.Generator(), **args)


def test_is_truncated_means_the_limit_reached_without_an_end():
    eos = {0, 7}
    assert is_truncated([3, 4, 5], 3, eos)  # at the limit, no EOS
    assert not is_truncated([3, 4, 7], 3, eos)  # EOS exactly at the limit: finished
    assert not is_truncated([3, 0], 3, eos)  # ended before the limit
    assert not is_truncated([3, 4], 3, eos)  # shorter than the limit, no EOS (a stop string)
    assert is_truncated([3, 4, 5, 6], 3, eos)  # past the limit (a refill's longer budget)
    assert not is_truncated([], 0, eos)
