"""KernelBench level 3, problem 50 (ReLU self-attention): relu(mask(q k^T / sqrt(hs))) v, heads merged (no projection, as the task returns).

Every matmul runs in cuBLAS in full fp32 (no TF32): c_attn as one GEMM, q k^T and att v as
strided-batched GEMMs over the B * nh heads (the 1/sqrt(hs) scale folded into alpha). Our kernels add
the bias, split and merge the heads, and apply the causal ReLU in place on the scores.
B=16, nh=12, T=1024: 768 MiB of scores.
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

// In place: y[i, j] += bias[j].
__global__ void add_bias(float* __restrict__ y, const float* __restrict__ bias, int64_t total, int n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
    y[i] += bias[i % n];
}

// qkv (B, T, 3, nh, hs) -> q, k, v, each (B, nh, T, hs) contiguous (what the batched GEMMs read).
__global__ void split_heads(const float* __restrict__ qkv, float* __restrict__ q, float* __restrict__ k, float* __restrict__ v,
                            int B, int T, int nh, int hs) {
  int64_t C = (int64_t)nh * hs, total = (int64_t)B * T * 3 * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t d = i % hs, h = (i / hs) % nh, part = (i / C) % 3, bt = i / (3 * C);
    int64_t b = bt / T, t = bt % T;
    float* dst = part == 0 ? q : (part == 1 ? k : v);
    dst[((b * nh + h) * T + t) * hs + d] = qkv[i];
  }
}

// y (B, nh, T, hs) -> out (B, T, nh * hs): the heads side by side again.
__global__ void merge_heads(const float* __restrict__ y, float* __restrict__ out, int B, int T, int nh, int hs) {
  int64_t C = (int64_t)nh * hs, total = (int64_t)B * T * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t d = i % hs, h = (i / hs) % nh, bt = i / C;
    int64_t b = bt / T, t = bt % T;
    out[i] = y[((b * nh + h) * T + t) * hs + d];
  }
}

#define MAX_PER_LANE 32

// In place on scores: keys j > t (the masked ones, -inf in the reference) become 0, the rest relu'd.
__global__ void causal_relu(float* __restrict__ s, int64_t total, int T) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t j = i % T, t = (i / T) % T;
    float v = s[i];
    s[i] = (j <= t && v > 0.f) ? v : 0.f;
  }
}

// scores (B*nh, T, T) = scale * q k^T; then masked keys zeroed and ReLU applied; then y = att v.
static int attention_core(const float* q, const float* k, const float* v, float* scores, float* y,
                          int B, int T, int nh, int hs, cudaStream_t stream) {
  if (T > 32 * MAX_PER_LANE) return 2001;
  cublasHandle_t handle = gemm_handle();
  if (handle == nullptr) return 1001;
  cublasSetStream(handle, stream);
  const float scale = 1.f / sqrtf((float)hs), one = 1.f, zero = 0.f;
  long long qk = (long long)T * hs, tt = (long long)T * T;
  int batch = B * nh;
  cublasStatus_t st = cublasSgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, &scale, k, hs, qk,
                                                q, hs, qk, &zero, scores, T, tt, batch);
  if (st != CUBLAS_STATUS_SUCCESS) return 1000 + (int)st;
  int64_t rows = (int64_t)batch * T;
  causal_relu<<<grid_for(rows * T), 256, 0, stream>>>(scores, rows * T, T);
  st = cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, &one, v, hs, qk, scores, T, tt,
                                 &zero, y, hs, qk, batch);
  return st == CUBLAS_STATUS_SUCCESS ? 0 : 1000 + (int)st;
}

// x (B, T, C) -> c_attn -> heads -> causal attention -> merged (B, T, C).
// Scratch (floats): qkv B*T*3C, q/k/v 3*B*T*C, scores B*nh*T*T, y B*T*C, merged B*T*C.
extern "C" int attention_launch(const float* x, const float* w_attn, const float* b_attn, const float* w_proj,
                                const float* b_proj, float* out, float* scratch, int B, int T, int nh, int hs,
                                cudaStream_t stream) {
  int64_t C = (int64_t)nh * hs, BT = (int64_t)B * T;
  float* qkv = scratch;
  float* q = qkv + BT * 3 * C;
  float* k = q + BT * C;
  float* v = k + BT * C;
  float* scores = v + BT * C;
  float* y = scores + (int64_t)B * nh * T * T;
  float* merged = out;
  int status = sgemm_xwt(x, w_attn, qkv, (int)BT, (int)(3 * C), (int)C, stream);
  if (status != 0) return status;
  add_bias<<<grid_for(BT * 3 * C), 256, 0, stream>>>(qkv, b_attn, BT * 3 * C, (int)(3 * C));
  split_heads<<<grid_for(BT * 3 * C), 256, 0, stream>>>(qkv, q, k, v, B, T, nh, hs);
  status = attention_core(q, k, v, scores, y, B, T, nh, hs, stream);
  if (status != 0) return status;
  merge_heads<<<grid_for(BT * C), 256, 0, stream>>>(y, merged, B, T, nh, hs);
  (void)w_proj; (void)b_proj;
  return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

extern "C" int attention_launch(const float* x, const float* w_attn, const float* b_attn, const float* w_proj,
                                const float* b_proj, float* out, float* scratch, int B, int T, int nh, int hs,
                                cudaStream_t stream);

torch::Tensor causal_attention(torch::Tensor x, torch::Tensor w_attn, torch::Tensor b_attn, torch::Tensor w_proj,
                               torch::Tensor b_proj, int64_t n_head) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 3 && x.scalar_type() == torch::kFloat, "causal_attention: (B, T, C) float32 CUDA input expected");
  auto xc = x.contiguous();
  auto wa = w_attn.contiguous(), ba = b_attn.contiguous(), wp = w_proj.contiguous(), bp = b_proj.contiguous();
  const int64_t B = xc.size(0), T = xc.size(1), C = xc.size(2);
  TORCH_CHECK(C % n_head == 0 && wa.size(0) == 3 * C && wa.size(1) == C, "causal_attention: weight shapes do not match");
  const int64_t BT = B * T;
  auto scratch = torch::empty({BT * 3 * C + 3 * BT * C + B * n_head * T * T + 2 * BT * C}, xc.options());
  auto out = torch::empty({B, T, C}, xc.options());
  int status = attention_launch(xc.data_ptr<float>(), wa.data_ptr<float>(), ba.data_ptr<float>(), wp.data_ptr<float>(),
                                bp.data_ptr<float>(), out.data_ptr<float>(), scratch.data_ptr<float>(), (int)B, (int)T,
                                (int)n_head, (int)(C / n_head), c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "causal_attention: cuBLAS/kernel failure, status ", status);
  return out;
}
"""

_ext = load_inline(
    name="kb_l3_50_attention",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["causal_attention"],
    extra_cuda_cflags=["-O3"],
    extra_ldflags=["-lcublas"],
)


class ModelNew(nn.Module):
    def __init__(self, n_embd, n_head, max_seqlen):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        # Unused by the task's forward (it returns before the projection); kept for the same parameters.
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("bias", torch.tril(torch.ones(max_seqlen, max_seqlen))
                             .view(1, 1, max_seqlen, max_seqlen))
        self.n_head = n_head
        self.n_embd = n_embd

    def forward(self, x):
        return _ext.causal_attention(x, self.c_attn.weight, self.c_attn.bias, self.c_proj.weight,
                                     self.c_proj.bias, self.n_head)
