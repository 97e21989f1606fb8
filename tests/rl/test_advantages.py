"""Outcome rewards and GAE through tool tokens, against hand-worked numbers.

Row notation in comments: P prompt, a/b policy tokens of turns 1/2, o tool output, e template
tail, _ padding. Values at non-policy positions are set to garbage on purpose: GAE must never
read them.
"""
import pytest
import torch
from torch.testing import assert_close

from src.rl import decoupled_gae, gae_through_tools, outcome_rewards
from src.rl.advantages import SCAN_BLOCK

GARBAGE = 1e6


def row_tensors(layout: str, policy_values: list[float], other_value: float = GARBAGE):
    """(mask [1, T], values [1, T]) for a layout string; policy values in order of the 'a'/'b's."""
    mask = torch.tensor([[c in "ab" for c in layout]])
    values = torch.full((1, len(layout)), other_value)
    values[mask] = torch.tensor(policy_values)
    return mask, values


def gae_over_positions(rewards: list[float], values: list[float], gamma: float, lam: float) -> list[float]:
    """Plain GAE over a list of steps, terminal after the last: the textbook definition."""
    adv, acc = [0.0] * len(values), 0.0
    for k in reversed(range(len(values))):
        next_v = values[k + 1] if k + 1 < len(values) else 0.0
        acc = rewards[k] + gamma * next_v - values[k] + gamma * lam * acc
        adv[k] = acc
    return adv


class TestOutcomeRewards:
    def test_scalar_lands_on_the_last_policy_token_of_each_row(self):
        mask = torch.tensor([[0, 1, 1, 0, 0],    # P a a e _  -> last policy token at 2
                             [0, 1, 0, 1, 0],    # P a o b e  -> at 3
                             [0, 0, 0, 0, 0]])   # no policy token -> all zero
        out = outcome_rewards(torch.tensor([1.0, -0.5, 3.0]), mask)
        expected = torch.tensor([[0, 0, 1.0, 0, 0], [0, 0, 0, -0.5, 0], [0, 0, 0, 0, 0]])
        assert out.dtype == torch.float32
        assert_close(out, expected)

    def test_reward_shape_must_be_one_per_row(self):
        with pytest.raises(ValueError, match="reward must be"):
            outcome_rewards(torch.ones(2, 1), torch.ones(2, 4))


