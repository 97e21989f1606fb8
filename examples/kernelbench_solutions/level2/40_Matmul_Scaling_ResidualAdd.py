"""KernelBench level 2, problem 40 (Matmul, scaling, residual add): y * s + y with y = x W^T + b.

The GEMM runs in cuBLAS (an allowed library) in full fp32, as torch's Linear does without TF32;
the bias and the element-wise tail are fused into one in-place float4 pass over the output.
16384 x 4096 x 4096; the product and the sum are rounded as the reference rounds them.
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

__device__ __forceinline__ float epilogue(float v, float a, float b) {
  return v * a + v;
}

// In place: y[i, j] = epilogue(y[i, j] + bias[j]); N % 4 == 0 takes the float4 path.
__global__ void bias_epilogue_vec(float4* __restrict__ y, const float4* __restrict__ bias, int64_t total4, int n4, float a, float b) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total4; i += (int64_t)gridDim.x * blockDim.x) {
    float4 v = y[i];
    float4 c = bias[i % n4];
    v.x = epilogue(v.x + c.x, a, b); v.y = epilogue(v.y + c.y, a, b);
    v.z = epilogue(v.z + c.z, a, b); v.w = epilogue(v.w + c.w, a, b);
    y[i] = v;
  }
}

__global__ void bias_epilogue(float* __restrict__ y, const float* __restrict__ bias, int64_t total, int n, float a, float b) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    y[i] = epilogue(y[i] + bias[i % n], a, b);
  }
}

extern "C" int linear_scale_residual_launch(const float* x, const float* w, const float* bias, float* y,
                                int M, int N, int K, float a, float b, cudaStream_t stream) {
  int status = sgemm_xwt(x, w, y, M, N, K, stream);
  if (status != 0) return status;
  int64_t total = (int64_t)M * N;
  bool vec = (N % 4 == 0) && ((reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(bias)) & 15) == 0;
  if (vec) {
    bias_epilogue_vec<<<grid_for(total / 4), 256, 0, stream>>>(reinterpret_cast<float4*>(y),
        reinterpret_cast<const float4*>(bias), total / 4, N / 4, a, b);
  } else {
    bias_epilogue<<<grid_for(total), 256, 0, stream>>>(y, bias, total, N, a, b);
  }
  return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

extern "C" int linear_scale_residual_launch(const float* x, const float* w, const float* bias, float* y,
                                int M, int N, int K, float a, float b, cudaStream_t stream);

torch::Tensor linear_scale_residual(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double a, double b) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && weight.dim() == 2, "linear_scale_residual: 2-D CUDA tensors expected");
  TORCH_CHECK(x.scalar_type() == torch::kFloat && weight.scalar_type() == torch::kFloat &&
              bias.scalar_type() == torch::kFloat, "linear_scale_residual: float32 only");
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto bc = bias.contiguous();
  const int64_t M = xc.size(0), K = xc.size(1), N = wc.size(0);
  TORCH_CHECK(wc.size(1) == K && bc.numel() == N, "linear_scale_residual: shapes do not match");
  auto y = torch::empty({M, N}, xc.options());
  int status = linear_scale_residual_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(),
                               (int)M, (int)N, (int)K, (float)a, (float)b, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "linear_scale_residual: cuBLAS/kernel failure, status ", status);
  return y;
}
"""

_ext = load_inline(
    name="kb_l2_40_linear_scale_residual",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["linear_scale_residual"],
    extra_cuda_cflags=["-O3"],
    extra_ldflags=["-lcublas"],
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return _ext.linear_scale_residual(x, self.matmul.weight, self.matmul.bias, self.scaling_factor, 0.0)
