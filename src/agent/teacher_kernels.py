"""Kernel sources the scripted teacher writes for family tasks (data_gen/family.py): the pieces
both backends share (the chain's C expressions, the fixed bindings, model_new.py) and the CPU
kernels; the CUDA kernels are in teacher_cuda.py.

Every solution has the CUDA-Agent workspace form: ``kernels/chain.cpp|.cu`` (the kernels and an
``extern "C" family_launch``), ``kernels/family_binding.cpp`` and ``model_new.py``. The binding is
one fixed file per backend, byte for byte the same in every solution: the sandbox caches objects
by content, so its torch headers compile once and a solution costs one small kernel file. It
takes ``family_op(kernel, tensors, scalars, out_shape)``: ``kernel`` picks one of the file's
kernels (the naive variant has one per op), ``tensors`` are x then the operands in chain order,
``scalars`` the constants in chain order.

Graded variants on the CPU: ``naive`` (one function per op, an intermediate buffer each),
``fused`` (the whole chain in one pass, libm), ``vectorised`` (fused with SIMD loops and a
libm-free exp, compiled for SSE2 and for AVX2 + FMA). Bugs for the ``wrong`` variant are chain
mutations (``KernelChain``: ops swapped or left out) or a reduction written wrongly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from data_gen.family import BoundStep

KERNEL_STEM = "kernels/chain"
BINDING_PATH = "kernels/family_binding.cpp"
# The chain's C expression per op, on the running value v: {c0}/{c1} are constant names, {t} the
# operand's value, {exp}/{tanh} the variant's functions. No tanhf on the GPU: --use_fast_math
# turns it into tanh.approx.f32 (~6e-4 relative error, over the 1e-4 tolerance).
C_EXPR = {
    "relu": "v > 0.0f ? v : 0.0f",
    "gelu": "0.5f * v * (1.0f + {tanh}(0.7978845608f * (v + 0.044715f * v * v * v)))",
    "sigmoid": "1.0f / (1.0f + {exp}(-v))",
    "tanh": "{tanh}(v)",
    "exp": "{exp}(v)",
    "silu": "v / (1.0f + {exp}(-v))",
    "leaky_relu": "v > 0.0f ? v : v * {c0}",
    "mul_scalar": "v * {c0}",
    "add_scalar": "v + {c0}",
    "clamp": "v < {c0} ? {c0} : (v > {c1} ? {c1} : v)",
    "add_bias": "v + {t}",
    "mul_weight": "v * {t}",
    "add_input": "v + {t}",
    "mul_input": "v * {t}",
}
THREADS = 256


@dataclass(frozen=True)
class KernelChain:
    """What a kernel computes: these steps, then the reduction (or its bug)."""

    steps: tuple[BoundStep, ...]
    reduction: Optional[str]
    reduction_bug: bool = False


def uses(chain: KernelChain, *ops: str) -> bool:
    return any(b.name in ops for b in chain.steps) or (chain.reduction in ops)


def operands(chain: KernelChain) -> list:
    return [b.operand for b in chain.steps if b.operand]


def constants(chain: KernelChain) -> list[str]:
    return [c for b in chain.steps for c in b.constants]


def step_expr(b: BoundStep, operand_value: str, exp: str, tanh: str) -> str:
    names = {f"c{i}": c for i, c in enumerate(b.constants)}
    return C_EXPR[b.name].format(t=operand_value, exp=exp, tanh=tanh, **names)


# ---------------------------------------------------------------------- bindings (fixed files)

BINDING_HEAD = """\
// Fixed wrapper shared by every family solution: cuda_extension.family_op(kernel, tensors,
// scalars, out_shape) allocates the output and calls family_launch in kernels/chain{suffix}.
#include <vector>
{include}
#include "binding_registry.h"

extern "C" void family_launch(int64_t kernel, const float* const* tensors, int64_t num_tensors,
                              const double* scalars, int64_t num_scalars, float* out, int64_t rows,
                              int64_t cols{stream_param});

torch::Tensor family_op(int64_t kernel, std::vector<torch::Tensor> tensors, std::vector<double> scalars,
                        std::vector<int64_t> out_shape) {{
  TORCH_CHECK(!tensors.empty() && tensors[0].dim() == 2, "family_op: tensors[0] must be (rows, cols)");
  std::vector<const float*> pointers;
  for (const auto& t : tensors) {{
    TORCH_CHECK(t.is_contiguous() && t.scalar_type() == torch::kFloat && t.device() == tensors[0].device(),
                "family_op: contiguous float32 tensors on one device");
    {device_check}pointers.push_back(t.data_ptr<float>());
  }}
  auto out = torch::empty(out_shape, tensors[0].options());
  family_launch(kernel, pointers.data(), (int64_t)pointers.size(), scalars.data(), (int64_t)scalars.size(),
                out.data_ptr<float>(), tensors[0].size(0), tensors[0].size(1){stream_arg});
  return out;
}}

