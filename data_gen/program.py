"""Render a chain of operators as a KernelBench-format task, and read tasks back statically.

The rendered program follows KernelBench's level-2 style: numeric constructor arguments become
``Model.__init__`` parameters fed by ``get_init_inputs()``; input sizes are module-level
constants used by ``get_inputs()``. Strings, booleans and None are written inline.
"""
from __future__ import annotations

import ast
import re
from typing import Any

from sandbox.errors import TaskError
from sandbox.task import REQUIRED_TASK_NAMES, parse_source, top_level_names

from .chain import Chain, OpUse

# Names of the input dimensions by rank; 3-D inputs are (channels, length) for *1d operators
# and (sequence, hidden) otherwise.
DIM_NAMES = {
    2: ("batch_size", "features"),
    4: ("batch_size", "channels", "height", "width"),
    5: ("batch_size", "channels", "depth", "height", "width"),
}
DIM_NAMES_1D = ("batch_size", "channels", "length")
DIM_NAMES_SEQ = ("batch_size", "seq_len", "hidden_size")


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def is_init_param(value: Any) -> bool:
    """Numbers and tuples of numbers travel through get_init_inputs (KernelBench style)."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        return True
    return isinstance(value, (tuple, list)) and all(is_init_param(v) for v in value)


def literal(value: Any) -> str:
    if isinstance(value, list):
        value = tuple(value)
    return repr(value)


def input_dim_names(chain: Chain) -> tuple[str, ...]:
    rank = len(chain.input_shape)
    if rank == 3:
        return DIM_NAMES_1D if chain.ops[0].name.endswith("1d") else DIM_NAMES_SEQ
    return DIM_NAMES.get(rank, tuple(f"dim{i}" for i in range(rank)))


def extra_input_expr(kind: str, shape: tuple[int, ...], in_shape: tuple[int, ...], batch: int) -> str:
    """get_inputs() expression for an extra forward input of the given kind (its leading
    dimension is the batch, written as ``batch_size`` so the reader sees it)."""
    dims = ", ".join(["batch_size" if i == 0 and n == batch else str(n) for i, n in enumerate(shape)])
    exprs = {
        "like": f"torch.randn({dims})",
        "prob": f"torch.rand({dims})",
        "positive": f"torch.rand({dims}) + 0.1",
        "sign": f"torch.randint(0, 2, ({dims},)).float() * 2 - 1",
        "row_sign": f"torch.randint(0, 2, ({dims},)).float() * 2 - 1",
        "binary": f"torch.randint(0, 2, ({dims},)).float()",
        "class_index": f"torch.randint(0, {in_shape[1] if len(in_shape) > 1 else 1}, ({dims},))",
    }
    if kind not in exprs:
        raise ValueError(f"unknown extra input kind {kind!r}")
    return exprs[kind]


class _Names:
    """Unique Python identifiers: the first use of a name is plain, later ones get _2, _3, ..."""

    def __init__(self, taken: tuple[str, ...] = ()):
        self.used = set(taken)

    def take(self, base: str) -> str:
        name, i = base, 2
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return name


def render_chain(chain: Chain, title: str) -> str:
    """The full task source for ``chain``; ``title`` opens the module docstring."""
    dims = input_dim_names(chain)
    names = _Names(("self", "x", "torch", "nn", *dims))
    attrs = _Names()
    params: list[tuple[str, Any]] = []  # (init parameter, value) in get_init_inputs order
    init_lines, forward_lines, forward_args, extra_inputs = [], [], ["x"], []
    for use in chain.ops:
        attr = attrs.take(snake(use.name))
        init_lines.append(f"        self.{attr} = {constructor(use, names, params)}")
        call_args = ["x"] * use.recipe.repeat_x
        for arg_name, kind, shape in use.extra_shapes():
            arg = names.take(arg_name)
            forward_args.append(arg)
            call_args.append(arg)
            extra_inputs.append(extra_input_expr(kind, shape, use.in_shape, chain.input_shape[0]))
        call_args += [f"{k}={literal(v)}" for k, v in use.recipe.call_kwargs]
        select = f"[{use.recipe.select}]" if use.recipe.select is not None else ""
        forward_lines.append(f"        x = self.{attr}({', '.join(call_args)}){select}")
    return assemble(title, " -> ".join(chain.names), [p for p, _ in params], init_lines, forward_args,
                    forward_lines, constants(dims, chain.input_shape, params),
                    [f"torch.randn({', '.join(dims)})", *extra_inputs])


def constructor(use: OpUse, names: _Names, params: list[tuple[str, Any]]) -> str:
    args = []
    for key, value in use.kwargs.items():
        if is_init_param(value):
            param = names.take(key)
            params.append((param, value))
            args.append(f"{key}={param}")
        else:
            args.append(f"{key}={literal(value)}")
    return f"nn.{use.name}({', '.join(args)})"


def constants(dims: tuple[str, ...], shape: tuple[int, ...], params: list[tuple[str, Any]]) -> list[str]:
    return [f"{d} = {n}" for d, n in zip(dims, shape)] + [f"{p} = {literal(v)}" for p, v in params]


def assemble(title: str, summary: str, init_params: list[str], init_lines: list[str], forward_args: list[str],
             forward_lines: list[str], constant_lines: list[str], input_exprs: list[str],
             preamble: str = "") -> str:
    init_sig = ", ".join(["self", *init_params])
    return "\n".join([
        f'"""{title}"""',
        "import torch",
        "import torch.nn as nn",
        *([preamble] if preamble else []),
        "",
        "",
        "class Model(nn.Module):",
        f'    """{summary}"""',
        "",
        f"    def __init__({init_sig}):",
        "        super().__init__()",
        *init_lines,
        "",
        f"    def forward(self, {', '.join(forward_args)}):",
        *forward_lines,
        "        return x",
        "",
        "",
        *constant_lines,
        "",
        "",
        "def get_inputs():",
        f"    return [{', '.join(input_exprs)}]",
        "",
        "",
        "def get_init_inputs():",
        f"    return [{', '.join(init_params)}]",
        "",
    ])


# ---------------------------------------------------------------- reading tasks back

def check_task_source(code: str, what: str = "program") -> ast.Module:
    """Parse and check the KernelBench names; raise TaskError naming the problem."""
    tree = parse_source(code, what, TaskError)
    missing = [n for n in REQUIRED_TASK_NAMES if n not in top_level_names(tree)]
    if missing:
        raise TaskError(f"{what} does not define {', '.join(missing)}")
    if model_class(tree) is None:
        raise TaskError(f"{what} binds Model but not as a class")
    return tree


def model_class(tree: ast.Module) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)


def model_ops(code: str) -> list[str]:
    """torch.nn classes instantiated in Model, in source order (``nn.X(...)`` or ``torch.nn.X(...)``)."""
    cls = model_class(ast.parse(code))
    found = []
    for node in ast.walk(cls) if cls else ():
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and ast.unparse(node.func.value) in ("nn", "torch.nn") and node.func.attr[:1].isupper()):
            found.append((node.lineno, node.col_offset, node.func.attr))
    return [name for _, _, name in sorted(found)]
