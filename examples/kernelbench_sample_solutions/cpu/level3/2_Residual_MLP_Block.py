"""CPU sample solution, level 3 problem 2 (residual MLP block): INVALID on purpose.

It defines no ModelNew, so the sandbox rejects it before building anything (invalid_solution).
Level 3 problem 1 has no solution file at all: a missing solution counts as a failure.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(x)))
