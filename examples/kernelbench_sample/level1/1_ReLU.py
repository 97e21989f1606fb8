"""Sample benchmark (this project's own), level 1: ReLU over a 256 x 1024 matrix."""
import torch
import torch.nn as nn

ROWS, COLS = 256, 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
