// Correct but slow on purpose (a harness test): recomputes the whole output 20 times; the
// empty asm statement keeps the compiler from folding the repeats away.
#include <cmath>
#include <cstdint>

extern "C" void elementwise_launch(const float* const* inputs, int64_t, const double* scalars, int64_t,
                                   float* out, int64_t n) {
  const float* x = inputs[0];
  const float scale = (float)scalars[0], shift = (float)scalars[1];
  for (int repeat = 0; repeat < 20; ++repeat) {
    for (int64_t i = 0; i < n; ++i) out[i] = std::tanh(x[i] * scale + shift);
    asm volatile("" ::: "memory");
  }
}
