"""A chain of operators applied in sequence, checked and sized on the meta device.

Shapes are inferred by running torch's own modules on ``meta`` tensors: no memory, no compute,
and no synthesized program text is executed (the composer only runs trusted library code).
The same pass counts FLOPs, bytes moved and kernel launches to estimate the eager runtime, which
sets the batch size so that a task lands inside the filter's runtime window.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from .recipes import Recipe, Shape

# Extra-input kinds and their dtype; everything not listed is float32.
INDEX_KINDS = {"class_index"}
# Time steps a recurrent module (RNN, GRU, LSTM) is run for on meta. Its meta kernel unrolls every
# step in Python (~25 s for 2048 steps): shapes come from a short run, and its cost, which is
# linear in the steps, is scaled up to the full length.
RECURRENT_META_STEPS = 8
# Aten ops that only reserve memory (no traffic, no kernel).
ALLOCATIONS = {torch.ops.aten.empty, torch.ops.aten.new_empty, torch.ops.aten.empty_strided,
               torch.ops.aten.empty_like}


@dataclass
class OpUse:
    """One operator placed in a chain: class, constructor arguments and the shapes around it."""

    name: str
    kwargs: dict[str, Any]
    recipe: Recipe
    # Where the operator class lives: "torch.nn" or a transformers module path.
    origin: str = "torch.nn"
    in_shape: Shape = ()
    out_shape: Shape = ()

    def extra_shapes(self) -> list[tuple[str, str, Shape]]:
        """(argument name, kind, shape) of each extra forward input."""
        return [(name, kind, extra_shape(kind, self.in_shape)) for name, kind in self.recipe.extras]


@dataclass
class Chain:
    input_shape: Shape
    ops: list[OpUse] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [op.name for op in self.ops]

    @property
    def out_shape(self) -> Shape:
        return self.ops[-1].out_shape if self.ops else self.input_shape


@dataclass
class Cost:
    """What one eager forward costs, counted on the meta device."""

    flops: float
    bytes_moved: float
    kernels: int
    param_bytes: int
    # The largest single tensor the forward creates (inputs included), in bytes.
    peak_tensor_bytes: int

    def estimate_ms(self, peak_flops: float, bandwidth: float, launch_us: float) -> float:
        """Roofline-style: the slower of compute and memory traffic, plus per-kernel overhead."""
        return 1e3 * max(self.flops / peak_flops, self.bytes_moved / bandwidth) + self.kernels * launch_us / 1e3


def extra_shape(kind: str, shape: Shape) -> Shape:
    if kind == "class_index":
        return (shape[0], *shape[2:])
    if kind == "row_sign":
        return (shape[0],)
    return shape


def meta_tensor(kind: str, shape: Shape) -> torch.Tensor:
    dtype = torch.long if kind in INDEX_KINDS else torch.float32
    return torch.empty(shape, dtype=dtype, device="meta")


def op_class(use: OpUse) -> type:
    if use.origin == "torch.nn":
        return getattr(torch.nn, use.name)
    import importlib

    return getattr(importlib.import_module(use.origin), use.name)


def build_meta(use: OpUse) -> torch.nn.Module:
    with torch.device("meta"):
        return op_class(use)(**use.kwargs)


def time_steps(module: torch.nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """(time dimension, steps to run on meta) of a recurrent module's input; (-1, 0) otherwise."""
    if not isinstance(module, torch.nn.RNNBase) or x.dim() != 3:
        return -1, 0
    dim = 1 if module.batch_first else 0
    return dim, min(x.shape[dim], RECURRENT_META_STEPS)


def call_op(module: torch.nn.Module, use: OpUse, x: torch.Tensor) -> torch.Tensor:
    """Call ``module`` the way the rendered forward does (repeats, extras, kwargs, select).
    A recurrent module runs for a few steps; its output is given back its full length."""
    dim, steps = time_steps(module, x)
    full = x
    if steps:
        x = x.narrow(dim, 0, steps)
    extras = [meta_tensor(kind, shape) for _, kind, shape in use.extra_shapes()]
    out = module(*([x] * use.recipe.repeat_x), *extras, **dict(use.recipe.call_kwargs))
    if use.recipe.select is not None:
        out = out[use.recipe.select]
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{use.name} returned {type(out).__name__}, not a tensor")
    if steps and out.dim() == 3:
        shape = list(out.shape)
        shape[dim] = full.shape[dim]
        out = out.new_empty(shape)
    return out


def infer_shapes(chain: Chain) -> Optional[str]:
    """Fill every op's in/out shape by a meta forward; return why the chain is invalid, or None."""
    x = meta_tensor("like", chain.input_shape)
    for i, use in enumerate(chain.ops):
        use.in_shape = tuple(x.shape)
        try:
            x = call_op(build_meta(use), use, x)
        except Exception as exc:  # the op rejects this shape or these arguments
            return f"{use.name}: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        use.out_shape = tuple(x.shape)
        if x.dim() == 0 and i < len(chain.ops) - 1:
            return f"{use.name} reduces to a scalar but is not the last op"
        if 0 in use.out_shape:
            return f"{use.name} produces an empty tensor {use.out_shape}"
    return None


class _TrafficCounter(TorchDispatchMode):
    """Counts bytes read and written and kernels launched by non-view aten ops, and the largest
    tensor an op creates (outputs only: parameters do not grow with the batch)."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes_moved = 0.0
        self.kernels = 0
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "is_view", False):
            return out
        tensors_in = [t for t in tree_flatten((args, kwargs or {}))[0] if isinstance(t, torch.Tensor)]
        tensors_out = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        sizes_out = [t.numel() * t.element_size() for t in tensors_out]
        self.peak = max([self.peak, *sizes_out])
        if func.overloadpacket in ALLOCATIONS:
            return out  # memory is reserved, nothing is read, written or launched
        self.bytes_moved += sum(t.numel() * t.element_size() for t in tensors_in) + sum(sizes_out)
        self.kernels += 1
        return out

    def totals(self) -> tuple[float, int]:
        return self.bytes_moved, self.kernels


def chain_cost(chain: Chain) -> Cost:
    """FLOPs, traffic and kernel count of one eager forward of the whole chain (meta device)."""
    modules = [build_meta(use) for use in chain.ops]
    params = sum(p.numel() * p.element_size() for m in modules for p in m.parameters())
    x = meta_tensor("like", chain.input_shape)
    total_flops, total_bytes, total_kernels = 0.0, 0.0, 0
    with FlopCounterMode(display=False) as flops, _TrafficCounter() as traffic, torch.no_grad():
        for module, use in zip(modules, chain.ops):
            dim, steps = time_steps(module, x)
            scale = x.shape[dim] / steps if steps else 1.0
            before = (flops.get_total_flops(), *traffic.totals())
            x = call_op(module, use, x)
            after = (flops.get_total_flops(), *traffic.totals())
            total_flops += scale * (after[0] - before[0])
            total_bytes += scale * (after[1] - before[1])
            total_kernels += round(scale * (after[2] - before[2]))
    peak = max(traffic.peak, math.prod(chain.input_shape) * 4)
    return Cost(float(total_flops), total_bytes, total_kernels, params, peak)


def with_batch(chain: Chain, batch: int) -> Chain:
    """The same operators on an input whose leading (batch) dimension is ``batch``."""
    ops = [OpUse(u.name, dict(u.kwargs), u.recipe, u.origin) for u in chain.ops]
    resized = Chain((batch, *chain.input_shape[1:]), ops)
    error = infer_shapes(resized)
    if error:
        raise ValueError(f"chain {chain.names} does not accept batch {batch}: {error}")
    return resized
