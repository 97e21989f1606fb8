// Correct and fast: the sixteen steps run in place over one buffer (vectorised inner loop)
// instead of eager's 48 operators with a temporary each.
#include <cstdint>

extern "C" void elementwise_launch(const float* const* inputs, int64_t, const double* scalars, int64_t,
                                   float* out, int64_t n) {
  const float* x = inputs[0];
  const int64_t steps = (int64_t)scalars[0];
  const float decay = (float)scalars[1];
  for (int64_t i = 0; i < n; ++i) out[i] = 0.0f;
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = decay * out[i] + x[i];
      out[i] = v > 0.0f ? v : 0.0f;
    }
  }
}
