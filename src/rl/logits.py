"""Per-token log-probs and entropies from ``[B, T, V]`` logits, in float32, optionally in chunks.

Alignment: ``logits[b, t]`` must be the distribution *for* ``ids[b, t]``. A causal LM's logits at
position t predict token t + 1, so the stage passes ``logits[:, :-1]`` with ``ids[:, 1:]`` (and
pads position 0, a prompt token, with 0) to get values aligned to the row's ``token_ids``.

Memory: bf16 logits are upcast one chunk at a time, so the forward pass holds at most one extra
float32 copy of a chunk (``chunk_size`` positions of the flattened B*T; None = all at once).
Under autograd each chunk's float32 copy is kept for backward, so the chunking bounds the
temporaries, not the saved activations (token_logprobs copies nothing for float32 logits at
temperature 1). Bounding those too needs the log-probs computed from hidden states chunk by chunk.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch


def over_chunks(logits: torch.Tensor, per_chunk: Callable[[torch.Tensor, slice], torch.Tensor],
                temperature: float, chunk_size: Optional[int]) -> torch.Tensor:
    """Apply ``per_chunk(scaled float32 logits [n, V], rows)`` to row chunks of flattened logits."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    flat = logits.reshape(-1, logits.shape[-1])
    step = chunk_size or max(flat.shape[0], 1)
    parts = []
    for start in range(0, flat.shape[0], step):
        rows = slice(start, start + step)
        scaled = flat[rows].float()
        if temperature != 1.0:
            scaled = scaled / temperature
        parts.append(per_chunk(scaled, rows))
    out = torch.cat(parts) if parts else flat.new_zeros(0, dtype=torch.float32)
    return out.view(logits.shape[:-1])


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float = 1.0,
                   chunk_size: Optional[int] = None) -> torch.Tensor:
    """``log_softmax(logits / temperature)`` gathered at ``ids``: ``[B, T, V], [B, T] -> [B, T]``.

    Computed as ``logit[id] - logsumexp(logits)`` so no [B, T, V] log-softmax is materialised.
    Use the sampling temperature of the rollout, or the log-probs will not match it.
    """
    if ids.shape != logits.shape[:-1]:
        raise ValueError(f"ids {tuple(ids.shape)} must match logits {tuple(logits.shape)} without V")
    flat_ids = ids.reshape(-1, 1).to(logits.device)

    def chunk(scaled: torch.Tensor, rows: slice) -> torch.Tensor:
        return scaled.gather(1, flat_ids[rows]).squeeze(1) - torch.logsumexp(scaled, dim=-1)

    return over_chunks(logits, chunk, temperature, chunk_size)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0,
                        chunk_size: Optional[int] = None) -> torch.Tensor:
    """Entropy of ``softmax(logits / temperature)`` per position: ``[B, T, V] -> [B, T]``.

    ``H = logsumexp(z) - sum_v softmax(z)_v * z_v``, which needs no log-softmax tensor. ``z`` is
    shifted by its row maximum first (H does not change): with raw logits the two terms are large
    and nearly cancel, which cost 10x the float32 error on peaked 32k-vocabulary rows.
    """
    def chunk(scaled: torch.Tensor, rows: slice) -> torch.Tensor:
        shifted = scaled - scaled.amax(dim=-1, keepdim=True).detach()
        probs = torch.softmax(shifted, dim=-1)
        return torch.logsumexp(shifted, dim=-1) - (probs * shifted).sum(dim=-1)

    return over_chunks(logits, chunk, temperature, chunk_size)
