"""CUDA sources of the scripted teacher's variants (see teacher_kernels.py for the layout of a
solution and the CPU sources): naive (one grid-stride kernel per op; reductions one thread per
row), fused (one kernel; reductions one block per row with warp-shuffle block reductions) and
vectorised (fused with float4 loads and stores, for rows whose length is a multiple of 4).
"""
from __future__ import annotations

from .teacher_kernels import (THREADS, KernelChain, chain_call, chain_function, constants, lane_call, launcher_head,
                              operands, step_expr, uses)

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


def cuda_preamble(chain: KernelChain, block_reduce: bool) -> list[str]:
    head = ["#include <cfloat>", "#include <cstdint>", "#include <cuda_runtime.h>", ""]
    head += [CUDA_TANH] if uses(chain, "tanh", "gelu") else []
    return head + ([CUDA_BLOCK_REDUCE] if block_reduce else [])


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
    """A 2-D grid: x over the columns, y over the rows (strided past the grid's 65535 rows), so
    the column needs no division."""
    width = "cols4" if vector else "cols"
    if vector:
        body = [*cuda_loads(chain, "c"), "    float4 o;", *[f"    o.{l} = {lane_call(chain, l)};" for l in "xyzw"],
                "    out[i] = o;"]
    else:
        body = [f"    out[i] = {chain_call(chain, 'x[i]', 'i', 'c')};"]
    kernel = [f"__global__ void chain_kernel({cuda_params(chain, vector)}, int64_t rows, int64_t {width}) {{",
              "  const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;", f"  if (c >= {width}) return;",
              "  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {", f"    const int64_t i = r * {width} + c;",
              *body, "  }", "}", ""]
    launch = [*(["  const int64_t cols4 = cols / 4;"] if vector else []),
              f"  const dim3 grid((unsigned)(({width} + {THREADS - 1}) / {THREADS}), (unsigned)(rows < 65535 ? rows : 65535));",
              f"  if (rows > 0 && cols > 0) chain_kernel<<<grid, {THREADS}, 0, stream>>>({cuda_args(chain, vector)}, "
              f"rows, {width});"]
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
    parts = [*cuda_preamble(chain, bool(chain.reduction)), *chain_function(chain, "cuda", vector)]
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
    parts, cases = [*cuda_preamble(chain, False)], []
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
