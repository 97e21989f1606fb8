"""PPO losses over policy tokens: the clipped surrogate, the value loss and KL estimators.

All inputs are ``[B, T]`` aligned to the row's ``token_ids``: ``logprobs[b, t]`` is the log-prob
of token t (from the logits at position t - 1; the stage shifts before calling). Losses are the
token-level mean over every mask token of the batch (DAPO), computed in float32. Log-ratios are
zeroed off the mask *before* ``exp``, so garbage there can neither overflow nor reach gradients.
Stats are detached 0-dim float32 tensors (log them without a host sync).
"""
from __future__ import annotations

import torch

from .masked import check_same_shape, masked_max, masked_mean, masked_share, on_mask

KL_ESTIMATORS = ("k1", "k2", "k3", "abs")


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, clip_low: float = 0.2, clip_high: float = 0.28,
                is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Token-level clipped surrogate with asymmetric clipping -> ``(loss, stats)``.

    Per token: ``max(-A * r, -A * clip(r, 1 - clip_low, 1 + clip_high))`` with
    ``r = exp(logprobs - old_logprobs)``, times ``is_weights`` when given (truncated importance
    sampling for the rollout/train mismatch, treated as a constant); the loss is its mean over all
    mask tokens of the batch. Differentiable w.r.t. ``logprobs``; ``old_logprobs``, ``advantages``
    and ``is_weights`` are detached. Stats: ``clip_fraction`` (share of mask tokens whose clipped
    term was selected), its ``clip_low_fraction`` (r < 1 - clip_low, A < 0) and
    ``clip_high_fraction`` (r > 1 + clip_high, A > 0) parts, ``ratio_mean``, ``ratio_max`` and
    ``approx_kl`` (k3 estimate of KL(old || new) on the rollout samples).
    """
    check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages, mask=mask,
                     is_weights=is_weights)
    log_ratio = on_mask(logprobs.float() - old_logprobs.detach().float(), mask)  # bf16 - bf16 would round
    ratio = torch.exp(log_ratio)
    adv = on_mask(advantages.detach(), mask)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    if is_weights is not None:
        per_token = per_token * on_mask(is_weights.detach(), mask)
    took_clip = clipped > unclipped
    stats = {
        "clip_fraction": masked_share(took_clip, mask),
        "clip_low_fraction": masked_share(took_clip & (ratio < 1.0 - clip_low), mask),
        "clip_high_fraction": masked_share(took_clip & (ratio > 1.0 + clip_high), mask),
        "ratio_mean": masked_mean(ratio.detach(), mask),
        "ratio_max": masked_max(ratio, mask),
        "approx_kl": masked_mean((ratio - 1.0 - log_ratio).detach(), mask),
    }
    return masked_mean(per_token, mask), stats


def value_loss(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               old_values: torch.Tensor | None = None,
               clip_range: float | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``0.5 * mean over mask of (values - returns)**2`` -> ``(loss, stats)``.

    With ``clip_range`` (needs ``old_values``), PPO2's pessimistic form: per token the larger of
    the unclipped error and the error of ``old + clip(values - old, -clip_range, clip_range)``.
    Differentiable w.r.t. ``values``; returns and old values are targets (detached). Stats:
    ``value_mean`` over the mask and ``clip_fraction`` (share of mask tokens where the clipped
    error was selected; 0 without clipping).
    """
    check_same_shape(values=values, returns=returns, mask=mask, old_values=old_values)
    v = on_mask(values, mask)
    target = on_mask(returns.detach(), mask)
    error = (v - target) ** 2
    took_clip = torch.zeros_like(error, dtype=torch.bool)
    if clip_range is not None:
        if old_values is None:
            raise ValueError("value_loss: clip_range needs old_values")
        old = on_mask(old_values.detach(), mask)
        clipped_error = (old + (v - old).clamp(-clip_range, clip_range) - target) ** 2
        took_clip = clipped_error > error
        error = torch.maximum(error, clipped_error)
    stats = {"value_mean": masked_mean(v.detach(), mask), "clip_fraction": masked_share(took_clip, mask)}
    return 0.5 * masked_mean(error, mask), stats


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3",
               mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) on tokens sampled from the policy ``[B, T]``.

    With ``x = logprobs - ref_logprobs`` (Schulman, "Approximating KL divergence"):
    ``k1 = x`` (unbiased, can be negative), ``k2 = x**2 / 2`` (biased, low variance),
    ``k3 = exp(-x) - 1 + x`` (unbiased, always >= 0), ``abs = |x|``. Differentiable w.r.t.
    ``logprobs``; the reference is detached. With ``mask``, 0 off the mask (and ``x`` is zeroed
    there before ``exp``). The stage averages it with ``masked_mean`` and a coefficient (0 default).
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {', '.join(KL_ESTIMATORS)}")
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs, mask=mask)
    x = logprobs.float() - ref_logprobs.detach().float()
    if mask is not None:
        x = on_mask(x, mask)
    if estimator == "k1":
        return x
    if estimator == "k2":
        return 0.5 * x ** 2
    if estimator == "k3":
        return torch.expm1(-x) + x
    return x.abs()
