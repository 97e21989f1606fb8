"""KernelBench level 3, problem 1 (MLP): 128 x 16384 through two 16384-wide ReLU layers to 8192.

Each Linear runs as a full-fp32 cuBLAS GEMM (no TF32, as torch's default); its bias and the ReLU
that follows are fused into one in-place float4 pass, so a layer costs one GEMM plus one light
pass over its output. The module tree is the task's own (same parameter names and init order).
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

// In place: y[i, j] = y[i, j] + bias[j], then max(., 0) when relu != 0 (float4 when N % 4 == 0).
__global__ void bias_act_vec(float4* __restrict__ y, const float4* __restrict__ bias, int64_t total4, int n4, int relu) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total4; i += (int64_t)gridDim.x * blockDim.x) {
    float4 v = y[i];
    float4 c = bias[i % n4];
    v.x += c.x; v.y += c.y; v.z += c.z; v.w += c.w;
    if (relu) { v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f); }
    y[i] = v;
  }
}

__global__ void bias_act(float* __restrict__ y, const float* __restrict__ bias, int64_t total, int n, int relu) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    float v = y[i] + bias[i % n];
    y[i] = relu ? fmaxf(v, 0.f) : v;
  }
}

// One Linear (+ ReLU) layer of the chain: cuBLAS GEMM, then the fused bias/activation pass.
extern "C" int linear_act_launch(const float* x, const float* w, const float* bias, float* y,
                                 int M, int N, int K, int relu, cudaStream_t stream) {
  int status = sgemm_xwt(x, w, y, M, N, K, stream);
  if (status != 0) return status;
  int64_t total = (int64_t)M * N;
  bool vec = (N % 4 == 0) && ((reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(bias)) & 15) == 0;
  if (vec) {
    bias_act_vec<<<grid_for(total / 4), 256, 0, stream>>>(reinterpret_cast<float4*>(y),
        reinterpret_cast<const float4*>(bias), total / 4, N / 4, relu);
  } else {
    bias_act<<<grid_for(total), 256, 0, stream>>>(y, bias, total, N, relu);
  }
  return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>
#include <vector>

extern "C" int linear_act_launch(const float* x, const float* w, const float* bias, float* y,
                                 int M, int N, int K, int relu, cudaStream_t stream);

// x -> Linear -> ReLU -> ... -> Linear: every layer but the last is followed by ReLU.
torch::Tensor mlp_forward(torch::Tensor x, std::vector<torch::Tensor> weights, std::vector<torch::Tensor> biases) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.scalar_type() == torch::kFloat, "mlp_forward: 2-D float32 CUDA input expected");
  TORCH_CHECK(!weights.empty() && weights.size() == biases.size(), "mlp_forward: one bias per weight expected");
  auto h = x.contiguous();
  auto stream = c10::cuda::getCurrentCUDAStream().stream();
  for (size_t i = 0; i < weights.size(); ++i) {
    auto w = weights[i].contiguous();
    auto b = biases[i].contiguous();
    const int64_t M = h.size(0), K = h.size(1), N = w.size(0);
    TORCH_CHECK(w.size(1) == K && b.numel() == N, "mlp_forward: layer ", i, " shapes do not match");
    auto y = torch::empty({M, N}, h.options());
    int relu = i + 1 < weights.size() ? 1 : 0;
    int status = linear_act_launch(h.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(),
                                   (int)M, (int)N, (int)K, relu, stream);
    TORCH_CHECK(status == 0, "mlp_forward: layer ", i, " failed with status ", status);
    h = y;
  }
  return h;
}
"""

_ext = load_inline(
    name="kb_l3_1_mlp",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["mlp_forward"],
    extra_cuda_cflags=["-O3"],
    extra_ldflags=["-lcublas"],
)


class ModelNew(nn.Module):
    def __init__(self, input_size, layer_sizes, output_size):
        super().__init__()
        layers = []
        current_input_size = input_size
        for hidden in layer_sizes:
            layers.append(nn.Linear(current_input_size, hidden))
            layers.append(nn.ReLU())
            current_input_size = hidden
        layers.append(nn.Linear(current_input_size, output_size))
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        linears = [m for m in self.network if isinstance(m, nn.Linear)]
        return _ext.mlp_forward(x, [m.weight for m in linears], [m.bias for m in linears])
