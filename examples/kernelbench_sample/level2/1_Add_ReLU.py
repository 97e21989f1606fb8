"""Sample benchmark (this project's own), level 2: relu(a + b), two ops a kernel can fuse."""
import torch
import torch.nn as nn

ROWS, COLS = 256, 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a + b)


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
