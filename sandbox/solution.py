"""The two accepted solution forms, normalised into one directory layout.

1. single file (KernelBench style): a .py defining ``ModelNew``, usually building its kernels
   with ``torch.utils.cpp_extension.load_inline``;
2. workspace (CUDA Agent style): a directory with ``model_new.py`` and ``kernels/`` holding
   ``*.cu`` kernels with ``extern "C"`` launchers, ``*_binding.cpp`` wrappers registered with
   ``REGISTER_BINDING``, optional other ``*.cpp`` and headers. ``binding.cpp`` and
   ``binding_registry.h`` are this project's fixed files: copies inside a submission are ignored.

Both become ``<dest>/model_new.py`` (+ ``<dest>/kernels/``) beside ``<dest>/model.py`` (the task).
"""
from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from .errors import SolutionError
from .task import check_solution_source

KERNEL_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")
HEADER_SUFFIXES = (".h", ".cuh", ".hpp")
FIXED_FILES = ("binding.cpp", "binding_registry.h")
# A workspace is source code: refuse anything that is plainly not (generated binaries, data).
MAX_SOURCE_BYTES = 2_000_000
MAX_KERNEL_FILES = 64

TEMPLATE_DIR = Path(__file__).resolve().parent / "template"


@dataclass(frozen=True)
class Solution:
    form: str                 # "single_file" or "workspace"
    model_new_source: str
    kernel_files: dict[str, bytes]  # name -> content, for the workspace form

    @property
    def key(self) -> str:
        """Content hash of the whole solution (names its build directories)."""
        h = hashlib.sha256(self.model_new_source.encode())
        for name, data in sorted(self.kernel_files.items()):
            h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
        return h.hexdigest()[:20]

    @property
    def has_kernels(self) -> bool:
        return any(not n.endswith(HEADER_SUFFIXES) for n in self.kernel_files)


def read_solution(path: str | Path) -> Solution:
    """Load a solution in either form; raise SolutionError with a one-line reason."""
    path = Path(path)
    if path.is_file():
        source = check_solution_source(_read_capped(path), f"solution {path.name}")
        return Solution("single_file", source, {})
    if path.is_dir():
        return _read_workspace(path)
    raise SolutionError(f"solution not found: {path}")


def _read_workspace(root: Path) -> Solution:
    model_new = root / "model_new.py"
    if not model_new.is_file():
        raise SolutionError(f"workspace {root} has no model_new.py")
    if model_new.is_symlink() or (root / "kernels").is_symlink():
        raise SolutionError("workspace model_new.py and kernels/ must not be symbolic links")
    source = check_solution_source(_read_capped(model_new), "workspace model_new.py")
    kernels: dict[str, bytes] = {}
    kernel_dir = root / "kernels"
    if kernel_dir.is_dir():
        for entry in sorted(kernel_dir.iterdir()):
            if entry.name in FIXED_FILES or not entry.name.endswith(KERNEL_SUFFIXES):
                continue
            if entry.is_symlink() or not entry.is_file():
                raise SolutionError(f"workspace kernel {entry.name} is not a regular file")
            kernels[entry.name] = _read_capped(entry)
    if len(kernels) > MAX_KERNEL_FILES:
        raise SolutionError(f"workspace has {len(kernels)} kernel files (limit {MAX_KERNEL_FILES})")
    return Solution("workspace", source, kernels)


def _read_capped(path: Path) -> bytes:
    size = path.stat().st_size
    if size > MAX_SOURCE_BYTES:
        raise SolutionError(f"{path.name} is {size} bytes (limit {MAX_SOURCE_BYTES})")
    return path.read_bytes()


def materialise(solution: Solution, task_source: str, dest: Path) -> None:
    """Lay the solution out in ``dest`` as a workspace: model.py, model_new.py, kernels/."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "model.py").write_text(task_source, encoding="utf-8")
    (dest / "model_new.py").write_text(solution.model_new_source, encoding="utf-8")
    if solution.kernel_files:
        kdir = dest / "kernels"
        kdir.mkdir(exist_ok=True)
        for name, data in solution.kernel_files.items():
            (kdir / name).write_bytes(data)
    for name in FIXED_FILES:
        shutil.copyfile(TEMPLATE_DIR / name, dest / name)
