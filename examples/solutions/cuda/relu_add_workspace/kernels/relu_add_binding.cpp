// Tensor-to-pointer wrapper for relu_add_launch, registered as cuda_extension.relu_add.
#include <ATen/cuda/CUDAContext.h>

#include "binding_registry.h"

extern "C" void relu_add_launch(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);

torch::Tensor relu_add(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda(), "relu_add: CUDA tensors expected");
  TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), "relu_add: inputs must be contiguous");
  TORCH_CHECK(a.scalar_type() == torch::kFloat && b.scalar_type() == torch::kFloat, "relu_add: float32 only");
  TORCH_CHECK(a.sizes() == b.sizes(), "relu_add: shapes differ");
  auto out = torch::empty_like(a);
  relu_add_launch(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), a.numel(),
                  at::cuda::getCurrentCUDAStream());
  return out;
}

REGISTER_BINDING(relu_add, relu_add);
