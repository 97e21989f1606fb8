"""Kernel sources the scripted teacher writes for family tasks (data_gen/family.py).

Every solution has the CUDA-Agent workspace form: ``kernels/chain.cpp|.cu`` (the kernels and an
``extern "C" family_launch``), ``kernels/family_binding.cpp`` and ``model_new.py``. The binding is
one fixed file per backend, byte for byte the same in every solution: the sandbox caches objects
by content, so its torch headers compile once and a solution costs one small kernel file. It
takes ``family_op(kernel, tensors, scalars, out_shape)``: ``kernel`` picks one of the file's
kernels (the naive variant has one per op), ``tensors`` are x then the operands in chain order,
``scalars`` the constants in chain order.

Graded variants: ``naive`` (one kernel per op, an intermediate buffer each; reductions one thread
per row on the GPU), ``fused`` (the whole chain in one pass), ``vectorised`` (fused with float4
loads on the GPU, SIMD loops and a libm-free exp on the CPU). Bugs for the ``wrong`` variant are
chain mutations (``KernelChain``: ops swapped or left out) or a reduction written wrongly.
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


# ---------------------------------------------------------------------- shared C pieces

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

CUDA_TANH = """\
// tanh through __expf: accurate to ~1e-7 absolute, where tanhf under fast math is not.
__device__ __forceinline__ float fast_tanh(float v) { return 1.0f - 2.0f / (1.0f + __expf(2.0f * v)); }
"""

CUDA_BLOCK_REDUCE = """\
constexpr int kThreads = 256;

