"""A task family a small model can learn: fused elementwise chains with an optional row reduction.

    python -m data_gen.family --backend cpu --count 200 --out data/family/cpu/tasks.parquet
    python -m data_gen.family --backend cuda --count 400 --workers 8 --out data/family/cuda/tasks.parquet

Each task is a real KernelBench-format program rendered from a compact spec (docs/family.md):

    ChainSpec(ops=("tanh", "mul_scalar:2.0", "add_input"), reduction="softmax", shape=(512, 1024))

``ops``: 1-3 elementwise ops applied in order to x of shape (rows, cols), each ``name`` or
``name:constant[:constant]`` (OPS below); ``reduction``: None or one of REDUCTIONS over the last
dim; ``shape`` from the backend's SHAPES. Scalar constants reach ``Model`` through
``get_init_inputs()`` (KernelBench's level-2 style), per-column vectors are ``nn.Parameter``s and
``*_input`` ops take one more ``(rows, cols)`` input. The spec travels with the task (a ``spec``
JSON column beside data_gen's columns), so the scripted teacher (src/agent/teacher.py) can
write its kernels. The split is by *chain signature* (op names and reduction, without constants
or shape): no held-out task shares its sequence of ops with a training task, so held-out reward
measures composing known ops anew, not copying a kernel written for another size.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from .compose import Candidate
from .dataset import SCHEMA, encode, normalized_hash
from .filter import FilterConfig
from .pipeline import run_filter
from .program import assemble
from .report import RunStats


@dataclass(frozen=True)
class OpKind:
    """One elementwise op: how it is written in a spec, in Model, and how large it makes values."""

    name: str
    # Model.forward expression; {x} is the running value, {c0}/{c1} constants, {t} the operand.
    torch_expr: str
    # Base names of the op's scalar constants (init arguments of Model), in spec order.
    constants: tuple[str, ...] = ()
    # Choices for the constants when sampling (one tuple per draw).
    draws: tuple[tuple[float, ...], ...] = ()
    # "param": a per-column vector nn.Parameter; "input": one more (rows, cols) input; "": none.
    operand: str = ""


OPS: dict[str, OpKind] = {k.name: k for k in (
    OpKind("relu", "torch.relu({x})"),
    OpKind("gelu", 'F.gelu({x}, approximate="tanh")'),
    OpKind("sigmoid", "torch.sigmoid({x})"),
    OpKind("tanh", "torch.tanh({x})"),
    OpKind("exp", "torch.exp({x})"),
    OpKind("silu", "F.silu({x})"),
    OpKind("leaky_relu", "F.leaky_relu({x}, {c0})", ("negative_slope",), ((0.01,), (0.1,), (0.2,))),
    OpKind("mul_scalar", "{x} * {c0}", ("scale",), ((0.5,), (1.5,), (2.0,), (3.0,))),
    OpKind("add_scalar", "{x} + {c0}", ("shift",), ((-1.0,), (-0.5,), (0.5,), (1.0,))),
    OpKind("clamp", "torch.clamp({x}, {c0}, {c1})", ("min_value", "max_value"),
           ((-1.0, 1.0), (-0.5, 0.5), (0.0, 2.0), (-2.0, 2.0))),
    OpKind("add_bias", "{x} + {t}", operand="param"),
    OpKind("mul_weight", "{x} * {t}", operand="param"),
    OpKind("add_input", "{x} + {t}", operand="input"),
    OpKind("mul_input", "{x} * {t}", operand="input"),
)}
# Row reductions / normalisations over the last dim, as the last line of Model.forward.
REDUCTIONS: dict[str, str] = {
    "sum": "torch.sum(x, dim=-1)",
    "max": "torch.amax(x, dim=-1)",
    "softmax": "torch.softmax(x, dim=-1)",
    "rmsnorm": "x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)",
}
# (rows, cols) per backend. cpu: ~0.1-5 ms eager on one core, so the CPU sandbox judges a task in
# seconds; cuda: ~50 us - 5 ms eager on an H200. One cols per backend is not a multiple of 4,
# where float4 loads do not apply.
SHAPES: dict[str, tuple[tuple[int, int], ...]] = {
    "cpu": ((256, 512), (512, 512), (256, 1024), (512, 1024), (128, 2048), (1024, 250)),
    "cuda": ((8192, 1024), (4096, 4096), (16384, 2048), (2048, 8192), (8192, 8192), (16384, 4096),
             (6000, 2050)),
}
# Five specs that between them use every op and every ending (tests, docs, GPU checks).
EXAMPLE_SPECS_TEXT = (
    (("tanh", "mul_scalar:2.0", "add_bias"), "softmax"),
    (("gelu", "add_input", "clamp:-1.0:1.0"), "sum"),
    (("sigmoid", "mul_weight", "leaky_relu:0.1"), "max"),
    (("exp", "mul_input", "add_scalar:0.5"), "rmsnorm"),
    (("silu", "relu"), None),
)
# How many ops a chain has, and how it ends (weights).
OP_COUNT_WEIGHTS = {1: 0.25, 2: 0.40, 3: 0.35}
REDUCTION_WEIGHTS = {None: 0.40, "sum": 0.15, "max": 0.15, "softmax": 0.15, "rmsnorm": 0.15}
# Bounds on |value| that keep a chain finite and its float32 reference inside the verification
# tolerance: inputs and parameters are randn (|v| < 6 at these sizes); exp only of |v| <= 10;
# a row sum (the one reduction whose error grows with the values) only of |v| <= 40.
INPUT_BOUND, EXP_INPUT_BOUND, SUM_INPUT_BOUND, VALUE_BOUND = 6.0, 10.0, 40.0, 1e6
HELD_OUT_PERCENT = 20
# Filter settings per backend (data_gen.filter): the eager runtime window (ms) and timing.
WINDOW_MS = {"cpu": (0.05, 50.0), "cuda": (0.02, 20.0)}
FILTER_TIMING = {
    "cpu": {"warmup": 1, "warmup_ms": 10.0, "repeats": 3, "flush_l2": True, "fresh_inputs": True, "cpu_threads": 1},
    "cuda": {"warmup": 3, "warmup_ms": 50.0, "repeats": 10, "flush_l2": True, "fresh_inputs": False,
             "cpu_threads": 1},
}


@dataclass(frozen=True)
class Step:
    """One parsed op of a spec: its kind and constants."""

    kind: OpKind
    constants: tuple[float, ...]


def parse_op(text: str) -> Step:
    name, *args = text.split(":")
    kind = OPS.get(name)
    if kind is None:
        raise ValueError(f"unknown family op {name!r}; known: {', '.join(OPS)}")
    if len(args) != len(kind.constants):
        raise ValueError(f"op {name} takes {len(kind.constants)} constant(s) ({', '.join(kind.constants) or 'none'}), "
                         f"got {text!r}")
    try:
        values = tuple(float(a) for a in args)
    except ValueError:
        raise ValueError(f"op {text!r}: constants must be numbers") from None
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"op {text!r}: constants must be finite")
    if name == "clamp" and values[0] >= values[1]:
        raise ValueError(f"op {text!r}: clamp needs min < max")
    return Step(kind, values)


def op_text(name: str, constants: tuple[float, ...]) -> str:
    return ":".join([name, *(repr(float(c)) for c in constants)])


@dataclass(frozen=True)
class ChainSpec:
    """A family task: ``ops`` applied in order to x (rows, cols), then ``reduction`` over cols."""

    ops: tuple[str, ...]
    reduction: Optional[str] = None
    shape: tuple[int, int] = (256, 512)
    # Only float32 for now; the field keeps specs readable once half types join.
    dtype: str = "float32"

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", tuple(op_text(s.kind.name, s.constants) for s in map(parse_op, self.ops)))
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))
        if not 1 <= len(self.ops) <= 3:
            raise ValueError(f"a family chain has 1-3 ops, got {len(self.ops)}")
        if self.reduction is not None and self.reduction not in REDUCTIONS:
            raise ValueError(f"unknown reduction {self.reduction!r}; known: None, {', '.join(REDUCTIONS)}")
        if len(self.shape) != 2 or min(self.shape) < 1:
            raise ValueError(f"shape must be (rows, cols) with both >= 1, got {self.shape}")
        if self.dtype != "float32":
            raise ValueError(f"only float32 family tasks exist, got dtype {self.dtype!r}")

    @property
    def steps(self) -> list[Step]:
        return [parse_op(op) for op in self.ops]

    def to_dict(self) -> dict[str, Any]:
        return {"ops": list(self.ops), "reduction": self.reduction, "shape": list(self.shape), "dtype": self.dtype}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict) -> "ChainSpec":
        data = json.loads(text) if isinstance(text, str) else dict(text)
        data.pop("id", None)
        return cls(tuple(data["ops"]), data.get("reduction"), tuple(data["shape"]), data.get("dtype", "float32"))

    @property
    def id(self) -> str:
        """Stable: a hash of the canonical JSON (ops with constants, reduction, shape, dtype)."""
        return "fam_" + hashlib.sha256(self.to_json().encode()).hexdigest()[:12]

    @property
    def signature(self) -> str:
        """What the split is keyed on: op names and reduction, no constants, no shape."""
        return ">".join(s.kind.name for s in self.steps) + "|" + (self.reduction or "none")

    def split(self, held_out_percent: int = HELD_OUT_PERCENT) -> str:
        bucket = int(hashlib.sha256(self.signature.encode()).hexdigest()[:8], 16) % 100
        return "heldout" if bucket < held_out_percent else "train"



def example_specs(shape: tuple[int, int]) -> list[ChainSpec]:
    """EXAMPLE_SPECS_TEXT at one shape."""
    return [ChainSpec(ops, reduction, shape) for ops, reduction in EXAMPLE_SPECS_TEXT]


# ---------------------------------------------------------------------- the Model's names

@dataclass(frozen=True)
class Operand:
    """A tensor an op reads besides x: a parameter (``self.<name>``) or a forward input."""

    name: str
    role: str  # "param" or "input"


@dataclass(frozen=True)
class BoundStep:
    """A step with the names Model gives it: its constants' init arguments and its operand."""

    step: Step
    constants: tuple[str, ...]
    operand: Optional[Operand]

    @property
    def name(self) -> str:
        return self.step.kind.name


