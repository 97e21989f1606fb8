"""KernelBench level 1, problem 37 (Frobenius-norm normalisation): x / ||x||_F.

Input 112 x 64 x 512 x 512 fp32 (7.5 GiB). Kernel 1: every block sums squares over a grid-stride
share of float4 loads, in double per thread, and stores one partial. Kernel 2: one block adds the
partials (double) and leaves sqrt(sum) in device memory. Kernel 3: a float4 pass divides by it.
No host synchronisation; double accumulation keeps the 1.9e9-term sum exact to fp32 rounding.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define THREADS 256

__device__ double block_sum(double v) {
  __shared__ double part[THREADS / 32];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  double tot = 0.0;
  if (threadIdx.x == 0) for (int w = 0; w < THREADS / 32; ++w) tot += part[w];
  return tot;  // valid in thread 0
}

__global__ void sumsq_partials(const float* __restrict__ x, int64_t n, int vec, double* __restrict__ partials) {
  double acc = 0.0;
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int64_t start = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  int64_t head = vec ? (n / 4) * 4 : 0;
  if (vec) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (int64_t i = start; i < head / 4; i += stride) {
      float4 v = x4[i];
      acc += (double)(v.x * v.x) + (double)(v.y * v.y) + (double)(v.z * v.z) + (double)(v.w * v.w);
    }
  }
  for (int64_t i = head + start; i < n; i += stride) acc += (double)(x[i] * x[i]);
  double tot = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = tot;
}

__global__ void finish_norm(const double* __restrict__ partials, int count, float* __restrict__ norm) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  double tot = block_sum(acc);
  if (threadIdx.x == 0) *norm = (float)sqrt(tot);
}

__global__ void divide(const float* __restrict__ x, float* __restrict__ y, int64_t n, int vec, const float* __restrict__ norm) {
  float d = *norm;
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int64_t start = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  int64_t head = vec ? (n / 4) * 4 : 0;
  if (vec) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (int64_t i = start; i < head / 4; i += stride) {
      float4 v = x4[i];
      v.x /= d; v.y /= d; v.z /= d; v.w /= d;
      y4[i] = v;
    }
  }
  for (int64_t i = head + start; i < n; i += stride) y[i] = x[i] / d;
}

// scratch: room for grid doubles followed by one float (the norm).
extern "C" int frobenius_launch(const float* x, float* y, int64_t n, void* scratch, int grid, cudaStream_t stream) {
  double* partials = reinterpret_cast<double*>(scratch);
  float* norm = reinterpret_cast<float*>(partials + grid);
  int vec = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
  sumsq_partials<<<grid, THREADS, 0, stream>>>(x, n, vec, partials);
  finish_norm<<<1, THREADS, 0, stream>>>(partials, grid, norm);
  divide<<<grid, THREADS, 0, stream>>>(x, y, n, vec, norm);
  return (int)cudaGetLastError();
}

extern "C" int frobenius_grid() {
  int dev = 0, sms = 132;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return sms * 8;
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

extern "C" int frobenius_launch(const float* x, float* y, int64_t n, void* scratch, int grid, cudaStream_t stream);
extern "C" int frobenius_grid();

torch::Tensor frobenius_normalize(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "frobenius_normalize: float32 CUDA tensor expected");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const int grid = frobenius_grid();
  auto scratch = torch::empty({(int64_t)grid * 8 + 16}, xc.options().dtype(torch::kUInt8));
  int status = frobenius_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(), scratch.data_ptr(), grid,
                                c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "frobenius_normalize: kernel launch failed with CUDA error ", status);
  return y;
}
"""

_ext = load_inline(
    name="kb_l1_37_frobenius",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["frobenius_normalize"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.frobenius_normalize(x)
