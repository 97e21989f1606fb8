"""transformers operators as standalone tasks, with their source inlined.

A task must run where transformers is not installed (the sandbox, CI), so the module's source is
copied into the program together with what it references: helper functions and classes of
transformers (recursively), torch imports, simple constants, and ``ACT2FN`` reduced to the
activation the config names. A ``config`` argument becomes a ``SimpleNamespace`` holding exactly
the attributes the source reads. Decorators from transformers (hub kernels, deprecations),
type annotations and docstrings are dropped. Modules whose references cannot be resolved this
way (attention dispatch tables, caches) are skipped, naming what they need.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import math
import random
import textwrap
import types
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from .chain import Chain, OpUse, infer_shapes
from .recipes import EPILOGUE, Recipe

# Constructor parameters that mean "the hidden size".
HIDDEN_PARAMS = ("hidden_size", "dim", "d_model", "embed_dim", "hidden_dim", "normalized_shape", "n_embd")
# Config attributes scaled together with the hidden size (head counts keep the head dim).
WIDTH_ATTRS = ("hidden_size", "intermediate_size", "n_embd", "n_inner", "d_model", "d_ff", "ffn_dim")
HEAD_ATTRS = ("num_attention_heads", "num_key_value_heads", "n_head")
KEEP_DECORATORS = ("staticmethod", "classmethod", "property", "torch")
# Inlined objects per task at most (beyond that the module drags in too much of transformers).
MAX_CLOSURE = 12
PROBE_HIDDEN = 64
_MISSING = object()
# Modules an inlined task may import besides torch.
STDLIB_OK = ("torch", "math", "functools", "typing", "collections")


@dataclass
class HFStandalone:
    cls: type
    module: str
    # Source of helpers + the class, import lines, and whether ACT2FN must be emitted.
    sources: list[str]
    imports: list[str]
    needs_act2fn: bool
    takes_config: bool
    # Attribute names read from `config` (emitted into the SimpleNamespace).
    config_attrs: list[str] = field(default_factory=list)
    select: Optional[int] = None

    def describe(self) -> dict[str, Any]:
        return {"module": self.module, "takes_config": self.takes_config, "config_attrs": self.config_attrs,
                "inlined_objects": len(self.sources), "select": self.select}


# ---------------------------------------------------------------- crawl

def crawl_transformers(families: Any) -> tuple[list, list, list[str]]:
    from .crawl import SeedOp, Skipped, signature_of, source_file

    try:
        import transformers  # noqa: F401
    except ImportError:
        return [], [], ["transformers is not installed: no transformers operators crawled "
                        "(standalone transformers tasks need it only at synthesis time)"]
    ops, skipped, notes = [], [], []
    for module_name in module_names(families):
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # a model family whose optional dependencies are missing
            notes.append(f"cannot import {module_name}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        for name, cls in sorted(vars(module).items()):
            if not (inspect.isclass(cls) and issubclass(cls, torch.nn.Module) and cls.__module__ == module_name):
                continue
            # An alias (PytorchGELUTanh = GELUTanh): the inlined source defines only the real name.
            spec_or_reason = f"alias of {cls.__name__}" if name != cls.__name__ else standalone_spec(cls, module)
            if isinstance(spec_or_reason, str):
                skipped.append(Skipped(name, "transformers", spec_or_reason))
            else:
                ops.append(SeedOp(name, "transformers", module_name, signature_of(cls), source_file(cls), (3,),
                                  EPILOGUE, spec_or_reason))
    return ops, skipped, notes


def module_names(families: Any) -> list[str]:
    import pkgutil

    import transformers.models as models

    if families == "all":
        families = [m.name for m in pkgutil.iter_modules(models.__path__)]
    return ["transformers.activations"] + [f"transformers.models.{f}.modeling_{f}" for f in families]


def standalone_spec(cls: type, module: types.ModuleType) -> HFStandalone | str:
    """How to make a standalone task of ``cls``, or why it cannot be one."""
    from transformers import PreTrainedModel

    if issubclass(cls, PreTrainedModel):
        return "a whole pretrained model, not an operator"
    if cls.forward is torch.nn.Module.forward:
        return "no forward of its own"
    fwd = [p for p in list(inspect.signature(cls.forward).parameters.values())[1:]
           if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(fwd) != 1:
        return f"forward needs {len(fwd)} inputs ({', '.join(p.name for p in fwd)}); standalone tasks take one"
    init = [p for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    unknown = [p.name for p in init if p.name not in HIDDEN_PARAMS + ("config", "layer_idx", "intermediate_size")]
    if unknown:
        return f"constructor needs {', '.join(unknown)}"
    try:
        sources, imports, needs_act, unresolved = closure(cls)
    except (OSError, TypeError, SyntaxError) as exc:
        return f"source unavailable: {exc}"
    if unresolved:
        return f"depends on transformers internals: {', '.join(sorted(unresolved)[:6])}"
    if len(sources) > MAX_CLOSURE:
        return f"dependency closure too large ({len(sources)} objects)"
    spec = HFStandalone(cls, module.__name__, sources, imports, needs_act, any(p.name == "config" for p in init),
                        sorted(config_attributes(sources)))
    return probe(spec)


def probe(spec: HFStandalone) -> HFStandalone | str:
    """Build the real class at a small size and run it once on CPU (trusted library code)."""
    try:
        module = instantiate(spec, PROBE_HIDDEN)
        x = torch.randn(2, 4, PROBE_HIDDEN)
        with torch.no_grad():
            out = module(x)
    except Exception as exc:
        return f"probe failed: {type(exc).__name__}: {str(exc)[:150]}"
    if isinstance(out, torch.Tensor) and out.shape == x.shape and torch.equal(out, x):
        return "returns its input unchanged (no computation)"
    if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor):
        spec.select = 0
    elif not isinstance(out, torch.Tensor):
        return f"forward returns {type(out).__name__}"
    if spec.takes_config and not literal_config(spec, PROBE_HIDDEN):
        return "config has values that cannot be written as literals"
    return spec


# ---------------------------------------------------------------- building

def family_config(spec: HFStandalone, hidden: int) -> Any:
    """The family's config class with widths scaled so that hidden_size == ``hidden``."""
    modeling = importlib.import_module(spec.module)
    config_cls = next(c.config_class for c in vars(modeling).values()
                      if inspect.isclass(c) and getattr(c, "config_class", None) is not None)
    config = config_cls()
    width = next((getattr(config, a) for a in WIDTH_ATTRS[:1] + ("n_embd", "d_model") if getattr(config, a, None)),
                 hidden)
    ratio = hidden / width
    for attr in WIDTH_ATTRS + HEAD_ATTRS:
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            setattr(config, attr, max(1, round(value * ratio)))
    for attr in ("head_dim",):
        heads = getattr(config, "num_attention_heads", None)
        if getattr(config, attr, None) and heads:
            setattr(config, attr, hidden // heads)
    return config


def init_kwargs(spec: HFStandalone, hidden: int) -> dict[str, Any]:
    params = list(inspect.signature(spec.cls.__init__).parameters.values())[1:]
    kwargs: dict[str, Any] = {}
    for p in params:
        if p.default is not p.empty or p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            continue
        special = {"layer_idx": 0, "intermediate_size": 4 * hidden}
        kwargs[p.name] = family_config(spec, hidden) if p.name == "config" else special.get(p.name, hidden)
    return kwargs


def instantiate(spec: HFStandalone, hidden: int) -> torch.nn.Module:
    return spec.cls(**init_kwargs(spec, hidden))


def literal_config(spec: HFStandalone, hidden: int) -> Optional[dict[str, Any]]:
    config = family_config(spec, hidden)
    values = {}
    for attr in spec.config_attrs:
        value = getattr(config, attr, None)
        if not is_literal(value):
            return None
        values[attr] = value
    return values


def is_literal(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return not (isinstance(value, float) and not math.isfinite(value))
    if isinstance(value, (list, tuple)):
        return all(is_literal(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_literal(v) for k, v in value.items())
    return False


# ---------------------------------------------------------------- source closure

def clean_source(obj: Any) -> ast.AST:
    """Parsed source without docstrings, annotations and foreign decorators."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            node.decorator_list = [d for d in node.decorator_list if decorator_root(d) in KEEP_DECORATORS]
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
            for arg in [*node.args.args, *node.args.kwonlyargs, *node.args.posonlyargs,
                        node.args.vararg, node.args.kwarg]:
                if arg is not None:
                    arg.annotation = None
    return _AnnAssignToAssign().visit(tree)


class _AnnAssignToAssign(ast.NodeTransformer):
    def visit_AnnAssign(self, node: ast.AnnAssign):
        if node.value is None:
            return None
        return ast.copy_location(ast.Assign(targets=[node.target], value=node.value), node)


def decorator_root(node: ast.AST) -> str:
    while isinstance(node, (ast.Call, ast.Attribute)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def free_names(tree: ast.AST) -> set[str]:
    """Names read but never bound anywhere in ``tree`` (builtins excluded)."""
    import builtins

    loaded, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return loaded - bound - set(dir(builtins))


def closure(cls: type) -> tuple[list[str], list[str], bool, set[str]]:
    """(sources in definition order, import lines, needs ACT2FN, unresolved names)."""
    sources: list[str] = []
    imports: set[str] = set()
    unresolved: set[str] = set()
    needs_act = False
    done: set[int] = set()

    def add(obj: Any) -> None:
        nonlocal needs_act
        if id(obj) in done or len(done) > MAX_CLOSURE:
            return
        done.add(id(obj))
        tree = clean_source(obj)
        scope = vars(importlib.import_module(obj.__module__))
        for name in sorted(free_names(tree)):
            if name == "ACT2FN":
                needs_act = True
                continue
            resolve(name, scope.get(name, _MISSING), add, imports, unresolved)
        sources.append(ast.unparse(tree))

    add(cls)
    return sources, sorted(imports), needs_act, unresolved


def resolve(name: str, value: Any, add, imports: set[str], unresolved: set[str]) -> None:
    if value is _MISSING:  # not a global of the defining module
        unresolved.add(name)
    elif isinstance(value, types.ModuleType):
        root = value.__name__.split(".")[0]
        if root not in STDLIB_OK:
            unresolved.add(name)
        else:
            imports.add(f"import {value.__name__}" + (f" as {name}" if name != value.__name__ else ""))
    elif is_literal(value):
        imports.add(f"{name} = {value!r}")
    elif (inspect.isclass(value) or inspect.isfunction(value)) and value.__module__.startswith("transformers"):
        add(value)
    elif getattr(value, "__module__", "") and value.__module__.split(".")[0] in STDLIB_OK:
        imports.add(f"from {value.__module__} import {value.__name__}" +
                    (f" as {name}" if name != value.__name__ else ""))
    else:
        unresolved.add(name)


def config_attributes(sources: list[str]) -> set[str]:
    attrs = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "config":
                attrs.add(node.attr)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                  and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id == "config"
                  and isinstance(node.args[1], ast.Constant)):
                attrs.add(node.args[1].value)
    return attrs


def act2fn_lines(config: dict[str, Any], spec: HFStandalone) -> tuple[list[str], list[str], list[str]]:
    """(extra sources, their imports, the ACT2FN line) for the activation names the config uses."""
    from transformers.activations import ACT2CLS

    extra, imports, entries = [], set(), []
    for value in sorted({v for v in config.values() if isinstance(v, str) and v in ACT2CLS}):
        target = ACT2CLS[value]
        cls, kwargs = target if isinstance(target, tuple) else (target, {})
        if cls.__module__.startswith("torch"):
            entries.append(f"{value!r}: nn.{cls.__name__}(**{kwargs!r})")
        else:
            sources, needed, _, unresolved = closure(cls)
            if unresolved:
                raise ValueError(f"activation {value} depends on {sorted(unresolved)}")
            extra += [s for s in sources if s not in spec.sources and s not in extra]
            imports.update(needed)  # e.g. functools for GELUTanh: without it the task cannot build
            entries.append(f"{value!r}: {cls.__name__}(**{kwargs!r})")
    return extra, sorted(imports), [f"ACT2FN = {{{', '.join(entries)}}}"]


# ---------------------------------------------------------------- composing

def compose_standalone(cand, op, rng: random.Random, sizing):
    """A standalone task for one transformers operator: input (batch, seq, hidden)."""
    from .compose import scale_to_target

    spec: HFStandalone = op.standalone
    hidden = rng.choice(sizing.sizes.hidden)
    seq = rng.choice(sizing.sizes.seq)
    recipe = Recipe((3,), lambda s, r, z: None, EPILOGUE, select=spec.select)
    chain = Chain((sizing.base_batch, seq, hidden), [OpUse(op.name, init_kwargs(spec, hidden), recipe, spec.module)])
    target = math.exp(rng.uniform(*map(math.log, sizing.target_ms)))
    error = infer_shapes(chain)
    try:
        if error:
            raise ValueError(error)
        chain, estimate = scale_to_target(chain, sizing, target)
        cand.code = render_standalone(spec, chain, hidden)
    except ValueError as exc:
        cand.error = f"{op.name}: {exc}"
        return cand
    cand.ops, cand.data_source = [op.name], "transformers#1"
    cand.target_ms, cand.estimated_ms = round(target, 4), round(estimate, 4)
    return cand


def render_standalone(spec: HFStandalone, chain: Chain, hidden: int) -> str:
    from .program import assemble

    use = chain.ops[0]
    config = literal_config(spec, hidden) if spec.takes_config else {}
    if config is None:
        raise ValueError("config values are not literals")
    extra, act_imports, act_lines = act2fn_lines(config, spec) if spec.needs_act2fn else ([], [], [])
    header = ("import torch", "import torch.nn as nn")
    imports = ["from types import SimpleNamespace",
               *[i for i in sorted({*spec.imports, *act_imports}) if i not in header]]
    preamble = "\n\n\n".join(["\n".join(imports), *extra, *spec.sources, *act_lines])
    args = []
    for key, value in use.kwargs.items():
        args.append(f"{key}=SimpleNamespace(**CONFIG)" if key == "config" else f"{key}={value!r}")
    select = f"[{spec.select}]" if spec.select is not None else ""
    constants = [f"batch_size = {chain.input_shape[0]}", f"seq_len = {chain.input_shape[1]}",
                 f"hidden_size = {hidden}"] + ([f"CONFIG = {config!r}"] if spec.takes_config else [])
    return assemble(f"{use.name} from {spec.module}, inlined (synthesized: standalone transformers task).",
                    f"Standalone {use.name}.", [], [f"        self.op = {use.name}({', '.join(args)})"], ["x"],
                    [f"        x = self.op(x){select}"], constants,
                    ["torch.randn(batch_size, seq_len, hidden_size)"], preamble=preamble)
