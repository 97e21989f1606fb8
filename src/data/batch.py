"""Trajectory rows (src/agent/trajectory.py) as padded training tensors.

RolloutBatch, for B rows right-padded to T = the longest row:
    ids               [B, T] long   token ids (pad id after each row's end)
    attention         [B, T] long   1 on real tokens
    policy_mask       [B, T] float  1 exactly on tokens the policy generated (the row's loss_mask),
                                    0 on prompt, tool output, template tails and padding
    rollout_logprobs  [B, T] float  log-prob of each generated token under the sampling
                                    distribution, as recorded at rollout (0 off the mask)
    rewards           [B]    float  each row's scalar reward (it goes on the last policy token)
    temperature       float         the sampling temperature all rows were drawn at
Position t of every per-token tensor belongs to token ids[:, t] (src/models/actor.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import torch


@dataclass
class RolloutBatch:
    ids: torch.Tensor
    attention: torch.Tensor
    policy_mask: torch.Tensor
    rollout_logprobs: torch.Tensor
    rewards: torch.Tensor
    temperature: float = 1.0

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def to(self, device: torch.device | str) -> "RolloutBatch":
        return replace(self, **{name: getattr(self, name).to(device) for name in
                                ("ids", "attention", "policy_mask", "rollout_logprobs", "rewards")})

    def rows(self, index: torch.Tensor | slice) -> "RolloutBatch":
        """A sub-batch, trimmed to its own longest row (micro-batches pay for no extra padding)."""
        sub = replace(self, **{name: getattr(self, name)[index] for name in
                               ("ids", "attention", "policy_mask", "rollout_logprobs", "rewards")})
        width = int(sub.attention.sum(dim=1).max()) if len(sub) else 0
        return replace(sub, **{name: getattr(sub, name)[:, :width] for name in
                               ("ids", "attention", "policy_mask", "rollout_logprobs")})

    @property
    def num_policy_tokens(self) -> int:
        return int(self.policy_mask.sum())


def collate_rows(rows: Sequence[dict[str, Any]], pad_id: int, reward_key: str = "reward") -> RolloutBatch:
    """Pad trajectory rows into a RolloutBatch. A row without token ids (a text-level policy) or
    whose ids, mask and log-probs disagree in length is refused: training must see the exact
    ids that were sampled."""
    if not rows:
        raise ValueError("no trajectory rows to collate")
    width = max(len(r["token_ids"]) for r in rows)
    shape = (len(rows), width)
    ids = torch.full(shape, pad_id, dtype=torch.long)
    attention = torch.zeros(shape, dtype=torch.long)
    mask = torch.zeros(shape, dtype=torch.float32)
    logprobs = torch.zeros(shape, dtype=torch.float32)
    temperatures = set()
    for i, row in enumerate(rows):
        n = len(row["token_ids"])
        if n == 0 or len(row["loss_mask"]) != n or len(row["logprobs"]) != n:
            raise ValueError(f"trajectory {row.get('episode_id')}: {n} ids, {len(row['loss_mask'])} mask entries, "
                             f"{len(row['logprobs'])} log-probs (token-level rows only)")
        ids[i, :n] = torch.tensor(row["token_ids"], dtype=torch.long)
        attention[i, :n] = 1
        mask[i, :n] = torch.tensor(row["loss_mask"], dtype=torch.float32)
        logprobs[i, :n] = torch.tensor(row["logprobs"], dtype=torch.float32)
        temperatures.add(float((row.get("sampling") or {}).get("temperature", 1.0)))
    rewards = torch.tensor([float(r.get(reward_key) if r.get(reward_key) is not None else -1.0) for r in rows])
    if len(temperatures) > 1:
        raise ValueError(f"rows sampled at different temperatures {sorted(temperatures)} cannot share a batch")
    temperature = temperatures.pop() or 1.0  # greedy rows are scored at T = 1
    return RolloutBatch(ids, attention, mask, logprobs, rewards, temperature)
