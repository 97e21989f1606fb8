"""Sample benchmark (this project's own), level 1: leaky ReLU with a slope set at construction."""
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS, COLS = 256, 1024
NEGATIVE_SLOPE = 0.01


class Model(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, self.negative_slope)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [NEGATIVE_SLOPE]
