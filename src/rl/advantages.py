"""Outcome rewards and GAE over multi-turn rows whose tool-output tokens are transparent.

Layout (all ``[B, T]``, aligned to a trajectory row's ``token_ids``, right-padded):
    policy_mask    1 exactly on tokens the policy generated (the row's ``loss_mask``)
    values         the critic's V(s_t) *of the token at position t* (the stage shifts the critic
                   output so that position t holds the value of the state that emitted token t)
    token_rewards  reward credited to the action at position t (outcome: the last policy token)

Why transparent: a multi-turn row interleaves policy tokens with tool output the policy did not
choose. GAE runs over the policy tokens of a row as if the tool output were not there: from a
policy token, the "next" value is the value at the row's next *policy* token (0 after the last
one: the episode is over), and the lambda-accumulator crosses tool tokens unchanged. Zeroing the
values at tool tokens, or running the plain recursion through them, decays or flips the credit
that reaches early turns at lambda < 1 (tests/rl/test_advantages.py shows both).
"""
from __future__ import annotations

import torch

from .masked import check_same_shape, on_mask

# Block length of the discounted reverse cumsum: one small matmul per block, then N / 128 carry
# steps, instead of one Python step (and its kernel launches) per token of 100k-token rows.
SCAN_BLOCK = 128


def last_policy_index(policy_mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last policy token ``[B]`` (int64), -1 for rows without one."""
    m = policy_mask.bool()
    positions = torch.arange(m.shape[1], device=m.device).expand_as(m)
    return torch.where(m, positions, -1).amax(dim=1)


def outcome_rewards(reward: torch.Tensor, policy_mask: torch.Tensor) -> torch.Tensor:
    """The scalar outcome ``reward [B]`` placed on each row's last policy token -> ``[B, T]``.

    float32, 0 everywhere else. A row with no policy token gets all zeros: there is no action to
    credit (such a row also contributes nothing to any masked loss).
    """
    if reward.dim() != 1 or reward.shape[0] != policy_mask.shape[0]:
        raise ValueError(f"reward must be [B] with B={policy_mask.shape[0]}, got {tuple(reward.shape)}")
    last = last_policy_index(policy_mask)
    credited = torch.where(last >= 0, reward.float().to(last.device), 0.0)
    out = torch.zeros(policy_mask.shape, dtype=torch.float32, device=policy_mask.device)
    return out.scatter(1, last.clamp(min=0)[:, None], credited[:, None])


def fold_rewards_onto_policy(token_rewards: torch.Tensor, policy_mask: torch.Tensor) -> torch.Tensor:
    """Move rewards sitting on non-policy tokens onto the preceding policy token of the row.

    A reward after the last generated token (say on the template tail) belongs to the last
    action; one before the row's first policy token has no action to credit and is dropped.
    """
    m = policy_mask.bool()
    positions = torch.arange(m.shape[1], device=m.device).expand_as(m)
    owner = torch.where(m, positions, -1).cummax(dim=1).values
    credited = torch.where(owner >= 0, token_rewards.float(), 0.0)
    return torch.zeros_like(credited).scatter_add(1, owner.clamp(min=0), credited)


def discounted_reverse_cumsum(x: torch.Tensor, discount: float) -> torch.Tensor:
    """``y[:, k] = sum_{j >= k} discount**(j - k) * x[:, j]`` along dim 1 of ``[B, N]``.

    Blocked: within a block of SCAN_BLOCK the sum is one matmul with the upper-triangular matrix
    of discount powers; blocks are chained from the right by their first element. Runs in float64
    so that TF32 matmul settings of the trainer cannot round the advantages.
    """
    b, n = x.shape
    k = min(SCAN_BLOCK, max(n, 1))
    n_blocks = -(-n // k)
    blocks = torch.nn.functional.pad(x.double(), (0, n_blocks * k - n)).view(b, n_blocks, k)
    idx = torch.arange(k, device=x.device)
    lag = (idx[None, :] - idx[:, None]).double()  # lag[i, j] = j - i
    powers = torch.where(lag >= 0, discount ** lag.clamp(min=0), 0.0)  # 0**0 == 1: lam = 0 works
    out = blocks @ powers.T
    tail = discount ** (k - idx).double()  # weight of the next block's first element on row i
    for blk in range(out.shape[1] - 2, -1, -1):
        out[:, blk] += tail * out[:, blk + 1, :1]
    return out.reshape(b, n_blocks * k)[:, :n].to(x.dtype)


def gae_through_tools(token_rewards: torch.Tensor, values: torch.Tensor, policy_mask: torch.Tensor,
                      gamma: float = 1.0, lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over each row's policy tokens, tool tokens transparent -> ``(advantages, returns)``.

    For the policy positions p_1 < ... < p_n of a row (n may differ per row):
        delta_k = r_k + gamma * V(p_{k+1}) - V(p_k),   V(p_{n+1}) = 0 (terminal)
        A_k     = delta_k + gamma * lam * A_{k+1}
    ``returns = A + V`` (the value targets). Both ``[B, T]`` float32, 0 off the mask, detached:
    they are targets, never differentiated. Rewards on non-policy tokens are credited by
    :func:`fold_rewards_onto_policy`; values off the mask are never read.
    """
    check_same_shape(token_rewards=token_rewards, values=values, policy_mask=policy_mask)
    m = policy_mask.bool()
    rewards = fold_rewards_onto_policy(token_rewards.detach(), m)
    v = on_mask(values.detach(), m)
    # Compact each row to its policy tokens, in order (then right padding): the recursion
    # becomes the plain one over a dense [B, N] sequence.
    order = torch.argsort((~m).to(torch.int32), dim=1, stable=True)
    n_max = int(m.sum(dim=1).max()) if m.numel() else 0
    order = order[:, :n_max]
    mc, vc, rc = m.gather(1, order), v.gather(1, order), rewards.gather(1, order)
    next_v = torch.nn.functional.pad(vc[:, 1:], (0, 1))  # 0 past a row's last policy token
    deltas = torch.where(mc, rc + gamma * next_v - vc, 0.0)
    adv_c = discounted_reverse_cumsum(deltas, gamma * lam)
    advantages = torch.zeros_like(v).scatter(1, order, adv_c)
    advantages = on_mask(advantages, m)
    return advantages, on_mask(advantages + v, m)


def decoupled_gae(token_rewards: torch.Tensor, values: torch.Tensor, policy_mask: torch.Tensor,
                  gamma: float = 1.0, actor_lam: float = 0.95,
                  critic_lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages at actor_lam, value targets at critic_lam)``: GAE with one lambda per head.

    Why two: at lambda < 1 an outcome reward on a long row's last token reaches a token n policy
    tokens earlier only as ``lam**n`` times the reward; the rest of that token's advantage is the
    critic's own differences. With a critic that explains little (a short value pretraining), the
    early tokens that choose what the reply does are credited with the critic's noise. The actor
    at lambda 1 gets ``A_t = R - V(s_t)`` on every token (the critic only as a baseline) while the
    critic keeps its own targets (decoupled GAE, as in VC-PPO and VAPO). Equal lambdas: one GAE.
    """
    advantages, returns = gae_through_tools(token_rewards, values, policy_mask, gamma, critic_lam)
    if actor_lam != critic_lam:
        advantages, _ = gae_through_tools(token_rewards, values, policy_mask, gamma, actor_lam)
    return advantages, returns
