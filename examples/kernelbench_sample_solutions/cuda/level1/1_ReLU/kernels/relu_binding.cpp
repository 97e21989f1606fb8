// Tensor-to-pointer wrapper for relu_launch, registered as cuda_extension.relu.
#include <ATen/cuda/CUDAContext.h>

#include "binding_registry.h"

extern "C" void relu_launch(const float* x, float* out, int64_t n, cudaStream_t stream);

torch::Tensor relu(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat,
              "relu: contiguous float32 CUDA tensor expected");
  auto out = torch::empty_like(x);
  relu_launch(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), at::cuda::getCurrentCUDAStream());
  return out;
}

REGISTER_BINDING(relu, relu);
