// relu(a + b) with 16-byte loads; the launcher is extern "C" so the binding needs no CUDA headers.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void relu_add_kernel(const float4* __restrict__ a, const float4* __restrict__ b,
                                float4* __restrict__ out, int64_t n4) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
    float4 x = a[i], y = b[i];
    out[i] = make_float4(fmaxf(x.x + y.x, 0.f), fmaxf(x.y + y.y, 0.f), fmaxf(x.z + y.z, 0.f), fmaxf(x.w + y.w, 0.f));
  }
}

__global__ void relu_add_tail(const float* a, const float* b, float* out, int64_t start, int64_t n) {
  int64_t i = start + blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = fmaxf(a[i] + b[i], 0.f);
}

extern "C" void relu_add_launch(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  const int64_t n4 = n / 4;
  if (n4 > 0) {
    const int threads = 256;
    const int blocks = (int)((n4 + threads - 1) / threads < 132 * 16 ? (n4 + threads - 1) / threads : 132 * 16);
    relu_add_kernel<<<blocks, threads, 0, stream>>>(reinterpret_cast<const float4*>(a),
                                                    reinterpret_cast<const float4*>(b),
                                                    reinterpret_cast<float4*>(out), n4);
  }
  if (n4 * 4 < n) relu_add_tail<<<1, 4, 0, stream>>>(a, b, out, n4 * 4, n);
}
