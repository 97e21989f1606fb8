"""KernelBench level 1, problem 100 (hinge loss): mean(clamp(1 - p * t, min=0)), t broadcast on columns.

Predictions 32768 x 32768 (heavy-tailed Pareto values, 4 GiB), targets (32768,) of +-1 broadcast
along the last dim as torch broadcasts them. Kernel 1: float4 grid-stride pass, each thread sums in
double; one double partial per block. Kernel 2: one block adds the partials and writes the mean as
a 0-d float32 tensor. Double sums keep the 1.07e9-term total far inside the 1e-4 tolerance.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

#define THREADS 256

__device__ double block_sum(double v) {
  __shared__ double part[THREADS / 32];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  double tot = 0.0;
  if (threadIdx.x == 0) for (int w = 0; w < THREADS / 32; ++w) tot += part[w];
  return tot;
}

__device__ __forceinline__ double hinge(float p, float t) {
  float v = 1.f - p * t;
  return v > 0.f ? (double)v : 0.0;
}

__global__ void hinge_partials(const float* __restrict__ p, const float* __restrict__ t, int64_t n, int64_t cols,
                               int vec, double* __restrict__ partials) {
  double acc = 0.0;
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int64_t start = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (vec) {  // cols % 4 == 0: a float4 never straddles two rows
    const float4* p4 = reinterpret_cast<const float4*>(p);
    for (int64_t i = start; i < n / 4; i += stride) {
      float4 v = p4[i];
      int64_t j = (i * 4) % cols;
      acc += hinge(v.x, t[j]) + hinge(v.y, t[j + 1]) + hinge(v.z, t[j + 2]) + hinge(v.w, t[j + 3]);
    }
  } else {
    for (int64_t i = start; i < n; i += stride) acc += hinge(p[i], t[i % cols]);
  }
  double tot = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = tot;
}

__global__ void finish_mean(const double* __restrict__ partials, int count, double n, float* __restrict__ out) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  double tot = block_sum(acc);
  if (threadIdx.x == 0) *out = (float)(tot / n);
}

extern "C" int hinge_grid() {
  int dev = 0, sms = 132;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return sms * 8;
}

extern "C" int hinge_launch(const float* p, const float* t, float* out, int64_t n, int64_t cols, double* partials,
                            int grid, cudaStream_t stream) {
  int vec = (cols % 4 == 0) && (reinterpret_cast<uintptr_t>(p) & 15) == 0;
  hinge_partials<<<grid, THREADS, 0, stream>>>(p, t, n, cols, vec, partials);
  finish_mean<<<1, THREADS, 0, stream>>>(partials, grid, (double)n, out);
  return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

extern "C" int hinge_grid();
extern "C" int hinge_launch(const float* p, const float* t, float* out, int64_t n, int64_t cols, double* partials,
                            int grid, cudaStream_t stream);

// mean(clamp(1 - predictions * targets, min=0)) with targets broadcast over the last dim.
torch::Tensor hinge_mean(torch::Tensor predictions, torch::Tensor targets) {
  TORCH_CHECK(predictions.is_cuda() && targets.is_cuda(), "hinge_mean: CUDA tensors expected");
  TORCH_CHECK(predictions.scalar_type() == torch::kFloat && targets.scalar_type() == torch::kFloat, "hinge_mean: float32 only");
  auto p = predictions.contiguous();
  auto t = targets.contiguous();
  const int64_t cols = p.size(-1);
  TORCH_CHECK(t.numel() == cols, "hinge_mean: targets must broadcast along the last dim of predictions");
  const int grid = hinge_grid();
  auto partials = torch::empty({grid}, p.options().dtype(torch::kDouble));
  auto out = torch::empty({}, p.options());
  int status = hinge_launch(p.data_ptr<float>(), t.data_ptr<float>(), out.data_ptr<float>(), p.numel(), cols,
                            partials.data_ptr<double>(), grid, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "hinge_mean: kernel launch failed with CUDA error ", status);
  return out;
}
"""

_ext = load_inline(
    name="kb_l1_100_hinge",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["hinge_mean"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return _ext.hinge_mean(predictions, targets)