REGISTER_BINDING(family_op, family_op);
"""


def binding_source(backend: str) -> str:
    if backend == "cuda":
        return BINDING_HEAD.format(suffix=".cu", include="#include <ATen/cuda/CUDAContext.h>\n",
                                   stream_param=", cudaStream_t stream",
                                   device_check='TORCH_CHECK(t.is_cuda(), "family_op: CUDA tensors");\n    ',
                                   stream_arg=", at::cuda::getCurrentCUDAStream()")
    return BINDING_HEAD.format(suffix=".cpp", include="", stream_param="", device_check="", stream_arg="")


# ---------------------------------------------------------------------- model_new.py

def model_new_source(init_args: list[str], params: list[str], inputs: list[str], calls: list[tuple], out_rows_only: bool,
                     title: str) -> str:
    """``calls``: (kernel index, tensor expressions, scalar expressions, comment), applied in
    order; each result is the next call's x (the naive variant) or the output (one call)."""
    init = [f"        self.{c} = {c}" for c in init_args if c != "dim" and c not in params]
    init += [f"        self.{p} = nn.Parameter(torch.empty(dim))" for p in params]
    shapes = ["shape"] * len(calls)
    if out_rows_only:
        shapes[-1] = "[x.shape[0]]"
    lines = ['"""' + title + '"""', "import torch", "import torch.nn as nn", "", "import cuda_extension", "", "",
             "class ModelNew(nn.Module):", f"    def __init__({', '.join(['self', *init_args])}):",
             "        super().__init__()", *init, "", f"    def forward({', '.join(['self', *inputs])}):",
             *(["        shape = [x.shape[0], x.shape[1]]"] if "shape" in shapes else [])]
    for n, ((kernel, tensors, scalars, comment), shape) in enumerate(zip(calls, shapes)):
        last = n == len(calls) - 1
        call = f"cuda_extension.family_op({kernel}, [{', '.join(tensors)}], [{', '.join(scalars)}], {shape})"
        lines.append(f"        {'return' if last else 'x ='} {call}" + (f"  # {comment}" if comment else ""))
    return "\n".join(lines) + "\n"


def tensor_arg(operand) -> str:
    return f"self.{operand.name}" if operand.role == "param" else f"{operand.name}.contiguous()"


def fused_calls(chain: KernelChain) -> list[tuple]:
    tensors = ["x.contiguous()", *[tensor_arg(o) for o in operands(chain)]]
    return [(0, tensors, [f"self.{c}" for c in constants(chain)], "")]


def naive_calls(chain: KernelChain) -> list[tuple]:
    calls = []
    for k, b in enumerate(chain.steps):
        first = "x.contiguous()" if k == 0 else "x"
        tensors = [first] + ([tensor_arg(b.operand)] if b.operand else [])
        calls.append((k, tensors, [f"self.{c}" for c in b.constants], b.name))
    if chain.reduction:
        calls.append((len(chain.steps), ["x.contiguous()" if not calls else "x"], [], chain.reduction))
    return calls


# ---------------------------------------------------------------------- C pieces

# CPU helpers of the vectorised variant are always inlined: the AVX2 copy of the row loop
# (cpu_fused) must get its own AVX2 copy of them, not a call to the baseline one.
INLINE = {False: "static inline float", True: "static inline __attribute__((always_inline)) float"}
CPU_FAST_MATH = """\
// exp by range reduction (v = k ln2 + r, k = round(v / ln2)) and a degree-6 polynomial: no libm
// call, so loops over it vectorise; relative error ~2e-7.
static inline __attribute__((always_inline)) float fast_exp(float v) {
  v = v < -87.0f ? -87.0f : (v > 88.0f ? 88.0f : v);
  const float t = v * 1.44269504f + 0.5f;
  int k = (int)t;
  k -= t < (float)k;
  const float r = v - (float)k * 0.693359375f + (float)k * 2.12194440e-4f;
  const float p = 1.0f + r * (1.0f + r * (0.5f + r * (0.166666672f + r * (0.0416666679f + r * (0.00833333377f
                  + r * 0.00138888892f)))));
  union { int32_t i; float f; } scale;
  scale.i = (k + 127) << 23;
  return p * scale.f;
}

static inline __attribute__((always_inline)) float fast_tanh(float v) {
  v = v < -9.0f ? -9.0f : (v > 9.0f ? 9.0f : v);
  return 1.0f - 2.0f / (fast_exp(2.0f * v) + 1.0f);
}
"""

