"""The training package: LLM access, agent loop, rollout, RL math and training stages."""
