"""Stage 3, value pretraining: the critic alone, on the sampled multi-turn trajectories. The
outcome reward sits on each row's last policy token; targets are V(s_t) + A_t with GAE
(gamma 1, lambda 0.95, through tool tokens) from the critic's own current values; the loss is
0.5 * MSE over policy tokens. Without it the paper saw strongly negative explained variance
and trajectories running to the length cap in agentic PPO."""
from __future__ import annotations

from typing import Any, Callable, Optional

import lightning.pytorch as pl
import torch

from src.data.batch import RolloutBatch
from src.rl import explained_variance, gae_through_tools, outcome_rewards, value_loss

from .common import (clip_grad_norm, collect_trajectories, freeze, gradient_sync, micro_batches, pad_to, read_rows,
                     token_share)
from .rft import rft_keep


class ValuePretrainStage(pl.LightningModule):
    def __init__(self, actor: torch.nn.Module, critic: torch.nn.Module, agent: Any, critic_optimizer: Callable,
                 sampling: dict, trajectories: str = "", sample_rounds: int = 2, rows: str = "all",
                 min_reward: float = 0.0, filters: Optional[dict] = None, gamma: float = 1.0, lam: float = 0.95,
                 max_grad_norm: float = 1.0, micro_batch_size: int = 0):
        super().__init__()
        if rows not in ("all", "kept"):
            raise ValueError(f"value_pretrain rows must be 'all' or 'kept' (RFT's selection), got {rows!r}")
        self.automatic_optimization = False
        self.actor, self.critic, self.agent = actor, critic, agent
        freeze(self.actor)  # the RFT actor, carried to the agentic stage untouched
        self.critic_optimizer, self.sampling = critic_optimizer, dict(sampling)
        self.trajectories, self.sample_rounds, self.rows = trajectories, sample_rounds, rows
        self.min_reward, self.filters = min_reward, dict(filters or {})
        self.gamma, self.lam, self.max_grad_norm = gamma, lam, max_grad_norm
        if micro_batch_size < 0:
            raise ValueError(f"value_pretrain micro_batch_size must be >= 0 (0: the whole batch), got {micro_batch_size}")
        self.micro_batch_size = micro_batch_size

    def configure_optimizers(self):
        return self.critic_optimizer(self.critic.parameters())

    def on_fit_start(self) -> None:
        rows = read_rows(self.trajectories) if self.trajectories else \
            collect_trajectories(self, self.agent, self.sample_rounds)
        if self.rows == "kept":
            rows, _ = rft_keep(rows, self.min_reward, self.filters)
        if not rows:
            raise ValueError("value pretraining has no trajectory to train on")
        self.print(f"value pretraining on {len(rows)} trajectories")
        tok = self.actor.tokenizer
        self.trainer.datamodule.use_trajectories(rows, tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)

    def training_step(self, batch: RolloutBatch, batch_idx: int) -> None:
        opt = self.optimizers()
        share = token_share(self, float(batch.policy_mask.sum().clamp(min=1)))

        def backward(loss: torch.Tensor, last: bool) -> None:
            with gradient_sync(self, last=last):
                self.manual_backward(loss * share)

        stats = self.accumulate(batch, backward)
        stats["critic/grad_norm"] = clip_grad_norm(self.critic, self.max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        self.log_dict(stats, prog_bar=False, batch_size=len(batch), sync_dist=True)
        self.log("value_loss", stats["critic/loss"], prog_bar=True, logger=False, batch_size=len(batch))

    def accumulate(self, batch: RolloutBatch, backward: Callable[[torch.Tensor, bool], None]) -> dict[str, torch.Tensor]:
        """The critic's gradient of the batch's loss (the token mean over every row), ``backward``
        called once per micro-batch of ``micro_batch_size`` rows with that micro-batch's part of
        it (and whether it is the last): the same gradient as one pass over the whole batch, at a micro-batch's memory (a
        batch of long multi-turn trajectories, padded to the longest, would hold every row's
        activations at once). GAE runs along each row, so a row's targets do not depend on how
        the batch is split. Returns the critic/ stats of the whole batch."""
        width, total = batch.ids.shape[1], batch.policy_mask.sum().clamp(min=1)
        micros = list(micro_batches(batch, self.micro_batch_size))
        values, returns, parts = [], [], []
        for index, micro in enumerate(micros):
            mask = micro.policy_mask
            micro_values = self.critic(micro.ids, micro.attention)
            with torch.no_grad():
                _, micro_returns = gae_through_tools(outcome_rewards(micro.rewards, mask), micro_values.detach(), mask,
                                                     self.gamma, self.lam)
            loss, _ = value_loss(micro_values, micro_returns, mask)
            part = loss * (mask.sum() / total)  # a token mean over the whole batch, however it is split
            backward(part, index == len(micros) - 1)
            parts.append(part.detach())
            values.append(pad_to(micro_values.detach(), width))
            returns.append(pad_to(micro_returns, width))
        values, returns, mask = torch.cat(values), torch.cat(returns), batch.policy_mask
        _, stats = value_loss(values, returns, mask)
        return {"critic/loss": torch.stack(parts).sum(), "critic/explained_var": explained_variance(values, returns, mask),
                **{f"critic/{k}": v for k, v in stats.items()}}  # value_mean, clip_fraction
