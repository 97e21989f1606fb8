// Wrappers for linear_launch: cuda_extension.linear(x, w, b, relu) and
// cuda_extension.linear_residual(x, w, b, residual).
#include <ATen/cuda/CUDAContext.h>

#include "binding_registry.h"

extern "C" int linear_launch(const float* x, const float* w, const float* b, const float* residual, float* y,
                             int M, int N, int K, int epilogue, cudaStream_t stream);

static torch::Tensor run_linear(torch::Tensor x, torch::Tensor w, torch::Tensor b, const float* residual,
                                int epilogue) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && w.dim() == 2 && x.scalar_type() == torch::kFloat,
              "linear: 2-D float32 CUDA tensors expected");
  auto xc = x.contiguous();
  auto wc = w.contiguous();
  auto bc = b.contiguous();
  const int M = xc.size(0), K = xc.size(1), N = wc.size(0);
  TORCH_CHECK(wc.size(1) == K && bc.numel() == N, "linear: shapes do not match");
  auto y = torch::empty({M, N}, xc.options());
  const int status = linear_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), residual,
                                   y.data_ptr<float>(), M, N, K, epilogue, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == 0, "linear: launch failed with status ", status);
  return y;
}

torch::Tensor linear(torch::Tensor x, torch::Tensor w, torch::Tensor b, bool relu) {
  return run_linear(x, w, b, nullptr, relu ? 1 : 0);
}

torch::Tensor linear_residual(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor residual) {
  TORCH_CHECK(residual.is_contiguous() && residual.scalar_type() == torch::kFloat &&
              residual.size(0) == x.size(0) && residual.numel() == x.size(0) * w.size(0),
              "linear_residual: residual must be a contiguous float32 [M, N] tensor");
  return run_linear(x, w, b, residual.data_ptr<float>(), 2);
}

REGISTER_BINDING(linear, linear);
REGISTER_BINDING(linear_residual, linear_residual);
