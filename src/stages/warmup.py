"""Stage 1, single-turn warm-up: PPO on one-shot kernel generation (the agent's single-turn
mode: one reply, its files judged once). The paper ran it at a 32,768-token context, before any
multi-turn training, because without it the importance ratios of rare CUDA tokens exploded."""
from __future__ import annotations

from .ppo import PPOStage


class WarmupStage(PPOStage):
    """PPO with ``agent.mode == "single_turn"`` (checked: the stage config sets it)."""

    def on_fit_start(self) -> None:
        if self.agent.mode != "single_turn":
            raise ValueError(f"the warm-up stage trains single-turn episodes, but agent.mode is {self.agent.mode!r}")
        super().on_fit_start()
