"""Sample benchmark (this project's own), level 3: x + fc2(relu(fc1(x))), a residual MLP block."""
import torch
import torch.nn as nn

BATCH, WIDTH, HIDDEN = 64, 256, 1024


class Model(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(x)))


def get_inputs():
    return [torch.randn(BATCH, WIDTH)]


def get_init_inputs():
    return [WIDTH, HIDDEN]