class TestGaeThroughTools:
    def test_one_turn(self):
        # P P a a a _ ; V(a) = 0.5, 0.6, 0.8 ; reward 1 on the last a ; gamma 1, lambda 0.95
        # deltas: 0.6-0.5 = 0.1 ; 0.8-0.6 = 0.2 ; 1-0.8 = 0.2
        # A3 = 0.2 ; A2 = 0.2 + 0.95*0.2 = 0.39 ; A1 = 0.1 + 0.95*0.39 = 0.4705
        mask, values = row_tensors("PPaaa_", [0.5, 0.6, 0.8])
        adv, ret = gae_through_tools(outcome_rewards(torch.tensor([1.0]), mask), values, mask, 1.0, 0.95)
        assert_close(adv, torch.tensor([[0, 0, 0.4705, 0.39, 0.2, 0]]))
        assert_close(ret, torch.tensor([[0, 0, 0.9705, 0.99, 1.0, 0]]))

    def test_one_turn_discounted(self):
        # same row, gamma 0.9, lambda 0.5 (gamma*lambda = 0.45)
        # deltas: 0.9*0.6-0.5 = 0.04 ; 0.9*0.8-0.6 = 0.12 ; 1-0.8 = 0.2
        # A3 = 0.2 ; A2 = 0.12 + 0.45*0.2 = 0.21 ; A1 = 0.04 + 0.45*0.21 = 0.1345
        mask, values = row_tensors("PPaaa_", [0.5, 0.6, 0.8])
        adv, _ = gae_through_tools(outcome_rewards(torch.tensor([1.0]), mask), values, mask, 0.9, 0.5)
        assert_close(adv, torch.tensor([[0, 0, 0.1345, 0.21, 0.2, 0]]))

    def test_two_turns_across_a_long_tool_output(self):
        # P a a o*40 b b e e _ ; V(a1, a2, b1, b2) = 0.2, 0.4, 0.6, 0.8 ; the critic says 0.5 on the
        # tool tokens and 0.3 elsewhere off the mask ; reward 1 (success) ; gamma 1, lambda 0.95.
        # Transparent: the 4 policy tokens as one sequence. deltas are all 0.2 (the last: 1 - 0.8).
        # A(b2) = 0.2 ; A(b1) = 0.2 + 0.95*0.2 = 0.39 ; A(a2) = 0.2 + 0.95*0.39 = 0.5705 ;
        # A(a1) = 0.2 + 0.95*0.5705 = 0.741975 ; returns = A + V = 0.941975, 0.9705, 0.99, 1.0
        n_tool = 40
        layout = "Paa" + "o" * n_tool + "bbee_"
        mask, values = row_tensors(layout, [0.2, 0.4, 0.6, 0.8], other_value=0.3)
        values[0, 3:3 + n_tool] = 0.5
        adv, ret = gae_through_tools(outcome_rewards(torch.tensor([1.0]), mask), values, mask, 1.0, 0.95)
        assert_close(adv[mask], torch.tensor([0.741975, 0.5705, 0.39, 0.2]))
        assert_close(ret[mask], torch.tensor([0.941975, 0.9705, 0.99, 1.0]))
        assert (adv[0, 1:3] > 0).all(), "a successful trajectory gives turn 1 positive credit"
        assert (adv[~mask] == 0).all() and (ret[~mask] == 0).all()

        # The wrong alternatives, on the same row (steps from a1 to b2, terminal after b2):
        span = slice(1, 3 + n_tool + 2)
        steps_v, steps_r = values[0, span].tolist(), [0.0] * (n_tool + 3) + [1.0]
        is_tool = [not m for m in mask[0, span].tolist()]
        plain = gae_over_positions(steps_r, steps_v, 1.0, 0.95)
        zeroed = gae_over_positions(steps_r, [0.0 if t else v for v, t in zip(steps_v, is_tool)], 1.0, 0.95)
        # plain: A(a2) = (0.5-0.4) + 0.95**40 * (0.6-0.5 + 0.95*0.39) = 0.1 + 0.1285*0.4705 = 0.160
        assert plain[1] == pytest.approx(0.1 + 0.95 ** 40 * 0.4705, abs=1e-6)
        # zeroed: A(a2) = (0-0.4) + 0.95**40 * (0.6 + 0.95*0.39) = -0.4 + 0.1285*0.9705 = -0.275 < 0
        assert zeroed[1] == pytest.approx(-0.4 + 0.95 ** 40 * 0.9705, abs=1e-6) and zeroed[1] < 0
        # accumulator reset at the tool output (each turn its own GAE): A(a2) = 0.2, A(a1) = 0.39
        # (turn 1 still bootstraps from V(b1)): deltas 0.2, 0.2 -> A(a2) = 0.2, A(a1) = 0.2 + 0.95*0.2
        reset = [0.39, 0.2]
        for wrong in (plain[:2], zeroed[:2], reset):
            assert abs(adv[0, 1:3] - torch.tensor(wrong)).max() > 0.1

    def test_lambda_one_telescopes_to_return_minus_value(self):
        # gamma = lambda = 1: A_t = (sum of later rewards) - V_t = 1 - V_t on every policy token.
        mask, values = row_tensors("Pa" + "o" * 7 + "bb" + "o" * 3 + "ae_", [0.1, 0.7, -0.4, 0.9])
        adv, ret = gae_through_tools(outcome_rewards(torch.tensor([1.0]), mask), values, mask, 1.0, 1.0)
        assert_close(adv[mask], torch.tensor([0.9, 0.3, 1.4, 0.1]))
        assert_close(ret[mask], torch.ones(4))

    def test_padding_contributes_nothing(self):
        mask, values = row_tensors("Paaoob", [0.5, 0.2, 0.7])
        rewards = outcome_rewards(torch.tensor([1.0]), mask)
        adv, ret = gae_through_tools(rewards, values, mask)
        padded_mask = torch.cat([mask, torch.zeros(1, 5, dtype=torch.bool)], dim=1)
        padded_values = torch.cat([values, torch.full((1, 5), -GARBAGE)], dim=1)
        padded_rewards = torch.cat([rewards, torch.zeros(1, 5)], dim=1)
        adv_p, ret_p = gae_through_tools(padded_rewards, padded_values, padded_mask)
        assert_close(adv_p[:, :6], adv)
        assert_close(ret_p[:, :6], ret)
        assert (adv_p[:, 6:] == 0).all() and (ret_p[:, 6:] == 0).all()

    def test_batch_of_different_lengths_equals_each_row_alone(self):
        layouts = ["PPaaoooob", "Pa", "PPPaaaaoab", "PPP", "P" + ("a" * 90 + "o" * 30) * 3 + "b" * 20]
        torch.manual_seed(0)
        rows = []
        for text in layouts:
            mask = torch.tensor([[c in "ab" for c in text]])
            rows.append((mask, torch.randn(1, len(text)), torch.randn(1)))
        width = max(len(t) for t in layouts)
        mask_b = torch.zeros(len(rows), width, dtype=torch.bool)
        values_b = torch.full((len(rows), width), GARBAGE)
        for i, (mask, values, _) in enumerate(rows):
            mask_b[i, :mask.shape[1]], values_b[i, :mask.shape[1]] = mask[0], values[0]
        rewards_b = outcome_rewards(torch.cat([r for _, _, r in rows]), mask_b)
        adv_b, ret_b = gae_through_tools(rewards_b, values_b, mask_b, 0.99, 0.95)
        assert int(mask_b[-1].sum()) > 2 * SCAN_BLOCK  # the long row crosses block boundaries
        for i, (mask, values, reward) in enumerate(rows):
            adv, ret = gae_through_tools(outcome_rewards(reward, mask), values, mask, 0.99, 0.95)
            n = mask.shape[1]
            assert_close(adv_b[i:i + 1, :n], adv)
            assert_close(ret_b[i:i + 1, :n], ret)
            assert (adv_b[i, n:] == 0).all()
            expected = gae_over_positions([0.0] * (int(mask.sum()) - 1) + [float(reward)],
                                          values[mask].tolist(), 0.99, 0.95)
            assert_close(adv[mask], torch.tensor(expected), atol=1e-5, rtol=1e-5)
        assert (adv_b[3] == 0).all()  # the row without policy tokens

    def test_rewards_off_the_policy_tokens_go_to_the_preceding_one(self):
        # P a o b e : 0.5 on the tool token belongs to a ; 2.0 on the tail to b ; 9.0 on the prompt
        # has no action before it and is dropped. V = 0 on a and b, lambda 1:
        # A(b) = 2.0 ; A(a) = 0.5 + 2.0 = 2.5
        mask, values = row_tensors("Paobe", [0.0, 0.0])
        rewards = torch.tensor([[9.0, 0.0, 0.5, 0.0, 2.0]])
        adv, _ = gae_through_tools(rewards, values, mask, 1.0, 1.0)
        assert_close(adv, torch.tensor([[0, 2.5, 0, 2.0, 0]]))

    def test_outputs_are_detached_and_inputs_untouched(self):
        mask, values = row_tensors("Paaob", [0.5, 0.2, 0.7])
        values = values.to(torch.bfloat16).requires_grad_()
        rewards = outcome_rewards(torch.tensor([1.0]), mask)
        before = (rewards.clone(), values.detach().clone(), mask.clone())
        adv, ret = gae_through_tools(rewards, values, mask)
        assert not adv.requires_grad and not ret.requires_grad and adv.dtype == torch.float32
        for a, b in zip(before, (rewards, values.detach(), mask)):
            assert torch.equal(a, b)

    def test_shape_mismatch_is_an_error(self):
        with pytest.raises(ValueError, match="shapes differ"):
            gae_through_tools(torch.zeros(2, 5), torch.zeros(2, 4), torch.ones(2, 5))


