"""KernelBench level 1, problem 51 (argmax over dim 1): (128, 4096, 4095) -> int64 (128, 4095).

One thread per output column, walking its 4096 rows with stride 4095 (coalesced across the warp).
A strict '>' keeps the first index of the maximum, torch's documented tie rule; a NaN wins and
stays, as torch's argmax treats NaN as the maximum.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void argmax_mid(const float* __restrict__ x, int64_t* __restrict__ y, int64_t batch, int64_t rows, int64_t cols) {
  int64_t outputs = batch * cols;
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < outputs; o += (int64_t)gridDim.x * blockDim.x) {
    int64_t b = o / cols, j = o % cols;
    const float* p = x + b * rows * cols + j;
    float best = p[0];
    int64_t arg = 0;
    for (int64_t i = 1; i < rows; ++i) {
      float v = p[i * cols];
      if (best == best && (v > best || v != v)) { best = v; arg = i; }
    }
    y[o] = arg;
  }
}

extern "C" int argmax_dim1_launch(const float* x, int64_t* y, int64_t batch, int64_t rows, int64_t cols, cudaStream_t stream) {
  int64_t outputs = batch * cols;
  if (outputs == 0 || rows == 0) return 0;
  int64_t blocks = (outputs + 255) / 256;
  argmax_mid<<<(unsigned)blocks, 256, 0, stream>>>(x, y, batch, rows, cols);
  return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

extern "C" int argmax_dim1_launch(const float* x, int64_t* y, int64_t batch, int64_t rows, int64_t cols, cudaStream_t stream);

torch::Tensor argmax_dim1(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 3 && x.scalar_type() == torch::kFloat, "argmax_dim1: 3-D float32 CUDA tensor expected");
  TORCH_CHECK(x.size(1) > 0, "argmax_dim1: empty reduction dimension");
  auto xc = x.contiguous();
  auto y = torch::empty({xc.size(0), xc.size(2)}, xc.options().dtype(torch::kLong));
  int status = argmax_dim1_launch(xc.data_ptr<float>(), y.data_ptr<int64_t>(), xc.size(0), xc.size(1), xc.size(2),
                                  c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "argmax_dim1: kernel launch failed with CUDA error ", status);
  return y;
}
"""

_ext = load_inline(
    name="kb_l1_51_argmax",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["argmax_dim1"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        if dim != 1:
            raise ValueError("this kernel reduces dim 1 of a 3-D input (the task's layout)")
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.argmax_dim1(x)
