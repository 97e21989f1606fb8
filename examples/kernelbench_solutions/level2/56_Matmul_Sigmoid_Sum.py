"""KernelBench level 2, problem 56 (Matmul, sigmoid, sum): sum_j sigmoid(x W^T + b)[:, j], keepdim.

The GEMM runs in cuBLAS in full fp32 (no TF32, as torch's Linear); one block per output row adds the bias,
applies the sigmoid and reduces the row (128 x 32768 x 32768: the GEMM dominates).
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

// out[i] = sum_j sigmoid(y[i, j] + bias[j]); one block per row, fp32 partials over N / 256 terms.
__global__ void sigmoid_row_sum(const float* __restrict__ y, const float* __restrict__ bias, float* __restrict__ out, int n) {
  const float* row = y + (int64_t)blockIdx.x * n;
  float acc = 0.f;
  for (int j = threadIdx.x; j < n; j += THREADS) acc += 1.f / (1.f + expf(-(row[j] + bias[j])));
  float tot = block_reduce(acc, 0);
  if (threadIdx.x == 0) out[blockIdx.x] = tot;
}

extern "C" int linear_sigmoid_sum_launch(const float* x, const float* w, const float* bias, float* y, float* out,
                                         int M, int N, int K, cudaStream_t stream) {
  int status = sgemm_xwt(x, w, y, M, N, K, stream);
  if (status != 0) return status;
  sigmoid_row_sum<<<M, THREADS, 0, stream>>>(y, bias, out, N);
  return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

extern "C" int linear_sigmoid_sum_launch(const float* x, const float* w, const float* bias, float* y, float* out,
                                int M, int N, int K, cudaStream_t stream);

torch::Tensor linear_sigmoid_sum(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && weight.dim() == 2, "linear_sigmoid_sum: 2-D CUDA tensors expected");
  TORCH_CHECK(x.scalar_type() == torch::kFloat && weight.scalar_type() == torch::kFloat &&
              bias.scalar_type() == torch::kFloat, "linear_sigmoid_sum: float32 only");
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto bc = bias.contiguous();
  const int64_t M = xc.size(0), K = xc.size(1), N = wc.size(0);
  TORCH_CHECK(wc.size(1) == K && bc.numel() == N, "linear_sigmoid_sum: shapes do not match");
  auto y = torch::empty({M, N}, xc.options());
  auto out = torch::empty({M, 1}, xc.options());
  int status = linear_sigmoid_sum_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(),
                               out.data_ptr<float>(), (int)M, (int)N, (int)K, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "linear_sigmoid_sum: cuBLAS/kernel failure, status ", status);
  return out;
}
"""

_ext = load_inline(
    name="kb_l2_56_linear_sigmoid_sum",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["linear_sigmoid_sum"],
    extra_cuda_cflags=["-O3"],
    extra_ldflags=["-lcublas"],
)


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.linear = nn.Linear(input_size, hidden_size)

    def forward(self, x):
        return _ext.linear_sigmoid_sum(x, self.linear.weight, self.linear.bias)
