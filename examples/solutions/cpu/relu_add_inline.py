"""Single-file (KernelBench-style) solution of relu_add for the cpu backend: load_inline + OpenMP."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

torch::Tensor relu_add(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.is_contiguous() && b.is_contiguous() && a.scalar_type() == torch::kFloat);
  auto out = torch::empty_like(a);
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  float* po = out.data_ptr<float>();
  const int64_t n = a.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = pa[i] + pb[i];
    po[i] = v > 0.0f ? v : 0.0f;
  }
  return out;
}
"""

relu_add_ext = load_inline(
    name="relu_add_cpu_inline",
    cpp_sources=CPP_SOURCE,
    functions=["relu_add"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return relu_add_ext.relu_add(a.contiguous(), b.contiguous())
