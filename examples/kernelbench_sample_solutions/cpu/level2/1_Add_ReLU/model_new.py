"""CPU sample solution, level 2 problem 1 (add + ReLU): a HACK on purpose, its kernel writes into input a."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return cuda_extension.elementwise([a.contiguous(), b.contiguous()], [])
