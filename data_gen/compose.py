"""Composers: turn seed operators into candidate KernelBench tasks.

Both composers answer ``compose(index) -> Candidate`` and are deterministic in (seed, index), so
a run can be resumed or split across machines by index range. The offline composer needs no
LLM: it samples an operator count from the configured mix, grows a chain whose shapes are
checked on the meta device, and picks the batch size that puts the estimated eager runtime
inside the target window. The LLM composer (llm_compose.py) asks a model to write the program.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from .chain import Chain, OpUse, chain_cost, infer_shapes, with_batch
from .crawl import Registry, SeedOp
from .program import render_chain
from .recipes import ANCHOR, TERMINAL, SizeProfile

# The paper's composition of CUDA-Agent-Ops-6K: share of tasks with 1..5 torch ops, and of
# standalone transformers tasks (percent).
PAPER_OP_COUNT_WEIGHTS = (3.40, 83.77, 7.62, 2.80, 1.23)
PAPER_TRANSFORMERS_WEIGHT = 1.18


@dataclass
class Candidate:
    """One synthesized task (or why none could be made for this index)."""

    id: str
    index: int
    composer: str
    seed: int
    code: str = ""
    ops: list[str] = field(default_factory=list)
    # "torch#N" (N composed torch ops) or "transformers#1" (a standalone transformers module).
    data_source: str = ""
    # Runtime the composer aimed at and the one its cost model predicts (ms; None: LLM composer).
    target_ms: Optional[float] = None
    estimated_ms: Optional[float] = None
    error: str = ""


class Composer(Protocol):
    name: str

    def compose(self, index: int) -> Candidate: ...


@dataclass(frozen=True)
class Sizing:
    """How big tasks are made: dimension choices and a cost model of the target device."""

    sizes: SizeProfile = SizeProfile()
    # Eager runtime the composer aims at, drawn log-uniformly from [lo, hi] ms per task.
    target_ms: tuple[float, float] = (0.5, 10.0)
    # Cost model of the device: FLOP/s, bytes/s and per-kernel launch overhead (us).
    peak_flops: float = 5e10
    bandwidth: float = 1e10
    launch_us: float = 5.0
    # Batch size of the first draft before it is scaled, and the largest allowed.
    base_batch: int = 8
    max_batch: int = 4096
    # Largest single tensor and largest total parameter size a task may create (MiB).
    max_tensor_mb: float = 256.0
    max_param_mb: float = 512.0

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Sizing":
        values = dict(values)
        values["sizes"] = SizeProfile.from_dict(dict(values.get("sizes", {})))
        values["target_ms"] = tuple(values.get("target_ms", cls.target_ms))
        return cls(**values)


def nice_batch(n: float) -> int:
    """Round to the nearest of 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (how people write batch sizes)."""
    if n <= 1:
        return 1
    k = 2 ** math.floor(math.log2(n))
    return min((k, k * 3 // 2 if k > 1 else 1, 2 * k), key=lambda v: abs(math.log(v / n)))


# How far outside the target range an estimate may land before the chain is redrawn.
TARGET_SLACK = 1.5


def scale_to_target(chain: Chain, sizing: Sizing, target_ms: float) -> tuple[Chain, float]:
    """Resize the batch so the estimated runtime is near ``target_ms`` and tensors fit the caps."""
    cost = chain_cost(chain)
    if cost.param_bytes > sizing.max_param_mb * 2 ** 20:
        raise ValueError(f"parameters take {cost.param_bytes / 2 ** 20:.0f} MiB (cap {sizing.max_param_mb:g})")
    model = (sizing.peak_flops, sizing.bandwidth, sizing.launch_us)
    overhead = cost.kernels * sizing.launch_us / 1e3
    per_sample = max(cost.estimate_ms(*model) - overhead, 1e-9) / chain.input_shape[0]
    batch = max(target_ms - overhead, per_sample) / per_sample
    tensor_cap = sizing.max_tensor_mb * 2 ** 20 / (cost.peak_tensor_bytes / chain.input_shape[0])
    batch = nice_batch(min(batch, tensor_cap, sizing.max_batch))
    while batch > 1 and batch > tensor_cap:
        batch = nice_batch(batch / 2)
    sized = with_batch(chain, batch)
    estimate = chain_cost(sized).estimate_ms(*model)
    lo, hi = sizing.target_ms
    if not lo / TARGET_SLACK <= estimate <= hi * TARGET_SLACK:
        # The batch caps kept it small (or one sample is already too slow): the runtime filter
        # would reject it; draw another chain instead.
        raise ValueError(f"estimated {estimate:.3g} ms at batch {batch}: outside the target "
                         f"[{lo:g}, {hi:g}] ms")
    return sized, estimate


def sample_count(rng: random.Random, weights: tuple[float, ...]) -> int:
    return rng.choices(range(1, len(weights) + 1), weights=weights)[0]


class OfflineComposer:
    """Shape-aware random composition of torch operators (plus standalone transformers modules)."""

    name = "offline"

    def __init__(self, registry: Registry, sizing: Sizing, seed: int = 0,
                 op_count_weights: tuple[float, ...] = PAPER_OP_COUNT_WEIGHTS,
                 transformers_weight: float = PAPER_TRANSFORMERS_WEIGHT, anchor_first: float = 0.8,
                 max_attempts: int = 40):
        self.torch_ops = registry.usable("torch")
        self.hf_ops = registry.usable("transformers")
        if not self.torch_ops:
            raise ValueError("the registry has no usable torch operators")
        self.sizing, self.seed = sizing, seed
        self.op_count_weights = tuple(op_count_weights)
        # Without transformers installed its share goes to torch tasks (the report says so).
        self.transformers_weight = transformers_weight if self.hf_ops else 0.0
        self.anchor_first, self.max_attempts = anchor_first, max_attempts

    def rng_for(self, index: int) -> random.Random:
        return random.Random(f"{self.seed}:{index}")

    def compose(self, index: int) -> Candidate:
        rng = self.rng_for(index)
        cand = Candidate(f"{self.name}-{self.seed}-{index:06d}", index, self.name, self.seed)
        total = sum(self.op_count_weights) + self.transformers_weight
        if rng.random() * total < self.transformers_weight:
            from .hf_ops import compose_standalone

            return compose_standalone(cand, rng.choice(self.hf_ops), rng, self.sizing)
        count = sample_count(rng, self.op_count_weights)
        last_error = ""
        for _ in range(self.max_attempts):
            target = math.exp(rng.uniform(*map(math.log, self.sizing.target_ms)))
            try:
                chain = self.sample_chain(rng, count)
                chain, estimate = scale_to_target(chain, self.sizing, target)
            except ValueError as exc:
                last_error = str(exc)
                continue
            cand.code = render_chain(chain, f"{' -> '.join(chain.names)} (synthesized: offline composer).")
            cand.ops, cand.data_source = chain.names, f"torch#{len(chain.ops)}"
            cand.target_ms, cand.estimated_ms = round(target, 4), round(estimate, 4)
            return cand
        cand.error = f"no valid {count}-op chain in {self.max_attempts} attempts (last: {last_error})"
        return cand

    def sample_chain(self, rng: random.Random, count: int) -> Chain:
        """Grow a chain op by op; each op must accept the previous output (checked on meta)."""
        first = self.pick_first(rng, count)
        chain = Chain(self.first_shape(first, rng))
        self.append(chain, first, rng)
        for position in range(1, count):
            for _ in range(12):
                op = self.pick_next(rng, chain, last=position == count - 1)
                if op is not None and self.append(chain, op, rng):
                    break
            else:
                raise ValueError(f"nothing fits after {chain.names} (shape {chain.out_shape})")
        return chain

    def append(self, chain: Chain, op: SeedOp, rng: random.Random) -> bool:
        kwargs = op.recipe.args(chain.out_shape, rng, self.sizing.sizes)
        if kwargs is None:
            return False
        chain.ops.append(OpUse(op.name, kwargs, op.recipe))
        if infer_shapes(chain) is not None:
            chain.ops.pop()  # earlier ops keep the shapes the previous pass gave them
            return False
        return True

    def pick_first(self, rng: random.Random, count: int) -> SeedOp:
        pool = [op for op in self.torch_ops if count == 1 or op.role != TERMINAL]
        anchors = [op for op in pool if op.role == ANCHOR]
        return rng.choice(anchors if anchors and rng.random() < self.anchor_first else pool)

    def pick_next(self, rng: random.Random, chain: Chain, last: bool) -> Optional[SeedOp]:
        rank, previous = len(chain.out_shape), chain.ops[-1].name
        has_anchor = any(u.recipe.role == ANCHOR for u in chain.ops)
        pool, weights = [], []
        for op in self.torch_ops:
            if op.name == previous or rank not in op.ranks or (op.role == TERMINAL and not last):
                continue
            pool.append(op)
            weights.append(0.3 if op.role == TERMINAL or (op.role == ANCHOR and has_anchor) else 1.0)
        return rng.choices(pool, weights=weights)[0] if pool else None

    def first_shape(self, op: SeedOp, rng: random.Random) -> tuple[int, ...]:
        s, batch = self.sizing.sizes, self.sizing.base_batch
        rank = rng.choice(op.ranks)
        if rank == 2:
            return batch, rng.choice(s.features)
        if rank == 3:
            if op.name.endswith("1d"):
                return batch, rng.choice(s.channels), rng.choice(s.length)
            return batch, rng.choice(s.seq), rng.choice(s.hidden)
        if rank == 4:
            side = rng.choice(s.spatial2d)
            return batch, rng.choice(s.channels), side, side
        side = rng.choice(s.spatial3d)
        return batch, rng.choice(s.channels), side, side, side