def math_names(backend: str, vectorised: bool) -> tuple[str, str]:
    if backend == "cuda":
        return "__expf", "fast_tanh"
    return ("fast_exp", "fast_tanh") if vectorised else ("std::exp", "std::tanh")


def cpu_preamble(chain: KernelChain, vectorised: bool) -> list[str]:
    """Includes and the helpers this chain needs."""
    head = ["#include <cmath>", "#include <cstdint>", ""]
    if vectorised:  # comparisons (relu, clamp, max) become vector selects only without trapping math
        head += ["#pragma GCC optimize(\"no-trapping-math\")", ""]
    needs_exp = uses(chain, "tanh", "gelu", "exp", "sigmoid", "silu", "softmax")
    return head + ([CPU_FAST_MATH] if vectorised and needs_exp else [])


def chain_arguments(chain: KernelChain, operand_value) -> list[str]:
    """chain()'s arguments after v, op by op in chain order: each op's operand value
    (``operand_value(operand)``), then its constants. One pass over the ops, so that a model
    writing the signature reads the ops once, left to right."""
    return [value for b in chain.steps
            for value in ([operand_value(b.operand)] if b.operand else []) + list(b.constants)]


def chain_function(chain: KernelChain, backend: str, vectorised: bool) -> list[str]:
    """``chain(v, each op's operand and constants...)``: the elementwise part on one element. A
    comment names the ops above it and each op above its line: the code says which op each line
    computes (a reader checks it against model.py; a small model cloned on these kernels copies
    the op's name first and then writes its line, one local step at a time)."""
    exp, tanh = math_names(backend, vectorised)
    qualifier = "__device__ __forceinline__ float" if backend == "cuda" else INLINE[vectorised]
    params = ["float v", *[f"float {name}" for name in chain_arguments(chain, lambda o: o.name)]]
    body = [line for b in chain.steps
            for line in (f"  // {b.name}", f"  v = {step_expr(b, b.operand.name if b.operand else '', exp, tanh)};")]
    ops = " -> ".join(b.name for b in chain.steps) or "identity"
    return [f"// On one element: {ops}.", f"{qualifier} chain({', '.join(params)}) {{", *body, "  return v;", "}", ""]


def chain_call(chain: KernelChain, x: str, index: str, column: str) -> str:
    """chain(...) on one element: x, each operand at ``index`` (inputs) or ``column`` (params)."""
    values = chain_arguments(chain, lambda o: f"{o.name}[{index if o.role == 'input' else column}]")
    return f"chain({', '.join([x, *values])})"


def lane_call(chain: KernelChain, lane: str) -> str:
    """chain(...) on one lane of float4 loads named xv, <operand>_v."""
    return f"chain({', '.join([f'xv.{lane}', *chain_arguments(chain, lambda o: f'{o.name}_v.{lane}')])})"


def launcher_head(backend: str) -> str:
    stream = ", cudaStream_t stream" if backend == "cuda" else ""
    return ('extern "C" void family_launch(int64_t kernel, const float* const* tensors, int64_t num_tensors,\n'
            "                              const double* scalars, int64_t num_scalars, float* out, int64_t rows,\n"
            f"                              int64_t cols{stream}) {{")


# ---------------------------------------------------------------------- CPU (C++, OpenMP SIMD)

def cpu_reduction(reduction: str, value: str, simd: bool, exp: str, bug: bool) -> list[str]:
    """The body of ``for r in rows`` for one reduction; ``value`` is element c of the row. Sums
    of values accumulate in double (the float32 tolerance is tight for long rows)."""
    pragma = (lambda clause="": [f"#pragma omp simd{clause}"]) if simd else (lambda clause="": [])
    acc = "float" if simd else "double"
    if reduction == "sum":
        return ["    double acc = 0.0;", *pragma(" reduction(+ : acc)"),
                f"    for (int64_t c = 0; c < cols; ++c) acc += {value};",
                "    out[r] = (float)(acc / (double)cols);" if bug else "    out[r] = (float)acc;"]
    if reduction == "max":
        return [f"    float acc = {'0.0f' if bug else '-INFINITY'};", *pragma(" reduction(max : acc)"),
                "    for (int64_t c = 0; c < cols; ++c) {", f"      const float v = {value};",
                "      acc = v > acc ? v : acc;", "    }", "    out[r] = acc;"]
    lines = ["    float* o = out + r * cols;"]
    if reduction == "softmax":
        shifted = "o[c]" if bug else "o[c] - row_max"
        if bug:
            lines += [*pragma(), f"    for (int64_t c = 0; c < cols; ++c) o[c] = {value};"]
        else:
            lines += ["    float row_max = -INFINITY;", *pragma(" reduction(max : row_max)"),
                      "    for (int64_t c = 0; c < cols; ++c) {", f"      const float v = {value};",
                      "      o[c] = v;", "      row_max = v > row_max ? v : row_max;", "    }"]
        return lines + [f"    {acc} row_sum = 0.0;", *pragma(" reduction(+ : row_sum)"),
                        "    for (int64_t c = 0; c < cols; ++c) {", f"      const float e = {exp}({shifted});",
                        "      o[c] = e;", "      row_sum += e;", "    }",
                        "    const float inv_sum = (float)(1.0 / row_sum);", *pragma(),
                        "    for (int64_t c = 0; c < cols; ++c) o[c] *= inv_sum;"]
    root = "" if bug else "std::sqrt"
    return lines + [f"    {acc} sum_sq = 0.0;", *pragma(" reduction(+ : sum_sq)"),
                    "    for (int64_t c = 0; c < cols; ++c) {", f"      const float v = {value};", "      o[c] = v;",
                    "      sum_sq += v * v;", "    }",
                    f"    const float norm = 1.0f / {root}((float)(sum_sq / cols) + 1e-6f);", *pragma(),
                    "    for (int64_t c = 0; c < cols; ++c) o[c] *= norm;"]


