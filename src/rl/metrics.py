"""Diagnostics over policy tokens: the critic's explained variance and the rollout/train gap.

The paper's collapse without warm-up came from a BF16/FP16 gap between the log-probs the rollout
engine sampled with and those the trainer recomputes, which makes importance ratios explode;
:func:`logprob_mismatch` logs that gap from the first step and :func:`truncated_is_weights`
gives the optional correction (Yao et al., "Your efficient RL framework secretly brings you
off-policy RL training"). All outputs are detached float32 tensors.
"""
from __future__ import annotations

import math

import torch

from .masked import check_same_shape, masked_max, masked_mean, masked_var, on_mask


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``1 - Var[returns - values] / Var[returns]`` over mask positions (0-dim tensor).

    1 is a perfect critic, 0 one that predicts a constant (the returns' mean), below 0 worse than
    that. NaN when Var[returns] is 0 (fewer than 2 mask positions, or identical returns): the
    ratio is undefined there and a made-up number would hide it.
    """
    check_same_shape(values=values, returns=returns, mask=mask)
    target = returns.detach().float()
    var_returns = masked_var(target, mask)
    var_residual = masked_var(target - values.detach().float(), mask)
    nan = torch.full_like(var_returns, float("nan"))
    return torch.where(var_returns > 0, 1.0 - var_residual / var_returns, nan)


def logprob_mismatch(rollout_logprobs: torch.Tensor, train_logprobs: torch.Tensor,
                     mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-token gap ``d = train - rollout`` summarised over mask positions.

    Keys: ``abs_diff_mean``, ``abs_diff_max``, ``diff_mean``, ``ratio_mean`` and ``ratio_max``
    of ``exp(d)`` (the importance ratio the mismatch alone would put into PPO), and ``kl_k3``,
    the k3 estimate of KL(rollout || train) on the rollout samples. 0 for an empty mask.
    """
    check_same_shape(rollout_logprobs=rollout_logprobs, train_logprobs=train_logprobs, mask=mask)
    diff = on_mask(train_logprobs.detach().float() - rollout_logprobs.detach().float(), mask)
    ratio = torch.exp(diff)
    return {
        "abs_diff_mean": masked_mean(diff.abs(), mask),
        "abs_diff_max": masked_max(diff.abs(), mask),
        "diff_mean": masked_mean(diff, mask),
        "ratio_mean": masked_mean(ratio, mask),
        "ratio_max": masked_max(ratio, mask),
        "kl_k3": masked_mean(ratio - 1.0 - diff, mask),
    }


def truncated_is_weights(rollout_logprobs: torch.Tensor, train_logprobs: torch.Tensor,
                         mask: torch.Tensor, cap: float = 2.0) -> torch.Tensor:
    """Truncated importance weights ``min(exp(train - rollout), cap)`` ``[B, T]``, 0 off the mask.

    ``train_logprobs`` is the trainer's recompute at the rollout's weights (the PPO
    ``old_logprobs``); pass the result as ``policy_loss(..., is_weights=...)``. Detached. The
    log-ratio is clamped at ``log(cap)`` before ``exp``, so huge gaps cannot overflow.
    """
    if cap <= 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    check_same_shape(rollout_logprobs=rollout_logprobs, train_logprobs=train_logprobs, mask=mask)
    diff = on_mask(train_logprobs.detach().float() - rollout_logprobs.detach().float(), mask)
    return on_mask(torch.exp(diff.clamp(max=math.log(cap))), mask)