def bound_steps(spec: ChainSpec) -> list[BoundStep]:
    """The spec's steps with their names; a name that repeats gets _2, _3 (scale, scale_2).
    Model and the teacher's ModelNew and kernels all use these names."""
    seen: dict[str, int] = {}

    def take(base: str) -> str:
        seen[base] = seen.get(base, 0) + 1
        return base if seen[base] == 1 else f"{base}_{seen[base]}"

    inputs = iter(("y", "z"))
    out = []
    for step in spec.steps:
        consts = tuple(take(c) for c in step.kind.constants)
        operand = None
        if step.kind.operand == "param":
            operand = Operand(take("bias" if step.kind.name == "add_bias" else "weight"), "param")
        elif step.kind.operand == "input":
            operand = Operand(next(inputs), "input")
        out.append(BoundStep(step, consts, operand))
    return out


def init_arguments(spec: ChainSpec) -> list[tuple[str, float | int]]:
    """Model's constructor arguments in order: ``dim`` (when a parameter needs it), constants."""
    steps = bound_steps(spec)
    args: list[tuple[str, float | int]] = [("dim", spec.shape[1])] if any(
        b.operand and b.operand.role == "param" for b in steps) else []
    for b in steps:
        args += list(zip(b.constants, b.step.constants))
    return args


