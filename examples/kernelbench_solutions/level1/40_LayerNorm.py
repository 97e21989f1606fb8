"""KernelBench level 1, problem 40 (LayerNorm over (64, 256, 256) with affine weight and bias).

Input 16 x 64 x 256 x 256 fp32: 16 samples of 4 Mi elements, too few rows for one block each.
Kernel 1 spreads every sample over many blocks; each adds its float4 share's sum and sum of
squares (double per thread) into the sample's two double accumulators with atomics. Kernel 2
derives mean and the biased variance (in double) and writes (x - mean) * rstd * w + b in one
float4 pass. The accumulators are zeroed on the stream first; no host synchronisation.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define THREADS 256

__global__ void ln_stats(const float4* __restrict__ x, int64_t per_sample4, double* __restrict__ stats) {
  const float4* xs = x + (int64_t)blockIdx.y * per_sample4;
  double s = 0.0, q = 0.0;
  for (int64_t i = blockIdx.x * (int64_t)THREADS + threadIdx.x; i < per_sample4; i += (int64_t)gridDim.x * THREADS) {
    float4 v = xs[i];
    s += (double)v.x + (double)v.y + (double)v.z + (double)v.w;
    q += (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w;
  }
  __shared__ double ps[THREADS / 32], pq[THREADS / 32];
  for (int off = 16; off > 0; off >>= 1) {
    s += __shfl_xor_sync(0xffffffffu, s, off);
    q += __shfl_xor_sync(0xffffffffu, q, off);
  }
  if ((threadIdx.x & 31) == 0) { ps[threadIdx.x >> 5] = s; pq[threadIdx.x >> 5] = q; }
  __syncthreads();
  if (threadIdx.x == 0) {
    double ts = 0.0, tq = 0.0;
    for (int w = 0; w < THREADS / 32; ++w) { ts += ps[w]; tq += pq[w]; }
    atomicAdd(&stats[2 * blockIdx.y], ts);
    atomicAdd(&stats[2 * blockIdx.y + 1], tq);
  }
}

__global__ void ln_apply(const float4* __restrict__ x, const float4* __restrict__ w, const float4* __restrict__ b,
                         float4* __restrict__ y, int64_t per_sample4, const double* __restrict__ stats, double count, float eps) {
  double mean_d = stats[2 * blockIdx.y] / count;
  double var_d = stats[2 * blockIdx.y + 1] / count - mean_d * mean_d;
  float mean = (float)mean_d;
  float rstd = (float)(1.0 / sqrt((var_d > 0.0 ? var_d : 0.0) + (double)eps));
  const float4* xs = x + (int64_t)blockIdx.y * per_sample4;
  float4* ys = y + (int64_t)blockIdx.y * per_sample4;
  for (int64_t i = blockIdx.x * (int64_t)THREADS + threadIdx.x; i < per_sample4; i += (int64_t)gridDim.x * THREADS) {
    float4 v = xs[i], g = w[i], c = b[i];
    v.x = (v.x - mean) * rstd * g.x + c.x;
    v.y = (v.y - mean) * rstd * g.y + c.y;
    v.z = (v.z - mean) * rstd * g.z + c.z;
    v.w = (v.w - mean) * rstd * g.w + c.w;
    ys[i] = v;
  }
}

// Needs per_sample % 4 == 0 and 16-byte aligned pointers (the wrapper checks); stats: 2 doubles per sample.
extern "C" int layer_norm_launch(const float* x, const float* w, const float* b, float* y, int64_t samples,
                                 int64_t per_sample, float eps, double* stats, cudaStream_t stream) {
  if (samples == 0 || per_sample == 0) return 0;
  int dev = 0, sms = 132;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  int64_t per4 = per_sample / 4;
  int64_t want = (per4 + THREADS - 1) / THREADS;
  int64_t cap = ((int64_t)sms * 8 + samples - 1) / samples;
  dim3 grid((unsigned)(want < cap ? want : cap), (unsigned)samples);
  cudaMemsetAsync(stats, 0, sizeof(double) * 2 * samples, stream);
  ln_stats<<<grid, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(x), per4, stats);
  ln_apply<<<grid, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(w),
                                        reinterpret_cast<const float4*>(b), reinterpret_cast<float4*>(y), per4,
                                        stats, (double)per_sample, eps);
  return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

extern "C" int layer_norm_launch(const float* x, const float* w, const float* b, float* y, int64_t samples,
                                 int64_t per_sample, float eps, double* stats, cudaStream_t stream);

torch::Tensor layer_norm_affine(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "layer_norm_affine: float32 CUDA tensor expected");
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto bc = bias.contiguous();
  const int64_t per_sample = wc.numel();
  TORCH_CHECK(per_sample > 0 && xc.numel() % per_sample == 0 && bc.numel() == per_sample, "layer_norm_affine: shapes do not match");
  TORCH_CHECK(per_sample % 4 == 0, "layer_norm_affine: normalised size must be a multiple of 4");
  auto y = torch::empty_like(xc);
  const int64_t samples = xc.numel() / per_sample;
  auto stats = torch::empty({samples * 2}, xc.options().dtype(torch::kDouble));
  int status = layer_norm_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(),
                                 samples, per_sample, (float)eps, stats.data_ptr<double>(),
                                 c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "layer_norm_affine: kernel launch failed with CUDA error ", status);
  return y;
}
"""

_ext = load_inline(
    name="kb_l1_40_layernorm",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["layer_norm_affine"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.layer_norm_affine(x, self.ln.weight, self.ln.bias, self.ln.eps)
