"""Single-file (KernelBench-style) solution of relu_add for the cuda backend."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu_add_kernel(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = fmaxf(a[i] + b[i], 0.f);
}

torch::Tensor relu_add(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.is_cuda() && a.is_contiguous() && b.is_contiguous());
  auto out = torch::empty_like(a);
  const int64_t n = a.numel();
  const int threads = 256;
  relu_add_kernel<<<(n + threads - 1) / threads, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
  return out;
}
"""

relu_add_ext = load_inline(
    name="relu_add_cuda_inline",
    cpp_sources="torch::Tensor relu_add(torch::Tensor a, torch::Tensor b);",
    cuda_sources=CUDA_SOURCE,
    functions=["relu_add"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return relu_add_ext.relu_add(a.contiguous(), b.contiguous())