def forward_inputs(spec: ChainSpec) -> list[str]:
    return ["x"] + [b.operand.name for b in bound_steps(spec) if b.operand and b.operand.role == "input"]


def describe(spec: ChainSpec) -> str:
    tail = f", then {spec.reduction} over the last dim" if spec.reduction else ""
    return " -> ".join(s.kind.name for s in spec.steps) + tail


def render_task(spec: ChainSpec) -> str:
    """The KernelBench-format program of ``spec``."""
    init_lines, forward_lines = [], []
    for b in bound_steps(spec):
        init_lines += [f"        self.{c} = {c}" for c in b.constants]
        if b.operand and b.operand.role == "param":
            init_lines.append(f"        self.{b.operand.name} = nn.Parameter(torch.randn(dim))")
        refs = {f"c{i}": f"self.{c}" for i, c in enumerate(b.constants)}
        if b.operand:
            refs["t"] = f"self.{b.operand.name}" if b.operand.role == "param" else b.operand.name
        forward_lines.append("        x = " + b.step.kind.torch_expr.format(x="x", **refs))
    if spec.reduction:
        forward_lines.append("        x = " + REDUCTIONS[spec.reduction])
    args = init_arguments(spec)
    inputs = forward_inputs(spec)
    constants = [f"batch_size = {spec.shape[0]}", f"dim = {spec.shape[1]}"]
    constants += [f"{name} = {value!r}" for name, value in args if name != "dim"]
    return assemble(f"Family task {spec.id}: {describe(spec)}.", describe(spec), [n for n, _ in args],
                    init_lines, inputs, forward_lines, constants, ["torch.randn(batch_size, dim)"] * len(inputs),
                    preamble="import torch.nn.functional as F")


