// Wrapper for linear_relu_launch, registered as cuda_extension.linear_relu.
#include "binding_registry.h"

extern "C" void linear_relu_launch(const float* x, const float* w, const float* bias, float* y,
                                   int64_t M, int64_t N, int64_t K);

torch::Tensor linear_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.scalar_type() == torch::kFloat,
              "linear_relu: 2-D float32 tensors expected");
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto bc = bias.contiguous();
  const int64_t M = xc.size(0), K = xc.size(1), N = wc.size(0);
  TORCH_CHECK(wc.size(1) == K && bc.numel() == N, "linear_relu: shapes do not match");
  auto y = torch::empty({M, N}, xc.options());
  linear_relu_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(), M, N, K);
  return y;
}

REGISTER_BINDING(linear_relu, linear_relu);
