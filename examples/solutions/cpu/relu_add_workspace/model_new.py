"""Workspace-form solution of relu_add: the kernel lives in kernels/, bound via the registry."""
import torch
import torch.nn as nn

import cuda_extension  # built by the sandbox from kernels/ + the fixed binding.cpp


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return cuda_extension.relu_add(a.contiguous(), b.contiguous())
