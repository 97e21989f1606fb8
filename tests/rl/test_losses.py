"""Clipped surrogate, value loss and KL estimators, against hand-worked numbers and autograd."""
import math

import pytest
import torch
from torch.testing import assert_close

from src.rl import KL_ESTIMATORS, kl_penalty, policy_loss, value_loss

# One row of policy-loss cases, clip_low 0.2 and clip_high 0.28 (allowed ratios [0.8, 1.28]):
#   token  A    r     -A*r    -A*clip(r)  selected        why
#   0     +1   1.10  -1.10   -1.10       either (inside)
#   1     +1   1.25  -1.25   -1.25       either          inside only because clip_high is 0.28
#   2     +1   1.50  -1.50   -1.28       clipped (high)
#   3     +1   0.50  -0.50   -0.80       unclipped       (the pessimistic max keeps -0.50)
#   4     -1   0.75   0.75    0.80       clipped (low)   outside only because clip_low is 0.2
#   5     -1   1.50   1.50    1.28       unclipped
#   6     masked: A = 1e6, log-ratio 50 (garbage that must change nothing)
ADVANTAGES = [1.0, 1.0, 1.0, 1.0, -1.0, -1.0, 1e6]
RATIOS = [1.10, 1.25, 1.50, 0.50, 0.75, 1.50, math.exp(50.0)]
MASK = [1, 1, 1, 1, 1, 1, 0]
# loss = (-1.10 - 1.25 - 1.28 - 0.50 + 0.80 + 1.50) / 6 = -1.83 / 6 = -0.305
EXPECTED_LOSS = -0.305


def surrogate_inputs(advantages=ADVANTAGES, ratios=RATIOS, mask=MASK):
    old = torch.full((1, len(ratios)), -1.5)
    logprobs = (old + torch.tensor([ratios]).log()).requires_grad_()
    return logprobs, old, torch.tensor([advantages]), torch.tensor([mask])