def cpu_unpack(chain: KernelChain) -> list[str]:
    lines = [f"  const float* {o.name} = tensors[{k}];" for k, o in enumerate(operands(chain), start=1)]
    return lines + [f"  const float {c} = (float)scalars[{k}];" for k, c in enumerate(constants(chain))]


ROWS_SIGNATURE = "(const float* const* tensors, const double* scalars, float* out, int64_t rows, int64_t cols)"
CPU_DISPATCH = f"""\
// The same rows compiled for AVX2 + FMA (8 lanes, fused multiply-add), used where the CPU has them.
__attribute__((target("avx2,fma"))) static void chain_rows_avx2{ROWS_SIGNATURE} {{
  chain_rows(tensors, scalars, out, rows, cols);
}}

{launcher_head("cpu")}
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) chain_rows_avx2(tensors, scalars, out, rows, cols);
  else chain_rows(tensors, scalars, out, rows, cols);
}}
"""


def cpu_fused(chain: KernelChain, vectorised: bool) -> str:
    """One pass per row: the chain in registers, then the reduction (if any). Vectorised: SIMD
    loops in ``chain_rows``, compiled twice (baseline SSE2 and AVX2 + FMA) and picked at run time."""
    exp, _ = math_names("cpu", vectorised)
    value = chain_call(chain, "x[r * cols + c]", "r * cols + c", "c")
    if chain.reduction:
        body = cpu_reduction(chain.reduction, value, vectorised, exp, chain.reduction_bug)
    else:
        body = [*(["#pragma omp simd"] if vectorised else []),
                f"    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = {value};"]
    rows = ["  const float* x = tensors[0];", *cpu_unpack(chain), "  for (int64_t r = 0; r < rows; ++r) {", *body,
            "  }", "}", ""]
    head = [*cpu_preamble(chain, vectorised), *chain_function(chain, "cpu", vectorised)]
    if not vectorised:
        return "\n".join([*head, launcher_head("cpu"), *rows])
    return "\n".join([*head, f"static inline __attribute__((always_inline)) void chain_rows{ROWS_SIGNATURE} {{",
                      *rows, CPU_DISPATCH])


def cpu_naive(chain: KernelChain) -> str:
    """One function per op over all elements, from its input buffer into a new one."""
    parts, cases = [*cpu_preamble(chain, False)], []
    signature = ROWS_SIGNATURE
    for k, b in enumerate(chain.steps):
        single = KernelChain((b,), None)
        expr = step_expr(b, f"{b.operand.name}[{'i' if b.operand.role == 'input' else 'i % cols'}]"
                         if b.operand else "", "std::exp", "std::tanh")
        parts += [f"// {b.name}, element by element.", f"static void op{k}{signature} {{",
                  "  const float* in = tensors[0];", *cpu_unpack(single), "  const int64_t n = rows * cols;",
                  "  for (int64_t i = 0; i < n; ++i) {", "    const float v = in[i];", f"    out[i] = {expr};",
                  "  }", "}", ""]
        cases.append(k)
    if chain.reduction:
        k = len(chain.steps)
        parts += [f"// {chain.reduction} over each row.", f"static void op{k}{signature} {{",
                  "  const float* in = tensors[0];", "  for (int64_t r = 0; r < rows; ++r) {",
                  *cpu_reduction(chain.reduction, "in[r * cols + c]", False, "std::exp", False), "  }", "}", ""]
        cases.append(k)
    switch = [f"    case {k}: op{k}(tensors, scalars, out, rows, cols); break;" for k in cases]
    return "\n".join([*parts, launcher_head("cpu"), "  switch (kernel) {", *switch, "  }", "}", ""])
