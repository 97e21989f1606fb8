"""KernelBench level 1, problem 23 (Softmax): softmax over dim 1.

One 1024-thread block per row (4096 rows of 393216 floats fill the 132 SMs). Pass 1 keeps an online
(max, sum of exp) per thread over float4 loads and merges the pairs with warp shuffles and shared
memory; pass 2 re-reads the row and writes exp(x - max) / sum. Two reads and one write per element,
accurate expf/logf (no fast-math), fp32 sums over at most 384 values per thread before the tree.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

struct MaxSum { float m; float s; };

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ void add(MaxSum& acc, float v) {
  if (v > acc.m) {
    acc.s = acc.s * expf(acc.m - v) + 1.f;
    acc.m = v;
  } else {
    acc.s += expf(v - acc.m);
  }
}

// The row's (max, sum) merged across the block; every thread gets the result.
__device__ MaxSum block_merge(MaxSum acc) {
  __shared__ float sm[32], ss[32];
  for (int off = 16; off > 0; off >>= 1) {
    MaxSum o = {__shfl_xor_sync(0xffffffffu, acc.m, off), __shfl_xor_sync(0xffffffffu, acc.s, off)};
    acc = merge(acc, o);
  }
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) { sm[warp] = acc.m; ss[warp] = acc.s; }
  __syncthreads();
  int warps = (blockDim.x + 31) >> 5;
  MaxSum tot = {-INFINITY, 0.f};
  for (int w = 0; w < warps; ++w) tot = merge(tot, MaxSum{sm[w], ss[w]});
  return tot;
}

__device__ __forceinline__ float finish(float v, float m, float inv_s, float log_s) {
  return expf(v - m) * inv_s;
}

__global__ void row_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols, int vec) {
  const float* xr = x + (int64_t)blockIdx.x * cols;
  float* yr = y + (int64_t)blockIdx.x * cols;
  MaxSum acc = {-INFINITY, 0.f};
  if (vec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    for (int64_t i = threadIdx.x; i < cols / 4; i += blockDim.x) {
      float4 v = x4[i];
      add(acc, v.x); add(acc, v.y); add(acc, v.z); add(acc, v.w);
    }
  } else {
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) add(acc, xr[i]);
  }
  MaxSum tot = block_merge(acc);
  float inv_s = 1.f / tot.s, log_s = logf(tot.s);
  if (vec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    float4* y4 = reinterpret_cast<float4*>(yr);
    for (int64_t i = threadIdx.x; i < cols / 4; i += blockDim.x) {
      float4 v = x4[i];
      v.x = finish(v.x, tot.m, inv_s, log_s); v.y = finish(v.y, tot.m, inv_s, log_s);
      v.z = finish(v.z, tot.m, inv_s, log_s); v.w = finish(v.w, tot.m, inv_s, log_s);
      y4[i] = v;
    }
  } else {
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) yr[i] = finish(xr[i], tot.m, inv_s, log_s);
  }
}

extern "C" int softmax_rows_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return 0;
  int vec = (cols % 4 == 0) && ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
  row_kernel<<<(unsigned)rows, 1024, 0, stream>>>(x, y, cols, vec);
  return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

extern "C" int softmax_rows_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);

// Softmax family over dim 1 of a 2-D tensor (the task's layout).
torch::Tensor softmax_rows(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.scalar_type() == torch::kFloat, "softmax_rows: 2-D float32 CUDA tensor expected");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  int status = softmax_rows_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.size(0), xc.size(1),
                               c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "softmax_rows: kernel launch failed with CUDA error ", status);
  return y;
}
"""

_ext = load_inline(
    name="kb_l1_23_softmax_rows",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["softmax_rows"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.softmax_rows(x)