class TestPolicyLoss:
    def test_asymmetric_clipping_token_mean(self):
        logprobs, old, adv, mask = surrogate_inputs()
        loss, stats = policy_loss(logprobs, old, adv, mask, clip_low=0.2, clip_high=0.28)
        assert_close(loss, torch.tensor(EXPECTED_LOSS))
        assert_close(stats["clip_fraction"], torch.tensor(2 / 6))
        assert_close(stats["clip_low_fraction"], torch.tensor(1 / 6))
        assert_close(stats["clip_high_fraction"], torch.tensor(1 / 6))
        # ratio_mean = (1.1 + 1.25 + 1.5 + 0.5 + 0.75 + 1.5) / 6 = 6.6 / 6 = 1.1
        assert_close(stats["ratio_mean"], torch.tensor(1.1))
        assert_close(stats["ratio_max"], torch.tensor(1.5))
        k3 = sum(r - 1 - math.log(r) for r in RATIOS[:6]) / 6  # KL(old || new), r = new/old
        assert_close(stats["approx_kl"], torch.tensor(k3))

    def test_gradient_is_zero_exactly_where_the_clip_is_active(self):
        logprobs, old, adv, mask = surrogate_inputs()
        loss, _ = policy_loss(logprobs, old, adv, mask)
        loss.backward()
        # d(-A*r)/d(log p) = -A*r, over N = 6 tokens; 0 on the clipped tokens 2, 4 and the masked 6
        expected = torch.tensor([[-1.10, -1.25, 0.0, -0.50, 0.0, 1.50, 0.0]]) / 6
        assert_close(logprobs.grad, expected)

    def test_symmetric_or_swapped_clipping_gives_other_numbers(self):
        logprobs, old, adv, mask = surrogate_inputs()
        # clip_low 0.28, clip_high 0.2 (sides swapped) -> allowed [0.72, 1.2]: token 1 is clipped
        # to -1.2, token 2 to -1.2, token 4 is inside (0.75):
        # (-1.10 - 1.20 - 1.20 - 0.50 + 0.75 + 1.50) / 6 = -1.75 / 6
        swapped, _ = policy_loss(logprobs, old, adv, mask, clip_low=0.28, clip_high=0.2)
        assert_close(swapped, torch.tensor(-1.75 / 6))
        assert not torch.isclose(swapped, torch.tensor(EXPECTED_LOSS))

    def test_mean_over_all_tokens_of_the_batch_not_per_row(self):
        # row 0: one token, A = 1, r = 1 -> -1 ; row 1: three tokens, A = 2, r = 1 -> -2 each
        # token mean: (-1 - 6) / 4 = -1.75 (a mean of row means would be -1.5)
        logprobs = torch.zeros(2, 3)
        adv = torch.tensor([[1.0, 7.0, 7.0], [2.0, 2.0, 2.0]])
        mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
        loss, _ = policy_loss(logprobs, logprobs, adv, mask)
        assert_close(loss, torch.tensor(-1.75))

    def test_is_weights_scale_each_token_and_stay_constant(self):
        logprobs, old, adv, mask = surrogate_inputs()
        weights = torch.tensor([[2.0, 1.0, 1.0, 1.0, 1.0, 0.5, 7.0]], requires_grad=True)
        loss, _ = policy_loss(logprobs, old, adv, mask, is_weights=weights)
        # (-2.20 - 1.25 - 1.28 - 0.50 + 0.80 + 0.75) / 6 = -3.68 / 6
        assert_close(loss, torch.tensor(-3.68 / 6))
        loss.backward()
        assert weights.grad is None
        assert_close(logprobs.grad[0, 0], torch.tensor(-2.2 / 6))

    def test_empty_mask_gives_zero_loss_and_zero_gradient(self):
        logprobs, old, adv, _ = surrogate_inputs()
        loss, stats = policy_loss(logprobs, old, adv, torch.zeros(1, 7))
        loss.backward()
        assert loss.item() == 0.0 and stats["clip_fraction"].item() == 0.0
        assert (logprobs.grad == 0).all()

    def test_bf16_inputs_are_computed_in_float32_and_not_mutated(self):
        # bf16-representable inputs: the bf16 call must equal the float32 one, which fails if the
        # log-ratio is taken in bf16 (rounding it to 8 bits of mantissa) before the upcast.
        gen = torch.Generator().manual_seed(0)
        old = (-torch.rand(1, 1000, generator=gen) * 8).bfloat16()
        new = (old.float() + 0.3 * torch.randn(1, 1000, generator=gen)).bfloat16()
        adv = torch.randn(1, 1000, generator=gen).bfloat16()
        mask = torch.rand(1, 1000, generator=gen) < 0.7
        before = new.clone()
        loss16, stats16 = policy_loss(new, old, adv, mask)
        loss32, stats32 = policy_loss(new.float(), old.float(), adv.float(), mask)
        assert loss16.dtype == torch.float32 and torch.equal(new, before)
        assert_close(loss16, loss32, rtol=1e-6, atol=1e-7)
        for key in stats32:
            assert_close(stats16[key], stats32[key], rtol=1e-6, atol=1e-7, msg=key)


