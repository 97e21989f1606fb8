"""Reductions over a token mask: sum, mean, variance and whitening of ``[B, T]`` tensors.

Every function reads only the positions where ``mask`` is nonzero. Off-mask entries are replaced
by 0 with ``torch.where`` (not multiplied by the mask), so garbage there, even inf or NaN, changes
nothing. Inputs of any float dtype are reduced in float32; nothing is modified in place.
"""
from __future__ import annotations

from typing import Optional

import torch


def check_same_shape(**tensors: torch.Tensor) -> None:
    """ValueError naming the tensors unless all have one shape (the [B, T] batch layout)."""
    shapes = {name: tuple(t.shape) for name, t in tensors.items() if t is not None}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(f"shapes differ: {listed}")


def on_mask(x: torch.Tensor, mask: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """``x`` in float32 where ``mask`` is set, ``fill`` elsewhere ([B, T] -> [B, T])."""
    check_same_shape(x=x, mask=mask)
    return torch.where(mask.bool(), x.float(), torch.full_like(x, fill, dtype=torch.float32))


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """Sum of ``x`` over mask positions: a scalar, or reduced along ``dim``."""
    kept = on_mask(x, mask)
    return kept.sum() if dim is None else kept.sum(dim)


def mask_count(mask: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """Number of mask positions (float32): a scalar, or counted along ``dim``."""
    set_ = mask.bool().float()
    return set_.sum() if dim is None else set_.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """Mean of ``x`` over mask positions; 0 where the mask is empty.

    With ``dim=None`` this is the token-level mean over the whole batch (every policy token
    weighs the same, DAPO's aggregation). An empty mask gives 0, not NaN, so a batch without
    policy tokens yields a zero loss with zero gradients instead of poisoning the optimizer.
    """
    return masked_sum(x, mask, dim) / mask_count(mask, dim).clamp(min=1.0)


def masked_share(condition: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Share of mask positions where ``condition`` holds (detached scalar, 0 for an empty mask)."""
    return masked_mean(condition.float(), mask).detach()


def masked_max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Largest ``x`` over mask positions (detached scalar, 0 for an empty mask)."""
    top = on_mask(x.detach(), mask, fill=float("-inf")).amax()
    return torch.where(mask_count(mask) > 0, top, torch.zeros_like(top))


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``x`` over all mask positions (scalar); 0 with fewer than 2 positions.

    Unbiased (divides by n - 1) by default. With one position the unbiased variance is
    undefined; 0 is returned so that whitening maps that position to 0 instead of NaN.
    """
    n = mask_count(mask)
    centred = on_mask(x.float() - masked_mean(x, mask), mask)  # a 0-dim float32 would not upcast bf16 x
    denom = n - 1.0 if unbiased else n
    return torch.where(n >= 2, (centred ** 2).sum() / denom.clamp(min=1.0), torch.zeros_like(n))


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True,
                  eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps)`` with mean and unbiased var over mask positions only.

    ``[B, T] -> [B, T]`` float32, 0 off the mask. ``shift_mean=False`` adds the mean back (unit
    variance, original mean), as TRL's ``masked_whiten`` does. A single mask position has
    variance 0 by :func:`masked_var`, so it maps to 0 (or to itself when ``shift_mean=False``).
    """
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    whitened = (x.float() - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return on_mask(whitened, mask)
