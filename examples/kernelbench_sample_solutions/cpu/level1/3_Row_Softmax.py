"""CPU sample solution, level 1 problem 3 (row softmax): a HACK on purpose.

It returns PyTorch's own softmax instead of a kernel; the sandbox's guards report a torch_op
violation (reward -1).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)
