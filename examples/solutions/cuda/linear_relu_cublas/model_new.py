"""Workspace-form solution of linear_relu: cuBLAS SGEMM + a fused bias/ReLU kernel.

The parameters stay in an nn.Linear so the reference state_dict loads as is; forward only
reads them as tensors.
"""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.linear_relu(x, self.linear.weight, self.linear.bias)
