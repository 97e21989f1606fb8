"""KernelBench level 1, problem 47 (sum over dim 1, keepdim): (128, 4096, 4095) -> (128, 1, 4095).

One thread per output column (b, j): it walks the 4096 rows of its batch with stride 4095, so a
warp reads 32 consecutive floats per row (coalesced). Four independent fp32 accumulators (rows
i mod 4) shorten the dependency chain and keep the rounding close to a pairwise sum.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void sum_mid(const float* __restrict__ x, float* __restrict__ y, int64_t batch, int64_t rows, int64_t cols) {
  int64_t outputs = batch * cols;
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < outputs; o += (int64_t)gridDim.x * blockDim.x) {
    int64_t b = o / cols, j = o % cols;
    const float* p = x + b * rows * cols + j;
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
    int64_t i = 0;
    for (; i + 3 < rows; i += 4) {
      a0 += p[i * cols];
      a1 += p[(i + 1) * cols];
      a2 += p[(i + 2) * cols];
      a3 += p[(i + 3) * cols];
    }
    for (; i < rows; ++i) a0 += p[i * cols];
    y[o] = (a0 + a1) + (a2 + a3);
  }
}

extern "C" int sum_dim1_launch(const float* x, float* y, int64_t batch, int64_t rows, int64_t cols, cudaStream_t stream) {
  int64_t outputs = batch * cols;
  if (outputs == 0) return 0;
  int64_t blocks = (outputs + 255) / 256;
  sum_mid<<<(unsigned)blocks, 256, 0, stream>>>(x, y, batch, rows, cols);
  return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

extern "C" int sum_dim1_launch(const float* x, float* y, int64_t batch, int64_t rows, int64_t cols, cudaStream_t stream);

torch::Tensor sum_dim1_keepdim(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 3 && x.scalar_type() == torch::kFloat, "sum_dim1_keepdim: 3-D float32 CUDA tensor expected");
  auto xc = x.contiguous();
  auto y = torch::empty({xc.size(0), 1, xc.size(2)}, xc.options());
  int status = sum_dim1_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.size(0), xc.size(1), xc.size(2),
                               c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "sum_dim1_keepdim: kernel launch failed with CUDA error ", status);
  return y;
}
"""

_ext = load_inline(
    name="kb_l1_47_sum_dim1",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["sum_dim1_keepdim"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        if dim != 1:
            raise ValueError("this kernel reduces dim 1 of a 3-D input (the task's layout)")
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.sum_dim1_keepdim(x)
