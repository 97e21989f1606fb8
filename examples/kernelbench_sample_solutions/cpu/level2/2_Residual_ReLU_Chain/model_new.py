"""CPU sample solution, level 2 problem 2 (residual ReLU chain): correct and fast, one fused kernel."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, steps: int, decay: float):
        super().__init__()
        self.steps = steps
        self.decay = decay

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.elementwise([x.contiguous()], [float(self.steps), float(self.decay)])
