"""The PPO update learns: with a synthetic reward and no sandbox (reward = share of the reply's
tokens that fall in a target half of the vocabulary), the real PPO stage (real Lightning
training, the rollout policy over the module being trained, GAE, clipped surrogate, critic)
raises a tiny model's mean reward within a bounded number of steps. A no-op update, an inverted
mask or a sign error keeps the reward where it started."""
from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

from src.agent.episode import AgentConfig
from src.data.batch import collate_rows
from src.models import build_critic, load_actor
from src.stages.ppo import PPOStage

PROMPT = "Write a kernel."
STEPS, EPISODES, REPLY_TOKENS = 30, 16, 8


class TargetTokenPPO(PPOStage):
    """PPO whose episodes are one reply to a fixed prompt, rewarded by token membership."""

    def __init__(self, *args, prompt_ids: list[int], target: set[int], **kwargs):
        super().__init__(*args, **kwargs)
        self.prompt_ids, self.target, self.rewards = prompt_ids, target, []

    def training_step(self, batch, batch_idx):
        policy = self.policy()
        replies = policy.generate_batch([(self.prompt_ids, REPLY_TOKENS)] * EPISODES)
        rows = []
        for reply in replies:
            ids = reply.token_ids
            reward = sum(i in self.target for i in ids) / max(len(ids), 1)
            rows.append({"token_ids": self.prompt_ids + ids, "loss_mask": [0] * len(self.prompt_ids) + [1] * len(ids),
                         "logprobs": [0.0] * len(self.prompt_ids) + list(reply.logprobs), "reward": reward,
                         "sampling": policy.sampling})
        self.rewards.append(sum(r["reward"] for r in rows) / len(rows))
        pad = self.actor.tokenizer.pad_token_id
        self.last_stats = self.ppo_update(collate_rows(rows, pad).to(self.device))


def test_ppo_raises_the_mean_reward_of_a_tiny_model(tiny_model_dir):
    pl.seed_everything(0, verbose=False)
    actor = load_actor(str(tiny_model_dir))
    critic = build_critic(actor)
    vocab = len(actor.tokenizer)
    target = set(range(3, vocab // 2))  # half the vocabulary (not the special tokens at 0-2)
    module = TargetTokenPPO(
        actor, critic, AgentConfig(), actor_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-2),
        critic_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-2), sampling={"temperature": 1.0, "max_batch": 1},
        micro_batch_size=8, prompt_ids=actor.tokenizer.encode(PROMPT), target=target)
    trainer = pl.Trainer(accelerator="cpu", max_steps=STEPS, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, train_dataloaders=DataLoader(list(range(STEPS)), batch_size=1))
    first, last = sum(module.rewards[:3]) / 3, sum(module.rewards[-3:]) / 3
    assert trainer.global_step == STEPS  # one counted step per update, critic steps not counted
    assert 0.3 < first < 0.7, module.rewards  # chance level: about half the tokens are targets
    assert last > first + 0.25, module.rewards
    assert module.last_stats["actor/logprob_mismatch"] < 1e-4  # rollout and trainer agree
