// Tensor-to-pointer wrapper for relu_chain_launch, registered as cuda_extension.relu_chain.
#include <ATen/cuda/CUDAContext.h>

#include "binding_registry.h"

extern "C" void relu_chain_launch(const float* x, float* out, int steps, float decay, int64_t n,
                                  cudaStream_t stream);

torch::Tensor relu_chain(torch::Tensor x, int64_t steps, double decay) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat,
              "relu_chain: contiguous float32 CUDA tensor expected");
  auto out = torch::empty_like(x);
  relu_chain_launch(x.data_ptr<float>(), out.data_ptr<float>(), (int)steps, (float)decay, x.numel(),
                    at::cuda::getCurrentCUDAStream());
  return out;
}

REGISTER_BINDING(relu_chain, relu_chain);
