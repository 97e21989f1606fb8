"""Recursive output comparison: structure, type, shape, dtype, then values.

Runs in the reference worker (trusted code only) on outputs rebuilt from the run worker's
shared memory (``sandbox.handover``: plain tensors and containers, no pickles), so
nothing the solution produced can execute code here. Tensors are compared in chunks, and each
chunk of the output is read once, through ``read``: the device channel compares the mapped
memory without a private copy of the whole output, so its ``read`` hands back a private copy of
the chunk, checked to still hold what arrived (``sandbox.handover.Handed.read``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch


@dataclass
class Comparison:
    ok: bool
    reason: str = ""
    max_abs_diff: float = 0.0


def _as_read(chunk: torch.Tensor) -> torch.Tensor:
    return chunk


def compare_outputs(ref: Any, out: Any, tolerance_for: Callable[[str], float], where: str = "output",
                    read: Callable[[torch.Tensor], torch.Tensor] = _as_read) -> Comparison:
    """Compare ``out`` against ``ref``; the first difference found is reported by path. Every
    chunk (``chunks``) of an output tensor is used only as ``read(chunk)`` returns it."""
    if isinstance(ref, torch.Tensor):
        return _compare_tensors(ref, out, tolerance_for, where, read)
    if isinstance(ref, (list, tuple)):
        if type(out) is not type(ref) or len(out) != len(ref):
            return Comparison(False, f"{where}: expected {type(ref).__name__} of {len(ref)}, got {_describe(out)}")
        return _merge([compare_outputs(r, o, tolerance_for, f"{where}[{i}]", read)
                       for i, (r, o) in enumerate(zip(ref, out))])
    if isinstance(ref, dict):
        if not isinstance(out, dict) or set(out) != set(ref):
            return Comparison(False, f"{where}: expected dict with keys {sorted(map(str, ref))}, got {_describe(out)}")
        return _merge([compare_outputs(ref[k], out[k], tolerance_for, f"{where}[{k!r}]", read) for k in ref])
    if isinstance(ref, float) and isinstance(out, (int, float)) and not isinstance(out, bool):
        return _compare_tensors(torch.tensor(ref, dtype=torch.float64), torch.tensor(float(out), dtype=torch.float64),
                                tolerance_for, where, _as_read)
    if type(out) is not type(ref) or out != ref:
        return Comparison(False, f"{where}: expected {ref!r}, got {_describe(out)}")
    return Comparison(True)


def _compare_tensors(ref: torch.Tensor, out: Any, tolerance_for: Callable[[str], float], where: str,
                     read: Callable[[torch.Tensor], torch.Tensor]) -> Comparison:
    if type(out) is not torch.Tensor:
        return Comparison(False, f"{where}: expected a tensor, got {_describe(out)}")
    if out.shape != ref.shape:
        return Comparison(False, f"{where}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return Comparison(False, f"{where}: dtype {out.dtype} != reference {ref.dtype}")
    exact = not (ref.is_floating_point() or ref.is_complex())
    tol = 0.0 if exact else tolerance_for(str(ref.dtype).replace("torch.", ""))
    bad = ref_bad = out_bad = 0
    max_abs, pattern_ok = 0.0, True
    for r, o in zip(chunks(ref), chunks(out)):
        o = read(o)
        if torch.equal(r, o):  # bit-identical (the common case for exact kernels): nothing to measure
            continue
        if exact:
            return Comparison(False, f"{where}: integer/bool values differ")
        part = _compare_chunk(r, o, tol)
        pattern_ok &= part[0]
        bad, max_abs = bad + part[1], max(max_abs, part[2])
        ref_bad, out_bad = ref_bad + part[3], out_bad + part[4]
    # Non-finite values must match the reference exactly (same places, same values).
    if not pattern_ok:
        return Comparison(False, f"{where}: NaN/Inf pattern differs from the reference "
                                 f"({out_bad} non-finite vs {ref_bad})")
    if bad:
        return Comparison(False, f"{where}: {bad}/{ref.numel()} values outside atol=rtol={tol:g} "
                                 f"(max abs diff {max_abs:.3g})", max_abs)
    return Comparison(True, "", max_abs)


# Elements compared at a time: float64 copies of a whole multi-GiB output would not fit.
CHUNK_ELEMENTS = 1 << 24


def chunks(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The pieces a tensor is compared in (complex: as real and imaginary parts); views, no copy."""
    return (torch.view_as_real(t) if t.is_complex() else t).reshape(-1).split(CHUNK_ELEMENTS)


def _compare_chunk(ref: torch.Tensor, out: torch.Tensor, tol: float) -> tuple[bool, int, float, int, int]:
    """(non-finite pattern equal, values outside tolerance, max abs diff, non-finite in ref, in out)."""
    ref64, out64 = ref.to(torch.float64), out.to(torch.float64)
    ref_bad, out_bad = ~torch.isfinite(ref64), ~torch.isfinite(out64)
    n_ref, n_out = int(ref_bad.sum()), int(out_bad.sum())
    if not torch.equal(ref_bad, out_bad) or not torch.equal(ref64[ref_bad].nan_to_num(), out64[out_bad].nan_to_num()):
        return False, 0, 0.0, n_ref, n_out
    # Boolean indexing copies; skip it in the usual all-finite case (4M-element outputs: 3x faster).
    finite = ~ref_bad
    diff = (out64 - ref64).abs() if not n_ref else (out64 - ref64).abs()[finite]
    bound = tol + tol * (ref64.abs() if not n_ref else ref64.abs()[finite])
    return True, int((diff > bound).sum()), float(diff.max()) if diff.numel() else 0.0, n_ref, n_out


def _merge(parts: list[Comparison]) -> Comparison:
    worst = max((p.max_abs_diff for p in parts), default=0.0)
    for p in parts:
        if not p.ok:
            return Comparison(False, p.reason, worst)
    return Comparison(True, "", worst)


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{type(value).__name__}{tuple(value.shape)} {value.dtype}"
    return type(value).__name__