class TestDecoupledGae:
    # P a a o b : values 0.5, 0.2, 0.1 on a, a, b ; outcome 1 on b ; gamma 1.
    def test_actor_and_critic_each_get_their_own_lambda(self):
        mask, values = row_tensors("Paaob", [0.5, 0.2, 0.1])
        rewards = outcome_rewards(torch.tensor([1.0]), mask)
        adv, ret = decoupled_gae(rewards, values, mask, 1.0, actor_lam=1.0, critic_lam=0.0)
        # Actor at lambda 1: A = R - V on every policy token.
        assert_close(adv, torch.tensor([[0, 0.5, 0.8, 0, 0.9]]))
        # Critic at lambda 0: one-step targets r + V(next policy token), 0 past the last.
        assert_close(ret, torch.tensor([[0, 0.2, 0.1, 0, 1.0]]))

    def test_equal_lambdas_are_the_one_gae(self):
        mask, values = row_tensors("Paaob", [0.5, 0.2, 0.1])
        rewards = outcome_rewards(torch.tensor([1.0]), mask)
        one = gae_through_tools(rewards, values, mask, 1.0, 0.95)
        both = decoupled_gae(rewards, values, mask, 1.0, 0.95, 0.95)
        assert_close(both[0], one[0])
        assert_close(both[1], one[1])
