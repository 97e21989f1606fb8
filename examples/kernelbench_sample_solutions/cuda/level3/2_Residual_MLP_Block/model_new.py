"""CUDA sample solution, level 3 problem 2 (residual MLP block): cuBLAS GEMMs + fused epilogues.

Same kernels as level 3 problem 1 (byte-identical files, so the sandbox's object cache builds
them once); the second layer's epilogue adds the bias and the residual in one pass.
"""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        h = cuda_extension.linear(x, self.fc1.weight, self.fc1.bias, True)
        return cuda_extension.linear_residual(h, self.fc2.weight, self.fc2.bias, x)
