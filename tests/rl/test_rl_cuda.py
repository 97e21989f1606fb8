"""The RL math on CUDA with bf16 inputs agrees with the float32 CPU results (skipped without a GPU).

Inputs are rounded to bf16 first, so both sides see the same numbers and only the device and the
input dtype differ: every function must upcast and compute in float32 on either device.
"""
import pytest
import torch
from torch.testing import assert_close

from src.rl import (entropy_from_logits, explained_variance, gae_through_tools, kl_penalty, logprob_mismatch,
                    masked_whiten, outcome_rewards, policy_loss, token_logprobs, truncated_is_weights, value_loss)

pytestmark = pytest.mark.gpu
DEVICE = "cuda"


def bf16_exact(t: torch.Tensor) -> torch.Tensor:
    return t.bfloat16().float()


def multi_turn_batch(rows: int, width: int, seed: int = 0):
    """Rows of alternating policy/tool spans of random lengths, right-padded to different lengths."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.zeros(rows, width, dtype=torch.bool)
    for r in range(rows):
        pos, end = 16, width - int(torch.randint(0, width // 4, (1,), generator=gen))
        while pos < end:
            span = int(torch.randint(1, 400, (1,), generator=gen))
            mask[r, pos:min(pos + span, end)] = True
            pos += span + int(torch.randint(1, 2000, (1,), generator=gen))
    return mask, bf16_exact(torch.randn(rows, width, generator=gen)), torch.rand(rows, generator=gen)


def test_gae_on_long_rows_matches_cpu():
    mask, values, reward = multi_turn_batch(rows=4, width=65536)
    want = gae_through_tools(outcome_rewards(reward, mask), values, mask, 1.0, 0.95)
    # TF32 matmuls must not round the advantages (the scan runs in float64).
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        m, v, r = mask.to(DEVICE), values.to(DEVICE).bfloat16(), reward.to(DEVICE)
        got = gae_through_tools(outcome_rewards(r, m), v, m, 1.0, 0.95)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    assert int(mask.sum()) > 10_000
    for g, w in zip(got, want):
        assert g.device.type == torch.device(DEVICE).type and g.dtype == torch.float32
        assert_close(g.cpu(), w, atol=1e-5, rtol=1e-5)


def losses_and_metrics(t: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every loss and metric of a PPO step on one batch; logprobs etc. cast to ``dtype``."""
    mask = t["mask"]
    lp = t["new"].to(dtype, copy=True).requires_grad_()
    adv = masked_whiten(t["adv"].to(dtype), mask)
    weights = truncated_is_weights(t["old"].to(dtype), t["new"].to(dtype), mask)
    loss, stats = policy_loss(lp, t["old"].to(dtype), adv, mask, is_weights=weights)
    vloss, _ = value_loss(t["new"].to(dtype), t["ret"].to(dtype), mask, old_values=t["old"].to(dtype),
                          clip_range=0.2)
    kl = kl_penalty(lp, t["old"].to(dtype), "k3", mask)
    loss.backward()
    gap = logprob_mismatch(t["old"].to(dtype), t["new"].to(dtype), mask)
    out = dict(loss=loss, vloss=vloss, kl=kl.sum(), grad=lp.grad.float() * mask.sum(),
               ev=explained_variance(t["new"].to(dtype), t["ret"].to(dtype), mask), **stats,
               **{f"gap/{k}": v for k, v in gap.items()})
    return {k: v.detach().float().cpu() for k, v in out.items()}


def test_losses_and_metrics_bf16_match_float32_cpu():
    gen = torch.Generator().manual_seed(1)
    shape = (4, 257)
    old = bf16_exact(-torch.rand(shape, generator=gen) * 3)
    batch = dict(mask=torch.rand(shape, generator=gen) < 0.6, old=old,
                 new=bf16_exact(old + 0.3 * torch.randn(shape, generator=gen)),
                 adv=bf16_exact(torch.randn(shape, generator=gen)), ret=bf16_exact(torch.randn(shape, generator=gen)))
    want = losses_and_metrics(batch, torch.float32)
    got = losses_and_metrics({k: v.to(DEVICE) for k, v in batch.items()}, torch.bfloat16)
    assert 0 < want["clip_fraction"] < 1
    for key in want:
        # the gradient of a bf16 leaf is stored in bf16 (8 bits of mantissa); all else is float32
        tol = 1e-2 if key == "grad" else 1e-5
        assert_close(got[key], want[key], atol=tol, rtol=tol, msg=key)


def test_logprobs_and_entropy_bf16_chunked():
    gen = torch.Generator().manual_seed(2)
    logits = (torch.randn(2, 300, 32000, generator=gen) * 4).bfloat16()
    ids = torch.randint(0, 32000, (2, 300), generator=gen)
    # references in float64 on the same bf16 logits
    want_lp = torch.log_softmax(logits.double() / 0.8, -1).gather(-1, ids[..., None])[..., 0].float()
    logp = torch.log_softmax(logits.double(), -1)
    want_h = -(logp.exp() * logp).sum(-1).float()
    got_lp = token_logprobs(logits.to(DEVICE), ids.to(DEVICE), temperature=0.8, chunk_size=128)
    got_h = entropy_from_logits(logits.to(DEVICE), chunk_size=128)
    assert got_lp.dtype == torch.float32 and got_h.dtype == torch.float32
    assert_close(got_lp.cpu(), want_lp, atol=1e-4, rtol=1e-4)
    assert_close(got_h.cpu(), want_h, atol=1e-4, rtol=1e-4)
