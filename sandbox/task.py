"""KernelBench-format tasks: static checks done in the judge, before any task code runs.

A task is a Python program defining ``class Model(nn.Module)``, ``get_inputs()`` and
``get_init_inputs()``. Run-time checks (inputs really are tensors) happen in the reference
worker, which reports failures as ``TaskError`` lines too.
"""
from __future__ import annotations

import ast
from pathlib import Path

from .errors import SolutionError, TaskError

REQUIRED_TASK_NAMES = ("Model", "get_inputs", "get_init_inputs")


def decode_source(data: bytes, what: str, error_cls: type[ValueError]) -> str:
    try:
        return data.decode("utf-8-sig")  # Python itself accepts a leading byte-order mark
    except UnicodeDecodeError as exc:
        raise error_cls(f"{what} is not valid UTF-8 (byte {exc.start}: {data[exc.start:exc.start + 1]!r})") from None


def parse_source(source: str, what: str, error_cls: type[ValueError]) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise error_cls(f"{what} has a syntax error at line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:  # e.g. source contains NUL bytes
        raise error_cls(f"{what} cannot be parsed: {exc}") from None


def top_level_names(tree: ast.Module) -> set[str]:
    """Names a module binds at top level: defs, classes, assignments and imports."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def load_task_source(path: str | Path) -> str:
    """Read and statically validate a task file; raise TaskError naming the problem."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"task file not found: {path}")
    source = decode_source(path.read_bytes(), f"task {path.name}", TaskError)
    tree = parse_source(source, f"task {path.name}", TaskError)
    missing = [n for n in REQUIRED_TASK_NAMES if n not in top_level_names(tree)]
    if missing:
        raise TaskError(f"task {path.name} does not define {', '.join(missing)} "
                        f"(a KernelBench task needs {', '.join(REQUIRED_TASK_NAMES)})")
    return source


def check_solution_source(source_bytes: bytes, what: str) -> str:
    """Decode and parse a model_new.py; it must bind ModelNew at top level."""
    source = decode_source(source_bytes, what, SolutionError)
    tree = parse_source(source, what, SolutionError)
    if "ModelNew" not in top_level_names(tree):
        raise SolutionError(f"{what} does not define ModelNew")
    return source
