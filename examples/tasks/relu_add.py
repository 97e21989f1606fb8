"""Example task (KernelBench format): out = relu(a + b) over a few million floats."""
import torch
import torch.nn as nn

N = 1 << 22


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a + b)


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
