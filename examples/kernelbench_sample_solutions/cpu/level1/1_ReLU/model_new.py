"""CPU sample solution, level 1 problem 1 (ReLU): correct, a C++ kernel through the workspace form."""
import torch
import torch.nn as nn

import cuda_extension  # built by the sandbox from kernels/ and its fixed binding.cpp


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.elementwise([x.contiguous()], [])
