"""Explained variance, the rollout/train log-prob gap and truncated importance weights."""
import math

import pytest
import torch
from torch.testing import assert_close

from src.rl import explained_variance, logprob_mismatch, truncated_is_weights

MASK = torch.tensor([[1, 1, 0], [1, 1, 0]])
RETURNS = torch.tensor([[1.0, 2.0, 50.0], [3.0, 6.0, -50.0]])  # on the mask: 1, 2, 3, 6 (var 14/3)


class TestExplainedVariance:
    def test_perfect_critic_is_one(self):
        values = RETURNS.clone()
        values[:, 2] = 0.0  # off-mask disagreement does not count
        assert_close(explained_variance(values, RETURNS, MASK), torch.tensor(1.0))

    def test_constant_critic_is_zero_and_an_anticorrelated_one_is_negative(self):
        assert_close(explained_variance(torch.full((2, 3), 2.5), RETURNS, MASK), torch.tensor(0.0))
        # values 6, 3, 2, 1 on the mask: residuals -5, -1, 1, 5, var 52/3 -> 1 - 52/14 < 0
        values = torch.tensor([[6.0, 3.0, 0.0], [2.0, 1.0, 0.0]])
        assert_close(explained_variance(values, RETURNS, MASK), torch.tensor(1 - 52 / 14))

    def test_hand_case(self):
        # values 1, 2, 3, 3: residuals 0, 0, 0, 3 -> mean 0.75, var (3*0.5625 + 5.0625)/3 = 2.25
        # 1 - 2.25 / (14/3) = 0.517857
        values = torch.tensor([[1.0, 2.0, 9.0], [3.0, 3.0, 9.0]])
        assert_close(explained_variance(values, RETURNS, MASK), torch.tensor(1 - 2.25 * 3 / 14))

    def test_constant_returns_give_nan(self):
        assert math.isnan(explained_variance(torch.zeros(2, 3), torch.ones(2, 3), MASK).item())


class TestLogprobMismatch:
    ROLLOUT = torch.tensor([[-1.0, -2.0, -0.5, 3.0]])
    TRAIN = torch.tensor([[-1.1, -1.5, -0.5, -90.0]])  # d = train - rollout = -0.1, 0.5, 0 ; garbage
    MASK = torch.tensor([[1, 1, 1, 0]])

    def test_stats(self):
        stats = logprob_mismatch(self.ROLLOUT, self.TRAIN, self.MASK)
        ratios = [math.exp(-0.1), math.exp(0.5), 1.0]  # 0.904837, 1.648721, 1
        expected = {
            "abs_diff_mean": 0.6 / 3, "abs_diff_max": 0.5, "diff_mean": 0.4 / 3,
            "ratio_mean": sum(ratios) / 3, "ratio_max": math.exp(0.5),
            # k3 = r - 1 - d: 0.004837, 0.148721, 0 -> mean 0.051186
            "kl_k3": (ratios[0] - 0.9 + ratios[1] - 1.5) / 3,
        }
        assert set(stats) == set(expected)
        for key, value in expected.items():
            assert_close(stats[key], torch.tensor(value), msg=key)

    def test_empty_mask_gives_zeros(self):
        stats = logprob_mismatch(self.ROLLOUT, self.TRAIN, torch.zeros(1, 4))
        assert all(v.item() == 0.0 for v in stats.values())


class TestTruncatedIsWeights:
    def test_capped_ratio_zero_off_mask_and_detached(self):
        rollout = torch.tensor([[-1.0, -2.0, -3.0, -60.0, -1.0]])
        # d = -0.1, 0.5, 1.0, 59.5 (would overflow nothing: clamped first) ; last token masked
        train = torch.tensor([[-1.1, -1.5, -2.0, -0.5, 5.0]], requires_grad=True)
        mask = torch.tensor([[1, 1, 1, 1, 0]])
        weights = truncated_is_weights(rollout, train, mask, cap=2.0)
        # min(e^-0.1, 2) = 0.904837 ; min(e^0.5, 2) = 1.648721 ; min(e, 2) = 2 ; 2 ; masked 0
        assert_close(weights, torch.tensor([[math.exp(-0.1), math.exp(0.5), 2.0, 2.0, 0.0]]))
        assert not weights.requires_grad

    def test_cap_must_be_positive(self):
        with pytest.raises(ValueError, match="cap"):
            truncated_is_weights(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), cap=0.0)
