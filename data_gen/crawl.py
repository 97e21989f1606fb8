"""Crawl seed operators: nn.Module classes with their own ``forward`` from torch and transformers.

Every class found ends up either usable (a recipe says how to build it and its inputs, and the
recipe works on the meta device for at least one input rank) or skipped with a reason. The
registry is written as JSON so the report can say what was found, used and why the rest was not.
"""
from __future__ import annotations

import inspect
import json
import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from .chain import Chain, OpUse, infer_shapes
from .recipes import LAZY_REASON, RECIPES, SKIP_REASONS, Recipe, SizeProfile

# Small probe inputs per rank used to check that a recipe really builds a working operator.
PROBE_SHAPES = {2: (4, 64), 3: (4, 32, 64), 4: (2, 16, 16, 16), 5: (2, 8, 8, 8, 8)}
# Random draws of constructor arguments tried per rank before a recipe is declared broken.
PROBE_DRAWS = 6


@dataclass
class SeedOp:
    """A usable operator: where it lives, how it is built, what inputs it takes."""

    name: str
    # "torch" or "transformers".
    library: str
    # Module the class is imported from ("torch.nn", "transformers.models.llama.modeling_llama").
    module: str
    signature: str
    source_file: str = ""
    # Input ranks (batch included) the recipe was verified on.
    ranks: tuple[int, ...] = ()
    role: str = ""
    # transformers only: the standalone task description (see hf_ops.HFStandalone).
    standalone: Any = None

    @property
    def recipe(self) -> Optional[Recipe]:
        return RECIPES.get(self.name) if self.library == "torch" else None


@dataclass
class Skipped:
    name: str
    library: str
    reason: str


@dataclass
class Registry:
    ops: list[SeedOp] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    # Whole-library notes, e.g. "transformers is not installed".
    notes: list[str] = field(default_factory=list)

    def usable(self, library: str) -> list[SeedOp]:
        return [op for op in self.ops if op.library == library]

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for lib in ("torch", "transformers"):
            skipped = [s for s in self.skipped if s.library == lib]
            usable = self.usable(lib)
            out[lib] = {"found": len(usable) + len(skipped), "usable": len(usable), "skipped": len(skipped),
                        "skip_reasons": dict(Counter(generic_reason(s.reason) for s in skipped).most_common())}
        out["notes"] = list(self.notes)
        return out

    def write(self, path: Path) -> None:
        rows = {"usable": [op_row(op) for op in self.ops], "skipped": [asdict(s) for s in self.skipped],
                "summary": self.summary()}
        path.write_text(json.dumps(rows, indent=1, default=str))


def op_row(op: SeedOp) -> dict[str, Any]:
    row = {k: v for k, v in asdict(op).items() if k != "standalone"}
    if op.standalone is not None:
        row["standalone"] = op.standalone.describe()
    return row


def generic_reason(reason: str) -> str:
    """Group reasons for the report (details after ':' vary per class)."""
    return reason.split(":", 1)[0]


# ---------------------------------------------------------------- torch

def crawl_torch() -> tuple[list[SeedOp], list[Skipped]]:
    usable, skipped = [], []
    for name in sorted(dir(torch.nn)):
        cls = getattr(torch.nn, name)
        if not (inspect.isclass(cls) and issubclass(cls, torch.nn.Module)):
            continue
        reason = torch_skip_reason(name, cls)
        if reason is None:
            ranks = probe_recipe(name)
            if ranks:
                usable.append(SeedOp(name, "torch", "torch.nn", signature_of(cls), source_file(cls), ranks,
                                     RECIPES[name].role))
                continue
            reason = f"recipe failed on every rank: {probe_error(name)}"
        skipped.append(Skipped(name, "torch", reason))
    return usable, skipped


def torch_skip_reason(name: str, cls: type) -> Optional[str]:
    if name in SKIP_REASONS:
        return SKIP_REASONS[name]
    if name.startswith("Lazy"):
        return LAZY_REASON
    if getattr(cls, "forward", None) is torch.nn.Module.forward:
        return "no forward of its own"
    if name not in RECIPES:
        return "no input recipe (unknown operator)"
    return None


def probe_recipe(name: str) -> tuple[int, ...]:
    """Ranks on which some draw of the recipe's arguments builds a working operator (meta)."""
    recipe = RECIPES[name]
    rng = random.Random(name)
    ok = []
    for rank in recipe.ranks:
        for _ in range(PROBE_DRAWS):
            if _probe_once(name, recipe, PROBE_SHAPES[rank], rng) is None:
                ok.append(rank)
                break
    return tuple(ok)


def probe_error(name: str) -> str:
    recipe = RECIPES[name]
    return _probe_once(name, recipe, PROBE_SHAPES[recipe.ranks[0]], random.Random(name)) or "?"


def _probe_once(name: str, recipe: Recipe, shape: tuple[int, ...], rng: random.Random) -> Optional[str]:
    kwargs = recipe.args(shape, rng, SizeProfile())
    if kwargs is None:
        return f"no arguments fit input {shape}"
    return infer_shapes(Chain(shape, [OpUse(name, kwargs, recipe)]))


def signature_of(cls: type) -> str:
    try:
        return f"{cls.__name__}{inspect.signature(cls.__init__)}".replace("(self, ", "(").replace("(self)", "()")
    except (TypeError, ValueError):
        return f"{cls.__name__}(...)"


def source_file(cls: type) -> str:
    try:
        return inspect.getsourcefile(cls) or ""
    except TypeError:
        return ""


# ---------------------------------------------------------------- both

def crawl(transformers_families: Any = ("llama",), with_transformers: bool = True) -> Registry:
    """The registry for this environment; transformers is optional (its absence is a note)."""
    registry = Registry()
    registry.ops, registry.skipped = crawl_torch()
    if not with_transformers:
        registry.notes.append("transformers crawl disabled by config")
        return registry
    from .hf_ops import crawl_transformers

    ops, skipped, notes = crawl_transformers(transformers_families)
    registry.ops += ops
    registry.skipped += skipped
    registry.notes += notes
    return registry