def run_chain(steps: list[BoundStep], reduction_expr: Optional[str], x: Any, operands: dict[str, Any]) -> Any:
    """The chain evaluated with the very expressions Model is rendered from (OPS, REDUCTIONS),
    on tensors given by name (``operands``: y, bias, ...); ``reduction_expr`` is a REDUCTIONS
    value or another expression of ``x``. For checking variants of a chain (the teacher's
    bugs) in process: the spec is data and the expressions are this module's, not a task's."""
    import torch
    import torch.nn.functional as F

    scope = {"torch": torch, "F": F}
    for b in steps:
        refs = {"x": x, **{f"c{i}": v for i, v in enumerate(b.step.constants)}}
        if b.operand:
            refs["t"] = operands[b.operand.name]
        x = eval(b.step.kind.torch_expr.format(x="x", c0="c0", c1="c1", t="t"), scope, refs)  # noqa: S307
    return eval(reduction_expr, scope, {"x": x}) if reduction_expr else x  # noqa: S307


# ---------------------------------------------------------------------- sampling

def value_bound(bound: float, step: Step) -> float:
    """Largest |value| after ``step`` for inputs bounded by ``bound`` (INPUT_BOUND for operands)."""
    name, c = step.kind.name, step.constants
    if name in ("sigmoid", "tanh"):
        return 1.0
    if name == "exp":
        return math.exp(min(bound, 700.0))
    if name == "mul_scalar":
        return bound * abs(c[0])
    if name == "add_scalar":
        return bound + abs(c[0])
    if name == "clamp":
        return min(bound, max(abs(c[0]), abs(c[1])))
    if name in ("add_bias", "add_input"):
        return bound + INPUT_BOUND
    if name in ("mul_weight", "mul_input"):
        return bound * INPUT_BOUND
    return bound  # relu, gelu, silu, leaky_relu never grow |v|


def chain_is_safe(steps: list[Step], reduction: Optional[str]) -> bool:
    """No exp of large values, no two equal ops in a row, at most two extra inputs, and values
    small enough for the reduction (see the bounds above)."""
    bound = INPUT_BOUND
    for i, step in enumerate(steps):
        if i and steps[i - 1].kind.name == step.kind.name:
            return False
        if step.kind.name == "exp" and bound > EXP_INPUT_BOUND:
            return False
        bound = value_bound(bound, step)
    if sum(s.kind.operand == "input" for s in steps) > 2:
        return False
    return bound <= (SUM_INPUT_BOUND if reduction == "sum" else VALUE_BOUND)


def weighted(rng: random.Random, weights: dict) -> Any:
    keys = list(weights)
    return rng.choices(keys, weights=[weights[k] for k in keys])[0]


