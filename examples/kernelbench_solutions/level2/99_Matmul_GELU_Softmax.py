"""KernelBench level 2, problem 99 (Matmul, GELU, softmax): softmax(gelu(x W^T + b), dim=1).

The GEMM runs in cuBLAS in full fp32 (no TF32, as torch's Linear); one block per row adds the bias, applies
the exact GELU and the softmax with the 8192-wide row held in registers (1024 x 8192 x 8192).
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

static cublasHandle_t gemm_handle() {
  static cublasHandle_t handle = nullptr;
  if (handle == nullptr && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) handle = nullptr;
  return handle;
}

// y[M, N] = x[M, K] * w[N, K]^T in full fp32 (the handle's default math mode: no TF32), like
// torch.nn.functional.linear without its bias. Row-major operands seen as column-major transposes.
static int sgemm_xwt(const float* x, const float* w, float* y, int M, int N, int K, cudaStream_t stream) {
  cublasHandle_t handle = gemm_handle();
  if (handle == nullptr) return 1001;
  cublasSetStream(handle, stream);
  const float one = 1.f, zero = 0.f;
  cublasStatus_t st = cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w, K, x, K, &zero, y, N);
  return st == CUBLAS_STATUS_SUCCESS ? 0 : 1000 + (int)st;
}

#define THREADS 256

__device__ float block_reduce(float v, int is_max) {
  __shared__ float part[THREADS / 32];
  __shared__ float result;
  for (int off = 16; off > 0; off >>= 1) {
    float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = part[0];
    for (int w = 1; w < THREADS / 32; ++w) t = is_max ? fmaxf(t, part[w]) : t + part[w];
    result = t;
  }
  __syncthreads();
  float r = result;
  __syncthreads();
  return r;
}

#define PER_THREAD_MAX 64

__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.f + erff(v * 0.70710678118654752f)); }

// out[i, :] = softmax(gelu(y[i, :] + bias)); one block per row; the row (N <= 256 * 64) stays in
// registers between the max, the sum and the write, so y is read once.
__global__ void gelu_softmax_rows(const float* __restrict__ y, const float* __restrict__ bias, float* __restrict__ out, int n) {
  const float* row = y + (int64_t)blockIdx.x * n;
  float* orow = out + (int64_t)blockIdx.x * n;
  float v[PER_THREAD_MAX];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < PER_THREAD_MAX; ++k) {
    int j = threadIdx.x + k * THREADS;
    v[k] = j < n ? gelu(row[j] + bias[j]) : -INFINITY;
    m = fmaxf(m, v[k]);
  }
  m = block_reduce(m, 1);
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < PER_THREAD_MAX; ++k) {
    v[k] = expf(v[k] - m);
    s += v[k];
  }
  float inv = 1.f / block_reduce(s, 0);
#pragma unroll
  for (int k = 0; k < PER_THREAD_MAX; ++k) {
    int j = threadIdx.x + k * THREADS;
    if (j < n) orow[j] = v[k] * inv;
  }
}

extern "C" int linear_gelu_softmax_launch(const float* x, const float* w, const float* bias, float* y, float* out,
                                          int M, int N, int K, cudaStream_t stream) {
  if (N > THREADS * PER_THREAD_MAX) return 2001;
  int status = sgemm_xwt(x, w, y, M, N, K, stream);
  if (status != 0) return status;
  gelu_softmax_rows<<<M, THREADS, 0, stream>>>(y, bias, out, N);
  return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

extern "C" int linear_gelu_softmax_launch(const float* x, const float* w, const float* bias, float* y, float* out,
                                int M, int N, int K, cudaStream_t stream);

torch::Tensor linear_gelu_softmax(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && weight.dim() == 2, "linear_gelu_softmax: 2-D CUDA tensors expected");
  TORCH_CHECK(x.scalar_type() == torch::kFloat && weight.scalar_type() == torch::kFloat &&
              bias.scalar_type() == torch::kFloat, "linear_gelu_softmax: float32 only");
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto bc = bias.contiguous();
  const int64_t M = xc.size(0), K = xc.size(1), N = wc.size(0);
  TORCH_CHECK(wc.size(1) == K && bc.numel() == N, "linear_gelu_softmax: shapes do not match");
  auto y = torch::empty({M, N}, xc.options());
  auto out = torch::empty({M, N}, xc.options());
  int status = linear_gelu_softmax_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(),
                               out.data_ptr<float>(), (int)M, (int)N, (int)K, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "linear_gelu_softmax: cuBLAS/kernel failure, status ", status);
  return out;
}
"""

_ext = load_inline(
    name="kb_l2_99_linear_gelu_softmax",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["linear_gelu_softmax"],
    extra_cuda_cflags=["-O3"],
    extra_ldflags=["-lcublas"],
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return _ext.linear_gelu_softmax(x, self.linear.weight, self.linear.bias)
