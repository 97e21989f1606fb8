// relu(x W^T + b) on the CPU: rows of x split across OpenMP threads; the inner loop runs over
// contiguous K for both x and W, so it vectorises. No torch headers.
#include <cstdint>

extern "C" void linear_relu_launch(const float* x, const float* w, const float* bias, float* y,
                                   int64_t M, int64_t N, int64_t K) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M; ++i) {
    const float* xi = x + i * K;
    for (int64_t j = 0; j < N; ++j) {
      const float* wj = w + j * K;
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int64_t k = 0; k < K; ++k) acc += xi[k] * wj[k];
      const float v = acc + bias[j];
      y[i * N + j] = v > 0.0f ? v : 0.0f;
    }
  }
}