// Reduce within each warp by shuffles, then across the block's warps through shared memory.
template <bool kMax>
__device__ float block_reduce(float v, float* shared) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x < kThreads / 32 ? shared[threadIdx.x] : (kMax ? -FLT_MAX : 0.0f);
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  v = shared[0];
  __syncthreads();  // shared[] is reused by the next reduction
  return v;
}
"""


def math_names(backend: str, vectorised: bool) -> tuple[str, str]:
    if backend == "cuda":
        return "__expf", "fast_tanh"
    return ("fast_exp", "fast_tanh") if vectorised else ("std::exp", "std::tanh")


def preamble(chain: KernelChain, backend: str, vectorised: bool, block_reduce: bool) -> list[str]:
    """Includes and the helpers this chain needs."""
    if backend == "cuda":
        head = ["#include <cfloat>", "#include <cstdint>", "#include <cuda_runtime.h>", ""]
        head += [CUDA_TANH] if uses(chain, "tanh", "gelu") else []
        return head + ([CUDA_BLOCK_REDUCE] if block_reduce else [])
    head = ["#include <cmath>", "#include <cstdint>", ""]
    if vectorised:  # comparisons (relu, clamp, max) become vector selects only without trapping math
        head += ["#pragma GCC optimize(\"no-trapping-math\")", ""]
    needs_exp = uses(chain, "tanh", "gelu", "exp", "sigmoid", "silu", "softmax")
    return head + ([CPU_FAST_MATH] if vectorised and needs_exp else [])


def chain_function(chain: KernelChain, backend: str, vectorised: bool) -> list[str]:
    """``chain(v, operand values..., constants...)``: the elementwise part on one element."""
    exp, tanh = math_names(backend, vectorised)
    qualifier = "__device__ __forceinline__ float" if backend == "cuda" else INLINE[vectorised]
    params = ["float v", *[f"float {o.name}" for o in operands(chain)], *[f"float {c}" for c in constants(chain)]]
    body = [f"  v = {step_expr(b, b.operand.name if b.operand else '', exp, tanh)};" for b in chain.steps]
    return [f"{qualifier} chain({', '.join(params)}) {{", *body, "  return v;", "}", ""]


def chain_call(chain: KernelChain, x: str, index: str, column: str) -> str:
    """chain(...) on one element: x, each operand at ``index`` (inputs) or ``column`` (params)."""
    values = [f"{o.name}[{index if o.role == 'input' else column}]" for o in operands(chain)]
    return f"chain({', '.join([x, *values, *constants(chain)])})"


def lane_call(chain: KernelChain, lane: str) -> str:
    """chain(...) on one lane of float4 loads named xv, <operand>_v."""
    values = [f"{o.name}_v.{lane}" for o in operands(chain)]
    return f"chain({', '.join([f'xv.{lane}', *values, *constants(chain)])})"


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
    head = [*preamble(chain, "cpu", vectorised, False), *chain_function(chain, "cpu", vectorised)]
    if not vectorised:
        return "\n".join([*head, launcher_head("cpu"), *rows])
    return "\n".join([*head, f"static inline __attribute__((always_inline)) void chain_rows{ROWS_SIGNATURE} {{",
                      *rows, CPU_DISPATCH])


def cpu_naive(chain: KernelChain) -> str:
    """One function per op over all elements, from its input buffer into a new one."""
    parts, cases = [*preamble(chain, "cpu", False, False)], []
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


# ---------------------------------------------------------------------- CUDA

def vector_out(chain: KernelChain, vector: bool) -> bool:
    """float4 stores, except for one value per row (sum, max)."""
    return vector and chain.reduction not in ("sum", "max")


def cuda_params(chain: KernelChain, vector: bool) -> str:
    t = "float4" if vector else "float"
    params = [f"const {t}* __restrict__ x", *[f"const {t}* __restrict__ {o.name}" for o in operands(chain)],
              *[f"float {c}" for c in constants(chain)], f"{'float4' if vector_out(chain, vector) else 'float'}* "
              "__restrict__ out"]
    return ", ".join(params)


def cuda_args(chain: KernelChain, vector: bool) -> str:
    cast = (lambda p: f"reinterpret_cast<const float4*>({p})") if vector else (lambda p: p)
    args = [cast("tensors[0]"), *[cast(f"tensors[{k}]") for k in range(1, len(operands(chain)) + 1)],
            *[f"(float)scalars[{k}]" for k in range(len(constants(chain)))],
            "reinterpret_cast<float4*>(out)" if vector_out(chain, vector) else "out"]
    return ", ".join(args)


def cuda_loads(chain: KernelChain, column: str) -> list[str]:
    """float4 loads of x and each operand for the float4 at (i, column)."""
    loads = ["    const float4 xv = x[i];"]
    return loads + [f"    const float4 {o.name}_v = {o.name}[{'i' if o.role == 'input' else column}];"
                    for o in operands(chain)]


def cuda_elementwise(chain: KernelChain, vector: bool) -> list[str]:
    """A 2-D grid: blockIdx.y is the row, so the column needs no division."""
    width = "cols4" if vector else "cols"
    if vector:
        body = [*cuda_loads(chain, "c"), "    float4 o;", *[f"    o.{l} = {lane_call(chain, l)};" for l in "xyzw"],
                "    out[i] = o;"]
    else:
        body = [f"    out[i] = {chain_call(chain, 'x[i]', 'i', 'c')};"]
    kernel = [f"__global__ void chain_kernel({cuda_params(chain, vector)}, int64_t {width}) {{",
              "  const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;", f"  if (c < {width}) {{",
              f"    const int64_t i = blockIdx.y * {width} + c;", *body, "  }", "}", ""]
    launch = [*(["  const int64_t cols4 = cols / 4;"] if vector else []),
              f"  const dim3 grid((unsigned)(({width} + {THREADS - 1}) / {THREADS}), (unsigned)rows);",
              f"  if (rows > 0 && cols > 0) chain_kernel<<<grid, {THREADS}, 0, stream>>>({cuda_args(chain, vector)}, "
              f"{width});"]
    return kernel + [launcher_head("cuda"), *launch, "}", ""]


def cuda_lanes(chain: KernelChain) -> list[str]:
    return [*cuda_loads(chain, "c4"), *[f"    const float v{k} = {lane_call(chain, l)};" for k, l in enumerate("xyzw")]]


def cuda_row_passes(reduction: str, vector: bool, chain: KernelChain, bug: bool) -> list[str]:
    """One block per row: pass 1 computes the chain (and stores it for softmax / rmsnorm) while
    accumulating; block reductions; then the normalising passes over the stored row."""
    n, step = ("cols4", "c4") if vector else ("cols", "c")
    loop = f"  for (int64_t {step} = threadIdx.x; {step} < {n}; {step} += kThreads) {{"
    index = [f"    const int64_t i = base + {step};"]
    if vector:
        values = cuda_lanes(chain)
        fold = {"sum": "v0 + v1 + v2 + v3", "max": "fmaxf(fmaxf(v0, v1), fmaxf(v2, v3))",
                "sq": "v0 * v0 + v1 * v1 + v2 * v2 + v3 * v3"}
        store = ["    out[i] = make_float4(v0, v1, v2, v3);"]
    else:
        values = [f"    const float v = {chain_call(chain, 'x[i]', 'i', 'c')};"]
        fold = {"sum": "v", "max": "v", "sq": "v * v"}
        store = ["    out[i] = v;"]
    lines = ["  __shared__ float shared[kThreads / 32];", f"  const int64_t base = blockIdx.x * {n};"]
    if reduction in ("sum", "max"):
        start = "0.0f" if reduction == "sum" or bug else "-FLT_MAX"
        update = f"acc += {fold['sum']};" if reduction == "sum" else f"acc = fmaxf(acc, {fold['max']});"
        result = "acc / (float)(cols)" if bug else "acc"
        return lines + [f"  float acc = {start};", loop, *index, *values, f"    {update}", "  }",
                        f"  acc = block_reduce<{'true' if reduction == 'max' else 'false'}>(acc, shared);",
                        f"  if (threadIdx.x == 0) out[blockIdx.x] = {result};"]
    if reduction == "softmax":
        track = [] if bug else [f"    row_max = fmaxf(row_max, {fold['max']});"]
        lines += [*([] if bug else ["  float row_max = -FLT_MAX;"]), loop, *index, *values, *store, *track, "  }"]
        lines += [] if bug else ["  row_max = block_reduce<true>(row_max, shared);"]
        shift = "" if bug else " - row_max"
        return lines + ["  float row_sum = 0.0f;", *normalise_loop(loop, vector, f"__expf({{v}}{shift})", True),
                        "  row_sum = block_reduce<false>(row_sum, shared);", "  const float inv_sum = 1.0f / row_sum;",
                        *normalise_loop(loop, vector, "{v} * inv_sum", False)]
    root = "1.0f / " if bug else "rsqrtf"
    return lines + ["  float sum_sq = 0.0f;", loop, *index, *values, *store, f"    sum_sq += {fold['sq']};", "  }",
                    "  sum_sq = block_reduce<false>(sum_sq, shared);",
                    f"  const float norm = {root}(sum_sq / (float)cols + 1e-6f);",
                    *normalise_loop(loop, vector, "{v} * norm", False)]


def normalise_loop(loop: str, vector: bool, expr: str, accumulate: bool) -> list[str]:
    """A pass over the stored row: o = expr(o) per element (summing into row_sum if asked)."""
    if not vector:
        body = [f"    const float e = {expr.format(v='out[base + c]')};", "    out[base + c] = e;"]
        return [loop, *body, *(["    row_sum += e;"] if accumulate else []), "  }"]
    body = ["    float4 o = out[base + c4];", *[f"    o.{l} = {expr.format(v='o.' + l)};" for l in "xyzw"],
            "    out[base + c4] = o;"]
    return [loop, *body, *(["    row_sum += o.x + o.y + o.z + o.w;"] if accumulate else []), "  }"]


def cuda_fused(chain: KernelChain, vector: bool) -> str:
    parts = [*preamble(chain, "cuda", vector, bool(chain.reduction)), *chain_function(chain, "cuda", vector)]
    if not chain.reduction:
        return "\n".join(parts + cuda_elementwise(chain, vector))
    n = "cols / 4" if vector else "cols"
    kernel = [f"__global__ void chain_kernel({cuda_params(chain, vector)}, int64_t {'cols4' if vector else 'cols'}"
              f"{', int64_t cols' if vector else ''}) {{",
              *cuda_row_passes(chain.reduction, vector, chain, chain.reduction_bug), "}", ""]
    args = cuda_args(chain, vector) + (f", {n}, cols" if vector else ", cols")
    launch = [f"  if (rows > 0 && cols > 0) chain_kernel<<<(unsigned)rows, kThreads, 0, stream>>>({args});"]
    return "\n".join(parts + kernel + [launcher_head("cuda"), *launch, "}", ""])


def cuda_naive(chain: KernelChain) -> str:
    """One kernel per op over all elements (grid-stride), an intermediate buffer each; the
    reduction runs one thread per row, a sequential loop (uncoalesced, few threads)."""
    parts, cases = [*preamble(chain, "cuda", False, False)], []
    stride_loop = ("  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; "
                   "i += (int64_t)gridDim.x * blockDim.x) {")
    for k, b in enumerate(chain.steps):
        params = ["const float* __restrict__ in", *([f"const float* __restrict__ {b.operand.name}"] if b.operand else []),
                  *[f"float {c}" for c in b.constants], "float* __restrict__ out", "int64_t n", "int64_t cols"]
        operand = f"{b.operand.name}[{'i' if b.operand.role == 'input' else 'i % cols'}]" if b.operand else ""
        parts += [f"// {b.name}, element by element.", f"__global__ void op{k}({', '.join(params)}) {{", stride_loop,
                  "    const float v = in[i];", f"    out[i] = {step_expr(b, operand, '__expf', 'fast_tanh')};",
                  "  }", "}", ""]
        args = ["tensors[0]", *(["tensors[1]"] if b.operand else []),
                *[f"(float)scalars[{j}]" for j in range(len(b.constants))], "out", "n", "cols"]
        cases.append(f"    case {k}: op{k}<<<blocks, {THREADS}, 0, stream>>>({', '.join(args)}); break;")
    if chain.reduction:
        k = len(chain.steps)
        parts += [f"// {chain.reduction} over each row, one thread per row.",
                  f"__global__ void op{k}(const float* __restrict__ in, float* __restrict__ out, int64_t rows, "
                  "int64_t cols) {", "  const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;",
                  "  if (r >= rows) return;", "  const float* row = in + r * cols;",
                  *naive_row(chain.reduction), "}", ""]
        cases.append(f"    case {k}: op{k}<<<(unsigned)((rows + {THREADS - 1}) / {THREADS}), {THREADS}, 0, stream>>>"
                     "(tensors[0], out, rows, cols); break;")
    launch = ["  const int64_t n = rows * cols;", f"  const int64_t wanted = (n + {THREADS - 1}) / {THREADS};",
              "  const unsigned blocks = (unsigned)(wanted < 4096 ? (wanted > 0 ? wanted : 1) : 4096);",
              "  switch (kernel) {", *cases, "  }"]
    return "\n".join(parts + [launcher_head("cuda"), *launch, "}", ""])


def naive_row(reduction: str) -> list[str]:
    if reduction == "sum":
        return ["  double acc = 0.0;", "  for (int64_t c = 0; c < cols; ++c) acc += row[c];", "  out[r] = (float)acc;"]
    if reduction == "max":
        return ["  float acc = -FLT_MAX;", "  for (int64_t c = 0; c < cols; ++c) acc = fmaxf(acc, row[c]);",
                "  out[r] = acc;"]
    lines = ["  float* o = out + r * cols;"]
    if reduction == "softmax":
        return lines + ["  float row_max = -FLT_MAX;", "  for (int64_t c = 0; c < cols; ++c) row_max = fmaxf(row_max, row[c]);",
                        "  double row_sum = 0.0;", "  for (int64_t c = 0; c < cols; ++c) {",
                        "    const float e = __expf(row[c] - row_max);", "    o[c] = e;", "    row_sum += e;", "  }",
                        "  const float inv_sum = (float)(1.0 / row_sum);",
                        "  for (int64_t c = 0; c < cols; ++c) o[c] *= inv_sum;"]
    return lines + ["  double sum_sq = 0.0;", "  for (int64_t c = 0; c < cols; ++c) sum_sq += (double)row[c] * row[c];",
                    "  const float norm = rsqrtf((float)(sum_sq / cols) + 1e-6f);",
                    "  for (int64_t c = 0; c < cols; ++c) o[c] = row[c] * norm;"]


# ---------------------------------------------------------------------- a whole solution

VARIANT_TITLES = {"naive": "one kernel per op, an intermediate buffer each",
                  "fused": "the whole chain in one kernel",
                  "vectorised": "one fused kernel with vector loads and SIMD-friendly math"}


def vectorisable(backend: str, cols: int) -> bool:
    """float4 loads need rows that start 16-byte aligned; CPU SIMD loops handle any length."""
    return backend == "cpu" or cols % 4 == 0


def kernel_source(chain: KernelChain, variant: str, backend: str) -> str:
    if variant == "naive":
        return cuda_naive(chain) if backend == "cuda" else cpu_naive(chain)
    vector = variant == "vectorised"
    return cuda_fused(chain, vector) if backend == "cuda" else cpu_fused(chain, vector)


def solution_files(chain: KernelChain, variant: str, backend: str, init_args: list[str], params: list[str],
                   inputs: list[str], title: str) -> dict[str, str]:
    """The workspace files (path -> text) of ``chain`` written as ``variant``; ``init_args``,
    ``params`` and ``inputs`` are Model's (ModelNew keeps its signature and parameters)."""
    calls = naive_calls(chain) if variant == "naive" else fused_calls(chain)
    suffix = ".cu" if backend == "cuda" else ".cpp"
    return {KERNEL_STEM + suffix: kernel_source(chain, variant, backend), BINDING_PATH: binding_source(backend),
            "model_new.py": model_new_source(init_args, params, inputs, calls, chain.reduction in ("sum", "max"),
                                             title)}
