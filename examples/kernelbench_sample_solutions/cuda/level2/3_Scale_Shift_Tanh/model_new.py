"""CUDA sample solution, level 2 problem 3 (scale, shift, tanh): workspace form, one fused pass."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, scale: float, shift: float):
        super().__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.scale_shift_tanh(x.contiguous(), self.scale, self.shift)
