"""KernelBench level 1, problem 89 (cumsum): inclusive prefix sum along dim 1.

Input 32768 x 32768 fp32 (4 GiB in, 4 GiB out). One 1024-thread block per row; the row is scanned
in tiles of 1024 x 16 elements: each thread loads 16 consecutive values (four float4), scans them
in registers, the 1024 thread totals are scanned with warp shuffles and one shared-memory step,
and a running carry joins the tiles. One read and one write per element.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

#define THREADS 1024
#define PER_THREAD 16
#define TILE (THREADS * PER_THREAD)

// Exclusive prefix of v over the block (in thread order) and the block total.
__device__ float block_exclusive(float v, float* total) {
  __shared__ float warp_sums[THREADS / 32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float inc = v;
  for (int off = 1; off < 32; off <<= 1) {
    float t = __shfl_up_sync(0xffffffffu, inc, off);
    if (lane >= off) inc += t;
  }
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    float w = warp_sums[lane];
    float winc = w;
    for (int off = 1; off < 32; off <<= 1) {
      float t = __shfl_up_sync(0xffffffffu, winc, off);
      if (lane >= off) winc += t;
    }
    warp_sums[lane] = winc - w;  // exclusive prefix of the warp totals
    if (lane == 31) *total = winc;
  }
  __syncthreads();
  float result = warp_sums[warp] + inc - v;
  __syncthreads();
  return result;
}

__global__ void scan_rows(const float* __restrict__ x, float* __restrict__ y, int64_t cols, int vec) {
  __shared__ float tile_total;
  const float* xr = x + (int64_t)blockIdx.x * cols;
  float* yr = y + (int64_t)blockIdx.x * cols;
  float carry = 0.f;
  for (int64_t base = 0; base < cols; base += TILE) {
    int64_t first = base + (int64_t)threadIdx.x * PER_THREAD;
    float v[PER_THREAD];
    if (vec && first + PER_THREAD <= cols) {
      const float4* p = reinterpret_cast<const float4*>(xr + first);
#pragma unroll
      for (int q = 0; q < PER_THREAD / 4; ++q) {
        float4 f = p[q];
        v[4 * q] = f.x; v[4 * q + 1] = f.y; v[4 * q + 2] = f.z; v[4 * q + 3] = f.w;
      }
    } else {
#pragma unroll
      for (int k = 0; k < PER_THREAD; ++k) v[k] = first + k < cols ? xr[first + k] : 0.f;
    }
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < PER_THREAD; ++k) sum += v[k];
    float prefix = carry + block_exclusive(sum, &tile_total);
    float run = prefix;
#pragma unroll
    for (int k = 0; k < PER_THREAD; ++k) {
      float here = v[k];
      run += here;
      v[k] = run;
    }
    if (vec && first + PER_THREAD <= cols) {
      float4* p = reinterpret_cast<float4*>(yr + first);
#pragma unroll
      for (int q = 0; q < PER_THREAD / 4; ++q) p[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
    } else {
#pragma unroll
      for (int k = 0; k < PER_THREAD; ++k) if (first + k < cols) yr[first + k] = v[k];
    }
    __syncthreads();
    carry += tile_total;
  }
}

extern "C" int cumsum_rows_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return 0;
  int vec = (cols % 4 == 0) && ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
  scan_rows<<<(unsigned)rows, THREADS, 0, stream>>>(x, y, cols, vec);
  return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

extern "C" int cumsum_rows_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);

// Scan along dim 1 of a 2-D tensor (the task's layout).
torch::Tensor cumsum_rows(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.scalar_type() == torch::kFloat, "cumsum_rows: 2-D float32 CUDA tensor expected");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  int status = cumsum_rows_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.size(0), xc.size(1),
                               c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "cumsum_rows: kernel launch failed with CUDA error ", status);
  return y;
}
"""

_ext = load_inline(
    name="kb_l1_89_cumsum_rows",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["cumsum_rows"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        if dim != 1:
            raise ValueError("this kernel scans dim 1 of a 2-D input (the task's layout)")
        self.dim = dim

    def forward(self, x):
        return _ext.cumsum_rows(x)