class TestValueLoss:
    # values, returns, old values; the last token is masked garbage.
    VALUES = [[0.5, 1.0, 2.0, 0.0, 99.0]]
    RETURNS = [[1.0, 1.0, 1.0, 1.0, -99.0]]
    OLD = [[0.5, 0.6, 1.9, 1.5, 0.0]]
    MASK = [[1, 1, 1, 1, 0]]

    def inputs(self):
        return (torch.tensor(self.VALUES, requires_grad=True), torch.tensor(self.RETURNS),
                torch.tensor(self.MASK), torch.tensor(self.OLD))

    def test_unclipped(self):
        values, returns, mask, _ = self.inputs()
        loss, stats = value_loss(values, returns, mask)
        # squared errors 0.25, 0, 1, 1 -> 0.5 * 2.25 / 4 = 0.28125
        assert_close(loss, torch.tensor(0.28125))
        assert_close(stats["value_mean"], torch.tensor(0.875))  # (0.5 + 1 + 2 + 0) / 4
        assert stats["clip_fraction"].item() == 0.0
        loss.backward()
        # d/dv = 0.5 * 2 * (v - R) / 4 = (v - R) / 4
        assert_close(values.grad, torch.tensor([[-0.125, 0.0, 0.25, -0.25, 0.0]]))

    def test_clipped_takes_the_larger_error(self):
        values, returns, mask, old = self.inputs()
        loss, stats = value_loss(values, returns, mask, old_values=old, clip_range=0.2)
        # token 0: v = old -> same error 0.25
        # token 1: clip(1.0 - 0.6) = 0.2 -> 0.8 ; (0.8-1)^2 = 0.04 > 0 -> clipped, no gradient
        # token 2: 2.0 - 1.9 = 0.1 inside -> 1.0
        # token 3: clip(0 - 1.5) = -0.2 -> 1.3 ; 0.09 < 1.0 -> unclipped 1.0
        # 0.5 * (0.25 + 0.04 + 1 + 1) / 4 = 0.28625
        assert_close(loss, torch.tensor(0.28625))
        assert_close(stats["clip_fraction"], torch.tensor(0.25))
        loss.backward()
        assert_close(values.grad, torch.tensor([[-0.125, 0.0, 0.25, -0.25, 0.0]]))

    def test_clip_range_needs_old_values(self):
        values, returns, mask, _ = self.inputs()
        with pytest.raises(ValueError, match="old_values"):
            value_loss(values, returns, mask, clip_range=0.2)


class TestKlPenalty:
    LOGPROBS = torch.tensor([[-1.0, -2.0, -0.5]])
    REF = torch.tensor([[-1.5, -1.0, -0.5]])  # x = logprobs - ref = 0.5, -1.0, 0

    def test_estimators_per_token(self):
        expected = {
            "k1": [0.5, -1.0, 0.0],
            "k2": [0.125, 0.5, 0.0],  # x^2 / 2
            "k3": [math.exp(-0.5) - 0.5, math.exp(1.0) - 2.0, 0.0],  # e^-x - 1 + x
            "abs": [0.5, 1.0, 0.0],
        }
        assert set(expected) == set(KL_ESTIMATORS)
        for name, values in expected.items():
            assert_close(kl_penalty(self.LOGPROBS, self.REF, name), torch.tensor([values]), msg=name)

    def test_k1_and_k3_expectations_equal_the_closed_form_kl(self):
        # Over every outcome of a categorical, E_{x~p}[k] must be KL(p || q) = sum p log(p / q).
        p = torch.tensor([0.1, 0.2, 0.3, 0.4])
        q = torch.tensor([0.25, 0.25, 0.4, 0.1])
        closed = float((p * (p / q).log()).sum())
        for name in ("k1", "k3"):
            per_outcome = kl_penalty(p.log()[None], q.log()[None], name)[0]
            assert float((p * per_outcome).sum()) == pytest.approx(closed, rel=1e-5), name
        assert (kl_penalty(p.log()[None], q.log()[None], "k3") >= 0).all()

    def test_mask_zeroes_garbage_before_exp(self):
        logprobs = torch.tensor([[-1.0, -1000.0]], requires_grad=True)
        ref = torch.tensor([[-1.5, 0.0]])  # x = 0.5 ; -1000 would overflow exp(-x)
        kl = kl_penalty(logprobs, ref, "k3", mask=torch.tensor([[1, 0]]))
        assert_close(kl, torch.tensor([[math.exp(-0.5) - 0.5, 0.0]]))
        kl.sum().backward()
        # d k3 / dx = 1 - e^-x on the mask, 0 off it
        assert_close(logprobs.grad, torch.tensor([[1 - math.exp(-0.5), 0.0]]))

    def test_unknown_estimator_lists_the_choices(self):
        with pytest.raises(ValueError, match="k1, k2, k3, abs"):
            kl_penalty(self.LOGPROBS, self.REF, "k4")
