"""CUDA sample solution, level 1 problem 1 (ReLU): workspace form, a vectorised kernel."""
import torch
import torch.nn as nn

import cuda_extension  # built by the sandbox from kernels/ and its fixed binding.cpp


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.relu(x.contiguous())
