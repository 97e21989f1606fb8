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


def test_the_actor_lambda_reaches_the_first_token_of_a_long_reply(tiny_model_dir):
    """``actor_lam=1``: a reply's first token is credited with its outcome (R - V), where the
    paper's one lambda of 0.95 leaves it ~0.95**200 of the reward plus the critic's differences;
    the critic's targets do not change."""
    pl.seed_everything(0, verbose=False)
    actor = load_actor(str(tiny_model_dir))
    critic = build_critic(actor)
    prompt, reply = actor.tokenizer.encode(PROMPT), 200
    rows = [{"token_ids": prompt + [5 + (i % 7) for i in range(reply)], "loss_mask": [0] * len(prompt) + [1] * reply,
             "logprobs": [0.0] * (len(prompt) + reply), "reward": reward, "sampling": {"temperature": 1.0}}
            for reward in (3.0, -1.0)]
    batch = collate_rows(rows, actor.tokenizer.pad_token_id)

    def prepared(actor_lam):
        module = PPOStage(actor, critic, AgentConfig(), actor_optimizer=None, critic_optimizer=None,
                          sampling={"temperature": 1.0}, actor_lam=actor_lam)
        return module.prepare(batch)

    paper, monte_carlo = prepared(None), prepared(1.0)
    first = len(prompt)
    # Whitened over the batch: the rewarded row's first token above the penalised row's, by a margin.
    assert monte_carlo["advantages"][0, first] > 0.5 > -0.5 > monte_carlo["advantages"][1, first]
    assert abs(paper["advantages"][0, first] - monte_carlo["advantages"][0, first]) > 0.3
    assert torch.equal(paper["returns"], monte_carlo["returns"])


def test_epochs_and_mini_batches_update_often_but_count_one_step_per_rollout_batch(tiny_model_dir):
    """2 epochs x 2 mini-batches: 4 actor updates on each rollout batch, one trainer step."""
    pl.seed_everything(0, verbose=False)
    actor = load_actor(str(tiny_model_dir))
    module = TargetTokenPPO(
        actor, build_critic(actor), AgentConfig(), actor_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3),
        critic_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3), sampling={"temperature": 1.0, "max_batch": 1},
        ppo_epochs=2, mini_batches=2, prompt_ids=actor.tokenizer.encode(PROMPT),
        target=set(range(3, len(actor.tokenizer) // 2)))
    trainer = pl.Trainer(accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, train_dataloaders=DataLoader(list(range(5)), batch_size=1))
    actor_opt, critic_opt = (opt.optimizer for opt in module.optimizers())
    adam_steps = {float(state["step"]) for opt in (actor_opt, critic_opt) for state in opt.state.values()}
    assert trainer.global_step == 2 and len(module.rewards) == 2  # two rollout batches
    assert adam_steps == {8.0}  # 2 batches x 2 epochs x 2 mini-batches, actor and critic alike
    # Later updates on a batch see the ratio move away from 1: the clipped surrogate is in play.
    assert module.last_stats["actor/approx_kl"] > 0
