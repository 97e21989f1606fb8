"""Stage 2-3, rejection fine-tuning: sample multi-turn trajectories with the warmed-up actor (or
read them from a file), keep those with reward > 0 and without redundant loops or invalid tool
calls (each filter's count is logged), then supervised fine-tuning on the policy's own tokens.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import lightning.pytorch as pl
import torch

from src.data.batch import RolloutBatch
from src.rl import masked_mean

from .common import clip_grad_norm, collect_trajectories, freeze, make_policy, read_rows, validate_with_episodes


def rft_keep(rows: list[dict[str, Any]], min_reward: float, filters: dict[str, Any]) -> tuple[list[dict], dict]:
    """The rows RFT trains on and the filter's counts: reward strictly above ``min_reward`` and
    none of the agent's exclusion reasons (src/agent/filters.py: unusable stop reasons, invalid
    tool calls, re-judged content, repeated failing calls; ``filters`` sets their thresholds)."""
    from src.agent.filters import FilterRules, filter_rows

    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in filters.items()}
    return filter_rows(rows, FilterRules(min_reward=min_reward, **fields))


def sample_batch_tag(batch: int) -> str:
    """The rollouts file of the ``batch``-th sampling batch (0-based): ``sample`` for the first,
    which the value pretraining stage reads, then ``sample2``, ``sample3``..."""
    return "sample" if batch == 0 else f"sample{batch + 1}"


def sample_until_kept(collect: Callable[[str], list[dict]], keep: Callable[[list[dict]], tuple[list[dict], dict]],
                      min_kept: int, max_batches: int) -> tuple[list[dict], list[dict], dict, int]:
    """Sample batches (``collect(tag)``: one batch's rows) until ``keep`` keeps at least
    ``min_kept`` of all the rows so far, at most ``max_batches``: the rule is the same for every
    run, so a run whose first batch keeps enough is what it would have been without it. Returns
    every row, the kept ones, the filter's summary and the number of batches sampled."""
    rows: list[dict] = []
    for batch in range(max_batches):
        rows += collect(sample_batch_tag(batch))
        kept, summary = keep(rows)
        if len(kept) >= min_kept:
            break
    return rows, kept, summary, batch + 1


class RFTStage(pl.LightningModule):
    def __init__(self, actor: torch.nn.Module, critic: Optional[torch.nn.Module], agent: Any,
                 actor_optimizer: Callable, sampling: dict, trajectories: str = "", sample_rounds: int = 2,
                 min_kept: int = 0, max_sample_batches: int = 1,
                 min_reward: float = 0.0, filters: Optional[dict] = None, max_grad_norm: float = 1.0):
        super().__init__()
        if max_sample_batches < 1:
            raise ValueError(f"stage.module.max_sample_batches must be at least 1, got {max_sample_batches}")
        self.automatic_optimization = False
        self.actor, self.critic, self.agent = actor, critic, agent
        freeze(self.critic)  # carried to the next stage untouched
        self.actor_optimizer, self.sampling = actor_optimizer, dict(sampling)
        self.trajectories, self.sample_rounds = trajectories, sample_rounds
        self.min_kept, self.max_sample_batches = min_kept, max_sample_batches
        self.min_reward, self.filters, self.max_grad_norm = min_reward, dict(filters or {}), max_grad_norm
        self._policy = None

    def configure_optimizers(self):
        return self.actor_optimizer(self.actor.parameters())

    def on_fit_start(self) -> None:
        keep = lambda rows: rft_keep(rows, self.min_reward, self.filters)  # noqa: E731
        if self.trajectories:
            rows = read_rows(self.trajectories)
            (kept, summary), batches = keep(rows), 0
        else:
            rows, kept, summary, batches = sample_until_kept(
                lambda tag: collect_trajectories(self, self.agent, self.sample_rounds, tag=tag), keep,
                self.min_kept, self.max_sample_batches)
        dropped = {reason: n for reason, n in summary["excluded"].items() if n}
        counts = {"rft/sampled": len(rows), "rft/kept": len(kept), "rft/sample_batches": batches,
                  **{f"rft/excluded_{reason}": n for reason, n in summary["excluded"].items()}}
        self.print(f"RFT: {len(kept)} of {len(rows)} trajectories kept; excluded (a row may have several "
                   f"reasons): {dropped or 'none'}")
        for logger in self.loggers:
            logger.log_metrics({k: float(v) for k, v in counts.items()}, step=int(self.global_step))
        if not kept:
            raise ValueError(f"RFT has no trajectory to train on: {len(rows)} sampled ({batches} sampling batches), "
                             f"none with reward > {self.min_reward} and no exclusion ({dropped}); sample more "
                             "(stage.module.min_kept, max_sample_batches), or from a better actor")
        tok = self.actor.tokenizer
        self.trainer.datamodule.use_trajectories(kept, tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)

    def validation_step(self, tasks: list, batch_idx: int) -> None:
        """Multi-turn episodes on held-out tasks: what the fine-tuned actor now does."""
        if self._policy is None:
            self._policy = make_policy(self.actor, self.device, self.sampling, self.trainer.datamodule.device_gate)
        self._policy.set_version(int(self.global_step))
        validate_with_episodes(self, tasks, self._policy)

    def on_fit_end(self) -> None:
        if self._policy is not None:
            self._policy.close()
            self._policy = None

    def training_step(self, batch: RolloutBatch, batch_idx: int) -> None:
        opt = self.optimizers()
        logprobs, _ = self.actor(batch.ids, batch.attention, 1.0)
        loss = -masked_mean(logprobs, batch.policy_mask)  # SFT: NLL of the policy's own tokens
        self.manual_backward(loss)
        norm = clip_grad_norm(self.actor, self.max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        self.log_dict({"actor/sft_loss": loss.detach(), "actor/grad_norm": norm}, prog_bar=True,
                      batch_size=len(batch), sync_dist=True)
