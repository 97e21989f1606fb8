"""Masked reductions and whitening read mask positions only."""
import math

import pytest
import torch
from torch.testing import assert_close

from src.rl import masked_mean, masked_sum, masked_var, masked_whiten

# On the mask: 1, 2, 3, 6 (mean 3, unbiased var (4 + 1 + 0 + 9) / 3 = 14/3). Off it: garbage,
# including inf and NaN, which must change nothing.
X = torch.tensor([[1.0, 1e6, 2.0], [3.0, 6.0, float("inf")], [float("nan"), -3e5, 7e4]])
MASK = torch.tensor([[1, 0, 1], [1, 1, 0], [0, 0, 0]])


class TestMaskedMean:
    def test_batch_and_row_means(self):
        assert_close(masked_sum(X, MASK), torch.tensor(12.0))
        assert_close(masked_mean(X, MASK), torch.tensor(3.0))
        # row means 1.5, 4.5 and 0 for the empty third row
        assert_close(masked_mean(X, MASK, dim=1), torch.tensor([1.5, 4.5, 0.0]))

    def test_empty_mask_is_zero_not_nan(self):
        assert masked_mean(X, torch.zeros_like(MASK)).item() == 0.0


class TestMaskedVar:
    def test_unbiased_and_biased(self):
        assert_close(masked_var(X, MASK), torch.tensor(14 / 3))
        assert_close(masked_var(X, MASK, unbiased=False), torch.tensor(14 / 4))

    def test_fewer_than_two_positions_give_zero(self):
        one = torch.tensor([[0, 0, 1], [0, 0, 0], [0, 0, 0]])
        assert masked_var(X, one).item() == 0.0
        assert masked_var(X, torch.zeros_like(MASK)).item() == 0.0


class TestMaskedWhiten:
    def test_whitens_over_the_mask_only(self):
        std = math.sqrt(14 / 3)  # 2.1602
        expected = torch.tensor([[-2 / std, 0, -1 / std], [0, 3 / std, 0], [0, 0, 0]])
        out = masked_whiten(X, MASK)
        assert_close(out, expected)
        assert_close(masked_mean(out, MASK), torch.tensor(0.0), atol=1e-6, rtol=0)
        assert_close(masked_var(out, MASK), torch.tensor(1.0))

    def test_keeping_the_mean(self):
        std = math.sqrt(14 / 3)
        out = masked_whiten(X, MASK, shift_mean=False)
        assert_close(out[MASK.bool()], torch.tensor([-2 / std, -1 / std, 0, 3 / std]) + 3.0)
        assert (out[~MASK.bool()] == 0).all()

    def test_single_position(self):
        one = torch.tensor([[0, 0, 1], [0, 0, 0], [0, 0, 0]])
        assert_close(masked_whiten(X, one), torch.zeros(3, 3))
        assert masked_whiten(X, one, shift_mean=False)[0, 2].item() == 2.0

    def test_input_untouched_and_shapes_checked(self):
        x = X.clone()
        masked_whiten(x, MASK)
        assert torch.equal(x.nan_to_num(), X.nan_to_num())
        with pytest.raises(ValueError, match="shapes differ"):
            masked_whiten(X, MASK[:, :2])

    def test_bf16_input_is_reduced_in_float32(self):
        gen = torch.Generator().manual_seed(0)
        x = (torch.randn(4, 300, generator=gen) * 5 + 20).bfloat16()
        mask = torch.rand(4, 300, generator=gen) < 0.5
        assert masked_whiten(x, mask).dtype == torch.float32
        assert_close(masked_var(x, mask), masked_var(x.float(), mask), rtol=1e-6, atol=0)
        assert_close(masked_whiten(x, mask), masked_whiten(x.float(), mask), rtol=1e-6, atol=1e-6)
