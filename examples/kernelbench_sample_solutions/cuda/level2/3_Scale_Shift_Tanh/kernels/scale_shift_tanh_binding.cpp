// Tensor-to-pointer wrapper for scale_shift_tanh_launch, registered as cuda_extension.scale_shift_tanh.
#include <ATen/cuda/CUDAContext.h>

#include "binding_registry.h"

extern "C" void scale_shift_tanh_launch(const float* x, float* out, float scale, float shift, int64_t n,
                                        cudaStream_t stream);

torch::Tensor scale_shift_tanh(torch::Tensor x, double scale, double shift) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat,
              "scale_shift_tanh: contiguous float32 CUDA tensor expected");
  auto out = torch::empty_like(x);
  scale_shift_tanh_launch(x.data_ptr<float>(), out.data_ptr<float>(), (float)scale, (float)shift, x.numel(),
                          at::cuda::getCurrentCUDAStream());
  return out;
}

REGISTER_BINDING(scale_shift_tanh, scale_shift_tanh);
