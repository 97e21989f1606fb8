// relu(x) with 16-byte loads and a grid-stride loop; a scalar tail for sizes not divisible by 4.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void relu_vec4(const float4* __restrict__ x, float4* __restrict__ out, int64_t n4) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
    const float4 v = x[i];
    out[i] = make_float4(fmaxf(v.x, 0.f), fmaxf(v.y, 0.f), fmaxf(v.z, 0.f), fmaxf(v.w, 0.f));
  }
}

__global__ void relu_tail(const float* x, float* out, int64_t start, int64_t n) {
  const int64_t i = start + threadIdx.x;
  if (i < n) out[i] = fmaxf(x[i], 0.f);
}

extern "C" void relu_launch(const float* x, float* out, int64_t n, cudaStream_t stream) {
  const int64_t n4 = n / 4;
  if (n4 > 0) {
    const int threads = 256;
    const int64_t wanted = (n4 + threads - 1) / threads;
    const int blocks = (int)(wanted < 4096 ? wanted : 4096);
    relu_vec4<<<blocks, threads, 0, stream>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(out), n4);
  }
  if (n4 * 4 < n) relu_tail<<<1, 4, 0, stream>>>(x, out, n4 * 4, n);
}