def sample_spec(rng: random.Random, backend: str) -> ChainSpec:
    """One spec drawn from the family's distribution (redrawn until the chain is safe)."""
    if backend not in SHAPES:
        raise ValueError(f"backend must be one of {', '.join(SHAPES)}, got {backend!r}")
    while True:
        count, reduction = weighted(rng, OP_COUNT_WEIGHTS), weighted(rng, REDUCTION_WEIGHTS)
        steps = []
        for kind in rng.choices(list(OPS.values()), k=count):
            steps.append(Step(kind, rng.choice(kind.draws) if kind.draws else ()))
        if chain_is_safe(steps, reduction):
            ops = tuple(op_text(s.kind.name, s.constants) for s in steps)
            return ChainSpec(ops, reduction, rng.choice(SHAPES[backend]))


def sample_specs(count: int, backend: str, seed: int = 0) -> list[ChainSpec]:
    """``count`` distinct specs; spec i is drawn from its own RNG (seed, i), so a longer run
    starts with the specs of a shorter one."""
    specs: dict[str, ChainSpec] = {}
    index = 0
    while len(specs) < count:
        spec = sample_spec(random.Random(f"family:{seed}:{index}"), backend)
        specs.setdefault(spec.id, spec)
        index += 1
        if index > 100 * count + 1000:
            raise ValueError(f"only {len(specs)} distinct specs after {index} draws")
    return list(specs.values())


# ---------------------------------------------------------------------- dataset

FAMILY_SCHEMA = pa.schema([*SCHEMA, ("spec", pa.string()), ("signature", pa.string()), ("split", pa.string())])


def candidate(spec: ChainSpec, index: int, seed: int) -> Candidate:
    data_source = f"family#{len(spec.ops) + (1 if spec.reduction else 0)}"
    return Candidate(spec.id, index, "family", seed, code=render_task(spec),
                     ops=[s.kind.name for s in spec.steps] + ([spec.reduction] if spec.reduction else []),
                     data_source=data_source)


def dataset_row(spec: ChainSpec, cand: Candidate, result: Any, held_out_percent: int) -> dict[str, Any]:
    return {"code": cand.code, "ops": cand.ops, "data_source": cand.data_source, "id": spec.id,
            "composer": "family", "seed": cand.seed, "index": cand.index, "code_sha256": normalized_hash(cand.code),
            "eager_ms": result.eager_ms,
            "compile_ms": result.compile_ms, "device": result.device, "verdicts": result.verdicts,
            "spec": spec.to_json(), "signature": spec.signature, "split": spec.split(held_out_percent)}


