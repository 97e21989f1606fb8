"""CUDA sample solution, level 2 problem 2 (residual ReLU chain): workspace form, all steps fused."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, steps: int, decay: float):
        super().__init__()
        self.steps = steps
        self.decay = decay

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.relu_chain(x.contiguous(), self.steps, self.decay)
