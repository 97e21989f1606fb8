"""KernelBench level 1, problem 38 (L1 normalisation per row): x / mean(|x|, dim=1).

Input 32768 x 65535 fp32 (8.6 GiB). One 512-thread block per row: pass 1 sums |x| (fp32 per
thread, a few hundred terms, then a warp/shared tree), pass 2 re-reads the row and divides by the
mean. The odd row length (65535) rules out float4 alignment, so loads are scalar but coalesced.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define THREADS 512

__device__ float block_sum_all(float v) {
  __shared__ float part[THREADS / 32];
  __shared__ float total;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int w = 0; w < THREADS / 32; ++w) t += part[w];
    total = t;
  }
  __syncthreads();
  return total;
}

__global__ void l1_rows(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
  const float* xr = x + (int64_t)blockIdx.x * cols;
  float* yr = y + (int64_t)blockIdx.x * cols;
  float acc = 0.f;
  for (int64_t i = threadIdx.x; i < cols; i += THREADS) acc += fabsf(xr[i]);
  float mean = block_sum_all(acc) / (float)cols;
  for (int64_t i = threadIdx.x; i < cols; i += THREADS) yr[i] = xr[i] / mean;
}

extern "C" int l1_norm_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return 0;
  l1_rows<<<(unsigned)rows, THREADS, 0, stream>>>(x, y, cols);
  return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

extern "C" int l1_norm_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);

torch::Tensor l1_normalize_rows(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.scalar_type() == torch::kFloat, "l1_normalize_rows: 2-D float32 CUDA tensor expected");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  int status = l1_norm_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.size(0), xc.size(1),
                              c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "l1_normalize_rows: kernel launch failed with CUDA error ", status);
  return y;
}
"""

_ext = load_inline(
    name="kb_l1_38_l1norm",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["l1_normalize_rows"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.l1_normalize_rows(x)
