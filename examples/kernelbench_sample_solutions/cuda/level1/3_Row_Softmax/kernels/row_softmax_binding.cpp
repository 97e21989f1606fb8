// Tensor-to-pointer wrapper for row_softmax_launch, registered as cuda_extension.row_softmax.
#include <ATen/cuda/CUDAContext.h>

#include "binding_registry.h"

extern "C" void row_softmax_launch(const float* x, float* out, int64_t rows, int64_t cols, cudaStream_t stream);

torch::Tensor row_softmax(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat && x.dim() >= 1,
              "row_softmax: contiguous float32 CUDA tensor expected");
  auto out = torch::empty_like(x);
  const int64_t cols = x.size(-1);
  row_softmax_launch(x.data_ptr<float>(), out.data_ptr<float>(), cols ? x.numel() / cols : 0, cols,
                     at::cuda::getCurrentCUDAStream());
  return out;
}

REGISTER_BINDING(row_softmax, row_softmax);
