"""Sample benchmark (this project's own), level 1: softmax over each row of a 128 x 512 matrix."""
import torch
import torch.nn as nn

ROWS, COLS = 128, 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
