"""Training data: the task set and its train/validation split (tasks.py), trajectory rows as
padded tensors (batch.py), and the rollout DataModule that produces them on-policy through
the sandbox pool (rollout.py)."""