def write_family(rows: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = {f.name: [encode(f.name, row.get(f.name)) for row in rows] for f in FAMILY_SCHEMA}
    pq.write_table(pa.table(columns, schema=FAMILY_SCHEMA), path)
    return path


def family_specs(rows: list[dict[str, Any]], split: Optional[str] = None) -> list[ChainSpec]:
    """The specs of ``data_gen.dataset.load_tasks`` rows of a family dataset (one split or all)."""
    if rows and "spec" not in rows[0]:
        raise ValueError("these rows have no 'spec' column: not a family dataset")
    return [ChainSpec.from_json(r["spec"]) for r in rows if split is None or r["split"] == split]


def filter_config(backend: str, workers: int, timeout_s: float) -> FilterConfig:
    return FilterConfig(device=backend, window_ms=WINDOW_MS[backend], workers=workers, timeout_s=timeout_s,
                        timing=dict(FILTER_TIMING[backend]))


def build_family(specs: list[ChainSpec], backend: str, out: Path, work_dir: Path, seed: int = 0, workers: int = 2,
                 held_out_percent: int = HELD_OUT_PERCENT, timeout_s: float = 300.0, time_budget_s: float = 0.0,
                 progress: bool = False) -> dict[str, Any]:
    """Judge each spec's task with data_gen's filter (eager run, determinism, non-triviality,
    the backend's runtime window, torch.compile) in worker processes under ``work_dir``, then
    write the accepted ones to ``out`` and a report beside it (``<stem>_report.json``); returns
    the report. Verdicts are kept in ``work_dir/filter_results.jsonl``: a run stopped by
    ``time_budget_s`` (s; 0: none) writes nothing but is continued by the same call again."""
    cands = {s.id: candidate(s, i, seed) for i, s in enumerate(specs)}
    by_id = {s.id: s for s in specs}
    stats = RunStats()
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    results = run_filter(list(cands.values()), filter_config(backend, workers, timeout_s), Path(work_dir), True,
                         progress, time_budget_s, stats)
    accepted = sorted((r for r in results if r.accepted), key=lambda r: cands[r.id].index)
    rows = [dataset_row(by_id[r.id], cands[r.id], r, held_out_percent) for r in accepted]
    report = family_report(specs, results, rows, backend, seed, held_out_percent)
    report["reused_verdicts"] = stats.reused
    if report["unjudged"]:
        return report
    write_family(rows, out)
    out.with_name(out.stem + "_report.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    return report


def family_report(specs: list[ChainSpec], results: list, rows: list[dict], backend: str, seed: int,
                  held_out_percent: int) -> dict[str, Any]:
    rejected: dict[str, int] = {}
    for r in results:
        if not r.accepted:
            reason = r.worker_error or f"{r.first_failure}: {r.verdicts[r.first_failure]['reason'][:80]}"
            rejected[reason] = rejected.get(reason, 0) + 1
    count = lambda key: {k: sum(1 for r in rows if r[key] == k) for k in sorted({r[key] for r in rows})}  # noqa: E731
    eager = sorted(r["eager_ms"] for r in rows if r["eager_ms"] is not None)
    return {"backend": backend, "seed": seed, "held_out_percent": held_out_percent, "candidates": len(specs),
            "judged": len(results), "unjudged": len(specs) - len(results), "accepted": len(rows), "rejected": rejected, "split": count("split"),
            "data_source": count("data_source"), "signatures": len({r["signature"] for r in rows}),
            "reduction": {k or "none": sum(1 for r in rows if json.loads(r["spec"])["reduction"] == k)
                          for k in [None, *REDUCTIONS]},
            "eager_ms": {"min": eager[0], "median": eager[len(eager) // 2], "max": eager[-1]} if eager else {}}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m data_gen.family", description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=sorted(SHAPES), default="cpu", help="task sizes and filter device")
    parser.add_argument("--count", type=int, default=200, help="distinct specs to sample and judge")
    parser.add_argument("--out", type=Path, required=True, help="parquet file to write")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed ((seed, index) fixes spec index)")
    parser.add_argument("--workers", type=int, default=2, help="filter worker processes at once")
    parser.add_argument("--held-out-percent", type=int, default=HELD_OUT_PERCENT, help="signatures held out")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="seconds per candidate, all rubrics")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="filter verdicts and worker files (default outputs/family/<backend>); reused on rerun")
    parser.add_argument("--time-budget-s", type=float, default=0.0,
                        help="stop judging after this many seconds (exit 3: rerun the command to continue)")
    args = parser.parse_args(argv)
    if args.count < 1 or args.workers < 1 or not 0 <= args.held_out_percent <= 100:
        print("data_gen.family: error: --count and --workers must be >= 1, --held-out-percent in [0, 100]",
              file=sys.stderr)
        return 2
    if args.out.suffix != ".parquet":
        print(f"data_gen.family: error: --out must be a .parquet file, got {args.out}", file=sys.stderr)
        return 2
    work_dir = args.work_dir or Path("outputs") / "family" / args.backend
    report = build_family(sample_specs(args.count, args.backend, args.seed), args.backend, args.out, work_dir,
                          args.seed, args.workers, args.held_out_percent, args.timeout_s, args.time_budget_s,
                          progress=True)
    if report["unjudged"]:
        print(f"judged {report['judged']} of {report['candidates']} within the time budget; verdicts are in "
              f"{work_dir}: run the same command again to continue")
        return 3
    print(f"accepted {report['accepted']} of {report['judged']} judged ({report['split']}); wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
