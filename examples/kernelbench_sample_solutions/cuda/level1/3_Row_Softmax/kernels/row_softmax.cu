// Softmax over each row: one block per row; max and sum reduced with warp shuffles, then
// across warps through shared memory. Three passes over the row, all from L1/L2 for short rows.
#include <cfloat>
#include <cstdint>
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

template <bool kMax>
__device__ float block_reduce(float v, float* shared) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < kWarps ? shared[lane] : (kMax ? -FLT_MAX : 0.f);
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  __syncthreads();  // shared[] is reused by the next reduction
  return v;
}

__global__ void row_softmax_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t cols) {
  __shared__ float shared[kWarps];
  const float* row = x + blockIdx.x * cols;
  float* dst = out + blockIdx.x * cols;
  float m = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) m = fmaxf(m, row[j]);
  m = block_reduce<true>(m, shared);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) s += expf(row[j] - m);
  s = block_reduce<false>(s, shared);
  const float inv = 1.f / s;
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) dst[j] = expf(row[j] - m) * inv;
}

extern "C" void row_softmax_launch(const float* x, float* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows > 0 && cols > 0) row_softmax_kernel<<<(unsigned)rows, kThreads, 0, stream>>>(x, out, cols);
}
