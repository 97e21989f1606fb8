"""KernelBench level 1, problem 19 (ReLU): max(x, 0) element-wise.

One memory-bound pass: float4 loads and stores in a grid-stride loop, 8 blocks of 256 threads per
SM so every SM streams (the task's input is 4096 x 393216 fp32, 6 GiB).
The math is exact (a compare and select).
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__device__ __forceinline__ float op(float v) {
  return v > 0.f ? v : 0.f;
}

__global__ void map_vec(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
    float4 v = x[i];
    v.x = op(v.x); v.y = op(v.y); v.z = op(v.z); v.w = op(v.w);
    y[i] = v;
  }
}

__global__ void map_scalar(const float* __restrict__ x, float* __restrict__ y, int64_t start, int64_t n) {
  for (int64_t i = start + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    y[i] = op(x[i]);
  }
}

static int grid_for(int64_t work) {
  static int sms = 0;
  if (sms == 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (sms <= 0) sms = 132;
  }
  int64_t blocks = (work + 255) / 256;
  int64_t cap = (int64_t)sms * 8;
  return (int)(blocks < cap ? (blocks > 0 ? blocks : 1) : cap);
}

extern "C" int relu_fwd_launch(const float* x, float* y, int64_t n, cudaStream_t stream) {
  bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
  int64_t head = aligned ? (n / 4) * 4 : 0;
  if (head > 0) {
    map_vec<<<grid_for(head / 4), 256, 0, stream>>>(reinterpret_cast<const float4*>(x),
                                                     reinterpret_cast<float4*>(y), head / 4);
  }
  if (head < n) {
    map_scalar<<<grid_for(n - head), 256, 0, stream>>>(x, y, head, n);
  }
  return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

extern "C" int relu_fwd_launch(const float* x, float* y, int64_t n, cudaStream_t stream);

torch::Tensor relu_fwd(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "relu_fwd: float32 CUDA tensor expected");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  int status = relu_fwd_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(),
                             c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "relu_fwd: kernel launch failed with CUDA error ", status);
  return y;
}
"""

_ext = load_inline(
    name="kb_l1_19_relu_fwd",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["relu_fwd"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.relu_fwd(x)

