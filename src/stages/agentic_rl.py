"""Stage 4, agentic PPO: multi-turn episodes (write, compile, verify, profile, revise) with the
actor from rejection fine-tuning and the critic from value pretraining (``init_from`` the value
stage's checkpoint, which carries both). Tool-output tokens are outside the policy mask and GAE
passes through them (src/rl)."""
from __future__ import annotations

from .ppo import PPOStage


class AgenticRLStage(PPOStage):
    """PPO with ``agent.mode == "multi_turn"``."""

    def on_fit_start(self) -> None:
        if self.agent.mode != "multi_turn":
            raise ValueError(f"the agentic stage trains multi-turn episodes, but agent.mode is {self.agent.mode!r}")
        super().on_fit_start()
