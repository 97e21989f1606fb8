// Fixed file of the workspace template: the registry through which kernels/*_binding.cpp
// files expose their wrappers to Python. Solutions never edit it; the judge always builds
// with this copy, whatever a submitted workspace contains.
//
// Usage in kernels/my_op_binding.cpp:
//     #include "binding_registry.h"
//     torch::Tensor my_op(torch::Tensor x) { ... }
//     REGISTER_BINDING(my_op, my_op);
// and in model_new.py:  import cuda_extension; cuda_extension.my_op(x)
#pragma once
#include <torch/extension.h>

#include <functional>
#include <utility>
#include <vector>

namespace cuda_agent {

using BindingFn = std::function<void(pybind11::module_&)>;

// One registry per extension module. `inline` gives every translation unit the same
// instance, and the function-local static is constructed on first use, so registrations
// from static initialisers in any file order are safe.
inline std::vector<BindingFn>& binding_registry() {
  static std::vector<BindingFn> registry;
  return registry;
}

struct BindingRegistrar {
  explicit BindingRegistrar(BindingFn fn) { binding_registry().push_back(std::move(fn)); }
};

}  // namespace cuda_agent

#define CUDA_AGENT_CONCAT_INNER(a, b) a##b
#define CUDA_AGENT_CONCAT(a, b) CUDA_AGENT_CONCAT_INNER(a, b)

// REGISTER_BINDING(python_name, cpp_function): expose cpp_function as cuda_extension.python_name.
#define REGISTER_BINDING(python_name, cpp_function)                                   \
  static ::cuda_agent::BindingRegistrar CUDA_AGENT_CONCAT(cuda_agent_registrar_, python_name)( \
      [](pybind11::module_& m) { m.def(#python_name, &cpp_function); })
