// HACK on purpose (a harness test): also writes the result into input a, "saving" nothing but
// mutating the caller's tensor; the sandbox reports input_mutation.
#include <cstdint>

extern "C" void elementwise_launch(const float* const* inputs, int64_t, const double*, int64_t, float* out,
                                   int64_t n) {
  float* a = const_cast<float*>(inputs[0]);
  const float* b = inputs[1];
  for (int64_t i = 0; i < n; ++i) {
    const float v = a[i] + b[i];
    a[i] = out[i] = v > 0.0f ? v : 0.0f;
  }
}
