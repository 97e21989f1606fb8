// Wrapper for linear_relu_launch, registered as cuda_extension.linear_relu.
#include <ATen/cuda/CUDAContext.h>

#include "binding_registry.h"

extern "C" int linear_relu_launch(const float* x, const float* w, const float* bias, float* y,
                                  int M, int N, int K, cudaStream_t stream);

torch::Tensor linear_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && weight.dim() == 2, "linear_relu: 2-D CUDA tensors expected");
  TORCH_CHECK(x.scalar_type() == torch::kFloat, "linear_relu: float32 only");
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto bc = bias.contiguous();
  const int M = xc.size(0), K = xc.size(1), N = wc.size(0);
  TORCH_CHECK(wc.size(1) == K && bc.numel() == N, "linear_relu: shapes do not match");
  auto y = torch::empty({M, N}, xc.options());
  const int status = linear_relu_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(),
                                        y.data_ptr<float>(), M, N, K, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == 0, "linear_relu: launch failed with status ", status);
  return y;
}

REGISTER_BINDING(linear_relu, linear_relu);
