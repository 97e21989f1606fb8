"""PPO over agent rollouts, shared by the warm-up (single-turn) and agentic (multi-turn) stages.

One training step = one rollout batch (episodes run with the current weights) and
``ppo_epochs`` passes over it in ``mini_batches`` updates (the paper: one update per batch,
global batch = mini-batch). Per update, actor and critic losses are summed and back-propagated
once (their parameters are disjoint, so each gets exactly its own gradient), micro-batch by
micro-batch, then each optimiser steps (only the actor's step counts as a training step).
"""
from __future__ import annotations

import copy
import time
from typing import Any, Callable, Optional

import lightning.pytorch as pl
import torch

from src.data.batch import RolloutBatch
from src.rl import (decoupled_gae, explained_variance, kl_penalty, logprob_mismatch, masked_mean,
                    masked_whiten, outcome_rewards, policy_loss, truncated_is_weights, value_loss)

from .common import (back_on_root_device, clip_grad_norm, gradient_sync, make_policy, micro_batches, pad_to,
                     peak_memory_gb, step_uncounted, token_share, validate_before_training, validate_owed,
                     validate_with_episodes, validation_owed, VALIDATED_STEP)

OptimizerFactory = Callable[[Any], torch.optim.Optimizer]


class PPOStage(pl.LightningModule):
    """Actor + critic trained by PPO on episodes of ``agent`` (an AgentConfig)."""

    def __init__(self, actor: torch.nn.Module, critic: torch.nn.Module, agent: Any,
                 actor_optimizer: OptimizerFactory, critic_optimizer: OptimizerFactory, sampling: dict,
                 gamma: float = 1.0, lam: float = 0.95, actor_lam: Optional[float] = None,
                 clip_low: float = 0.2, clip_high: float = 0.28,
                 value_clip: Optional[float] = None, kl_coef: float = 0.0, kl_estimator: str = "k3",
                 entropy_coef: float = 0.0, whiten_advantages: bool = True, ppo_epochs: int = 1,
                 mini_batches: int = 1, micro_batch_size: int = 0, max_grad_norm: float = 1.0,
                 tis_cap: float = 0.0, validate_at_start: bool = False, judge_only: bool = False):
        super().__init__()
        self.automatic_optimization = False
        self.actor, self.critic, self.agent = actor, critic, agent
        self.actor_optimizer, self.critic_optimizer = actor_optimizer, critic_optimizer
        self.sampling = dict(sampling)
        self.gamma, self.lam, self.clip_low, self.clip_high = gamma, lam, clip_low, clip_high
        # The actor's GAE lambda (None: the critic's, one GAE as in the paper).
        self.actor_lam = lam if actor_lam is None else actor_lam
        self.value_clip, self.kl_coef, self.kl_estimator = value_clip, kl_coef, kl_estimator
        self.entropy_coef, self.whiten_advantages = entropy_coef, whiten_advantages
        self.ppo_epochs, self.mini_batches, self.micro_batch_size = ppo_epochs, mini_batches, micro_batch_size
        self.max_grad_norm, self.tis_cap = max_grad_norm, tis_cap
        self.validate_at_start, self.judge_only = validate_at_start, judge_only
        # The training step whose validation last finished (saved in the checkpoint; None: unknown).
        self._validated_step: Optional[int] = 0
        # The step this process's training starts at (0, or a resumed checkpoint's): its batch is
        # the one a stopped run may have cut off, sampled with the same weights (training_step).
        self._first_step: Optional[int] = None
        self._policy = None
        # The reference policy for the KL term lives outside the module tree: never trained,
        # never checkpointed (it is the initial actor, rebuilt from init_from on resume:
        # freeze_reference).
        self._reference: list[torch.nn.Module] = []

    # ------------------------------------------------------------------ Lightning hooks

    def configure_optimizers(self):
        return [self.actor_optimizer(self.actor.parameters()), self.critic_optimizer(self.critic.parameters())]

    @property
    def needs_init_on_resume(self) -> bool:
        """A resume reads init_from again only for the KL term's reference (never checkpointed)."""
        return self.kl_coef > 0

    def freeze_reference(self) -> None:
        """The KL term's reference: a frozen copy of the actor as it is now, i.e. once train.py
        has loaded the starting weights and before a resume's checkpoint replaces them (Lightning
        restores a checkpoint's weights before on_fit_start, so a copy made there would be the
        resumed actor)."""
        if self.kl_coef > 0 and not self._reference:
            self._reference.append(copy.deepcopy(self.actor).requires_grad_(False).eval())

    def on_fit_start(self) -> None:
        if self.kl_coef > 0 and not self._reference:
            if self.trainer.ckpt_path:
                raise RuntimeError("PPO with a KL term resumed without its reference: call freeze_reference() "
                                   "after loading the starting weights, before Trainer.fit (train.py does)")
            self.freeze_reference()
        for ref in self._reference:
            ref.to(self.device)

    def on_train_start(self) -> None:
        self._first_step = int(self.global_step)
        # Before the first update only: a resumed run has its start point already.
        if (self.validate_at_start or self.judge_only) and self.global_step == 0:
            validate_before_training(self, self.policy())
        else:
            self.validate_if_owed()
        if self.judge_only:
            # Lightning's fit loop checks should_stop before it fetches the first batch: no
            # rollout, no update, no checkpoint; the run is its held-out point at step -1.
            self.trainer.should_stop = True

    def validate_if_owed(self) -> None:
        """A resumed run's owed validation (common.validation_owed), once."""
        if validation_owed(self.trainer, self._validated_step):
            validate_owed(self, self.policy())
            self._validated_step = int(self.global_step)

    def on_validation_epoch_end(self) -> None:
        if self.trainer.state.fn == "fit" and not self.trainer.sanity_checking:
            self._validated_step = int(self.global_step)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint[VALIDATED_STEP] = self._validated_step

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self._validated_step = checkpoint.get(VALIDATED_STEP)

    def policy(self):
        if self._policy is None:
            dm = getattr(self.trainer, "datamodule", None)
            self._policy = make_policy(self.actor, self.device, self.sampling, getattr(dm, "device_gate", None))
        self._policy.set_version(int(self.global_step))
        return self._policy

    def on_fit_end(self) -> None:
        # A run resumed at its last step never starts training (Lightning skips a finished
        # loop, on_train_start included), so the validation that step owes runs here, where
        # Lightning has already moved the module to the CPU (back_on_root_device).
        with back_on_root_device(self, validation_owed(self.trainer, self._validated_step)):
            self.validate_if_owed()
            if self._policy is not None:
                self._policy.close()
                self._policy = None

    def training_step(self, tasks: list, batch_idx: int) -> None:
        dm = self.trainer.datamodule
        # The first batch resumes: the episodes a stopped run sampled for it are taken, not run again.
        result = dm.rollout(self.policy(), tasks, self.agent, "train", int(self.global_step),
                            resume=int(self.global_step) == self._first_step)
        self.log_dict(result.metrics, batch_size=len(tasks), sync_dist=True)
        self.log("reward", result.metrics["rollout/reward_mean"], prog_bar=True, logger=False, batch_size=len(tasks))
        if result.batch is None:
            return  # every episode was dropped: nothing to learn from this batch
        start = time.monotonic()
        with dm.device_gate():
            stats = self.ppo_update(result.batch.to(self.device))
        update_s = time.monotonic() - start
        stats["perf/update_s"] = update_s
        stats["perf/step_s"] = update_s + result.metrics["perf/rollout_s"]
        stats["perf/update_tokens_per_s"] = self.ppo_epochs * float(result.batch.attention.sum()) / max(update_s, 1e-9)
        stats["perf/peak_memory_gb"] = peak_memory_gb(self.device)
        stats["perf/gate_wait_s"] = dm.gate_wait_s()  # cumulative: time lanes kept training off the device
        self.log_dict(stats, batch_size=len(result.batch), sync_dist=True)

    def validation_step(self, tasks: list, batch_idx: int) -> None:
        validate_with_episodes(self, tasks, self.policy())

    # ------------------------------------------------------------------ the update

    def ppo_update(self, batch: RolloutBatch) -> dict[str, float]:
        prepared = self.prepare(batch)
        order = torch.arange(len(batch))
        sums: dict[str, float] = {}
        updates = 0
        for _ in range(self.ppo_epochs):
            order = order[torch.randperm(len(batch))] if self.ppo_epochs > 1 or self.mini_batches > 1 else order
            for chunk in order.chunk(max(1, min(self.mini_batches, len(batch)))):
                for key, value in self.update(prepared, chunk, counted=updates == 0).items():
                    sums[key] = sums.get(key, 0.0) + value
                updates += 1
        stats = {key: value / max(updates, 1) for key, value in sums.items()}
        stats.update(prepared["stats"])
        return stats

    @torch.no_grad()
    def prepare(self, batch: RolloutBatch) -> dict[str, Any]:
        """Old log-probs and values (recomputed by the trainer: PPO's ratio is against the
        weights that sampled, evaluated the trainer's way), advantages and returns."""
        old_logprobs, values, ref_logprobs = [], [], []
        for micro in micro_batches(batch, self.micro_batch_size):
            lp, _ = self.actor(micro.ids, micro.attention, batch.temperature)
            old_logprobs.append(pad_to(lp, batch.ids.shape[1]))
            values.append(pad_to(self.critic(micro.ids, micro.attention), batch.ids.shape[1]))
            if self._reference:
                ref, _ = self._reference[0](micro.ids, micro.attention, batch.temperature)
                ref_logprobs.append(pad_to(ref, batch.ids.shape[1]))
        old_logprobs, values = torch.cat(old_logprobs), torch.cat(values)
        mask = batch.policy_mask
        rewards = outcome_rewards(batch.rewards, mask)
        advantages, returns = decoupled_gae(rewards, values, mask, self.gamma, self.actor_lam, self.lam)
        if self.whiten_advantages:
            advantages = masked_whiten(advantages, mask)
        mismatch = logprob_mismatch(batch.rollout_logprobs, old_logprobs, mask)
        # actor/logprob_mismatch: mean |rollout - trainer| log-prob per policy token, from step 0.
        stats = {f"actor/logprob_mismatch{'' if k == 'abs_diff_mean' else '_' + k}": float(v)
                 for k, v in mismatch.items()}
        stats["critic/value_mean"] = float(masked_mean(values, mask))
        stats["critic/return_mean"] = float(masked_mean(returns, mask))
        is_weights = truncated_is_weights(batch.rollout_logprobs, old_logprobs, mask, self.tis_cap) \
            if self.tis_cap > 0 else None
        return {"batch": batch, "old_logprobs": old_logprobs, "values": values, "advantages": advantages,
                "returns": returns, "ref_logprobs": torch.cat(ref_logprobs) if ref_logprobs else None,
                "is_weights": is_weights, "stats": stats}

    def update(self, prepared: dict[str, Any], rows: torch.Tensor, counted: bool = True) -> dict[str, float]:
        """One optimiser step of actor and critic over ``rows`` of the prepared batch. Only the
        rollout batch's first update is ``counted`` in ``trainer.global_step``: a training step is
        one rollout batch however many epochs and mini-batches update on it, so ``max_steps``,
        validation and checkpoint intervals keep meaning rollout steps."""
        actor_opt, critic_opt = self.optimizers()
        batch: RolloutBatch = prepared["batch"]
        total_tokens = float(batch.policy_mask[rows].sum().clamp(min=1))
        rank_share = token_share(self, total_tokens)
        stats: dict[str, float] = {}
        micro_splits = rows.split(self.micro_batch_size or len(rows))
        seen_values = []
        for i, micro_rows in enumerate(micro_splits):
            micro = batch.rows(micro_rows)
            width = micro.ids.shape[1]
            take = lambda name: None if prepared[name] is None else prepared[name][micro_rows, :width]  # noqa: E731
            logprobs, entropy = self.actor(micro.ids, micro.attention, batch.temperature, with_entropy=True)
            values = self.critic(micro.ids, micro.attention)
            seen_values.append(pad_to(values.detach(), batch.ids.shape[1]))
            mask = micro.policy_mask
            pg_loss, pg_stats = policy_loss(logprobs, take("old_logprobs"), take("advantages"), mask,
                                            self.clip_low, self.clip_high, is_weights=take("is_weights"))
            v_loss, v_stats = value_loss(values, take("returns"), mask, old_values=take("values"),
                                         clip_range=self.value_clip)
            entropy_mean = masked_mean(entropy, mask)
            loss = pg_loss - self.entropy_coef * entropy_mean + v_loss
            if prepared["ref_logprobs"] is not None:
                kl = masked_mean(kl_penalty(logprobs, take("ref_logprobs"), self.kl_estimator, mask), mask)
                loss = loss + self.kl_coef * kl
                stats["actor/kl"] = stats.get("actor/kl", 0.0) + float(kl) * float(mask.sum()) / total_tokens
            # Token mean over the whole mini-batch (of every rank), however it is split.
            weight = float(mask.sum()) / total_tokens
            with gradient_sync(self, last=i == len(micro_splits) - 1):
                self.manual_backward(loss * weight * rank_share)
            for key, value in {"actor/loss": pg_loss, "actor/entropy": entropy_mean, "critic/loss": v_loss,
                               **{f"actor/{k}": v for k, v in pg_stats.items()},
                               **{f"critic/{k}": v for k, v in v_stats.items()}}.items():
                stats[key] = stats.get(key, 0.0) + float(value.detach() if torch.is_tensor(value) else value) * weight
        stats["actor/grad_norm"] = float(clip_grad_norm(self.actor, self.max_grad_norm))
        stats["critic/grad_norm"] = float(clip_grad_norm(self.critic, self.max_grad_norm))
        if counted:
            actor_opt.step()
        else:
            step_uncounted(actor_opt)
        step_uncounted(critic_opt)
        actor_opt.zero_grad(set_to_none=True)
        critic_opt.zero_grad(set_to_none=True)
        stats["critic/explained_var"] = float(explained_variance(torch.cat(seen_values), prepared["returns"][rows],
                                                                 batch.policy_mask[rows]))
        return stats
