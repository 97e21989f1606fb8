"""Sample benchmark (this project's own), level 2: y <- relu(decay * y + x), sixteen times.

Eager runs 48 small operators with a temporary each; one fused pass does the same arithmetic,
so a correct kernel is clearly faster than eager on any device.
"""
import torch
import torch.nn as nn

SIZE = 1 << 14
STEPS = 16
DECAY = 0.5


class Model(nn.Module):
    def __init__(self, steps: int, decay: float):
        super().__init__()
        self.steps = steps
        self.decay = decay

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.zeros_like(x)
        for _ in range(self.steps):
            y = torch.relu(self.decay * y + x)
        return y


def get_inputs():
    return [torch.randn(SIZE)]


def get_init_inputs():
    return [STEPS, DECAY]
