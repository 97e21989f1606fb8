"""Value pretraining in micro-batches: the critic's gradient and stats are those of one pass over
the whole batch (a token mean over every row), so long multi-turn trajectories can be fitted a
few rows at a time (a batch of 8 trajectories of ~10k tokens in one CPU forward was killed for
memory at 20 GB)."""
from __future__ import annotations

import pytest
import torch

from src.data.batch import collate_rows
from src.models import build_critic, load_actor
from src.stages.value_pretrain import ValuePretrainStage


def stage(actor, critic, micro_batch_size: int) -> ValuePretrainStage:
    return ValuePretrainStage(actor, critic, agent=None, critic_optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
                              sampling={}, micro_batch_size=micro_batch_size)


@pytest.fixture(scope="module")
def parts(tiny_model_dir):
    torch.manual_seed(0)
    actor = load_actor(str(tiny_model_dir))
    critic = build_critic(actor)
    torch.nn.init.normal_(critic.value_head.weight, std=0.5)  # not the zero start: the backbone gets gradients too
    # Rows of different lengths and rewards: a mean of per-row means would differ from the token mean.
    rows = [{"token_ids": list(range(5, 5 + n)), "loss_mask": [0] * 3 + [1] * (n - 3), "logprobs": [0.0] * n, "reward": r}
            for n, r in ((20, 1.0), (9, -1.0), (14, 3.0))]
    return actor, critic, collate_rows(rows, actor.tokenizer.pad_token_id)


def gradient_and_stats(actor, critic, batch, micro_batch_size: int):
    critic.zero_grad(set_to_none=True)
    calls = []
    stats = stage(actor, critic, micro_batch_size).accumulate(batch, lambda loss, last: (calls.append(last), loss.backward()))
    grads = {n: p.grad.clone() for n, p in critic.named_parameters() if p.grad is not None}
    return grads, stats, calls


def test_micro_batches_give_the_whole_batch_gradient(parts):
    actor, critic, batch = parts
    whole, whole_stats, whole_calls = gradient_and_stats(actor, critic, batch, 0)
    split, split_stats, split_calls = gradient_and_stats(actor, critic, batch, 1)
    assert whole_calls == [True] and split_calls == [False, False, True]
    assert whole.keys() == split.keys() and any("backbone" in n for n in whole)
    for name in whole:
        assert torch.allclose(whole[name], split[name], rtol=1e-4, atol=1e-6), name
    for key in ("critic/loss", "critic/explained_var", "critic/value_mean"):
        assert float(split_stats[key]) == pytest.approx(float(whole_stats[key]), rel=1e-4, abs=1e-6), key
    assert float(whole_stats["critic/loss"]) > 0


def test_a_negative_micro_batch_size_is_refused(parts):
    actor, critic, _ = parts
    with pytest.raises(ValueError, match="micro_batch_size"):
        stage(actor, critic, -1)
