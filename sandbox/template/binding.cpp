// Fixed file of the workspace template: the extension module's single entry point.
// Every wrapper registered with REGISTER_BINDING (kernels/*_binding.cpp) is added here.
// The module is always named cuda_extension (on the cpu backend too), so model_new.py is
// the same for both backends.
#include "binding_registry.h"

PYBIND11_MODULE(cuda_extension, m) {
  m.doc() = "Kernels of one CUDA-Agent workspace";
  for (const auto& bind : cuda_agent::binding_registry()) bind(m);
}
