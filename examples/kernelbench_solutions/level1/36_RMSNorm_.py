"""KernelBench level 1, problem 36 (RMSNorm over the channel dim): x / sqrt(mean_c(x^2) + eps).

Input 112 x 64 x 512 x 512 fp32 (7.5 GiB). One thread per (batch, pixel): it loads that pixel's 64
channel values (stride H*W apart, so a warp's loads are contiguous), keeps them in registers, sums
their squares and writes the 64 scaled values: one read and one write per element. Channel counts
other than 64 fall back to a two-pass loop with the same arithmetic.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

template <int C>
__global__ void rms_regs(const float* __restrict__ x, float* __restrict__ y, int64_t positions, int64_t plane, float eps) {
  for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < positions; p += (int64_t)gridDim.x * blockDim.x) {
    int64_t base = (p / plane) * C * plane + (p % plane);
    float v[C];
    float acc = 0.f;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      v[c] = x[base + c * plane];
      acc += v[c] * v[c];
    }
    float rms = sqrtf(acc / (float)C + eps);
#pragma unroll
    for (int c = 0; c < C; ++c) y[base + c * plane] = v[c] / rms;
  }
}

__global__ void rms_any(const float* __restrict__ x, float* __restrict__ y, int64_t positions, int64_t plane, int channels, float eps) {
  for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < positions; p += (int64_t)gridDim.x * blockDim.x) {
    int64_t base = (p / plane) * channels * plane + (p % plane);
    float acc = 0.f;
    for (int c = 0; c < channels; ++c) { float v = x[base + c * plane]; acc += v * v; }
    float rms = sqrtf(acc / (float)channels + eps);
    for (int c = 0; c < channels; ++c) y[base + c * plane] = x[base + c * plane] / rms;
  }
}

extern "C" int rms_norm_launch(const float* x, float* y, int64_t batch, int channels, int64_t plane, float eps,
                               cudaStream_t stream) {
  int dev = 0, sms = 132;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  int64_t positions = batch * plane;
  if (positions == 0) return 0;
  int64_t blocks = (positions + 255) / 256;
  int64_t cap = (int64_t)sms * 8;
  int grid = (int)(blocks < cap ? blocks : cap);
  if (channels == 64) {
    rms_regs<64><<<grid, 256, 0, stream>>>(x, y, positions, plane, eps);
  } else {
    rms_any<<<grid, 256, 0, stream>>>(x, y, positions, plane, channels, eps);
  }
  return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

extern "C" int rms_norm_launch(const float* x, float* y, int64_t batch, int channels, int64_t plane, float eps,
                               cudaStream_t stream);

torch::Tensor rms_norm_channels(torch::Tensor x, double eps) {
  TORCH_CHECK(x.is_cuda() && x.dim() >= 2 && x.scalar_type() == torch::kFloat, "rms_norm_channels: float32 CUDA (N, C, ...) expected");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const int64_t batch = xc.size(0), channels = xc.size(1);
  const int64_t plane = channels == 0 ? 0 : xc.numel() / (batch * channels);
  int status = rms_norm_launch(xc.data_ptr<float>(), y.data_ptr<float>(), batch, (int)channels, plane, (float)eps,
                               c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "rms_norm_channels: kernel launch failed with CUDA error ", status);
  return y;
}
"""

_ext = load_inline(
    name="kb_l1_36_rms_norm",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["rms_norm_channels"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.rms_norm_channels(x, self.eps)
