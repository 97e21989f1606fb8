"""A single-file solution's ``load_inline`` / ``load``: compiled in the build worker only.

Both go through ``torch.utils.cpp_extension._jit_compile``. The build worker wraps it to record
every failed build, caught by the solution or not: a solution whose load_inline failed is a
compile error even if it falls back to PyTorch. The run worker replaces it with an import of the
library the build worker left: nothing compiles while the solution holds a device lane, and a
library that is not there (the build failed, or load_inline runs only inside ``forward``) is
refused and recorded as a compile error.
"""
from __future__ import annotations

import inspect
import os


def _cpp():
    """torch.utils.cpp_extension, imported on first use: importing it counts the CUDA devices,
    and a held pool worker (CUDA_VISIBLE_DEVICES empty until its lane is known) that counted
    none would never see its GPU."""
    import torch.utils.cpp_extension as cpp

    return cpp

# What the run worker's refusal says (and how the judge's summaries recognise a build error).
NOT_BUILT = "Error building extension '{name}': the sandbox compiles a solution's extensions only in its " \
            "build worker (load_inline at import or in ModelNew.__init__), never while it runs"


class Builds:
    """Builds attempted in this process (``load_inline`` / ``load``), and the failed ones' messages."""

    def __init__(self):
        self.failures: list[str] = []
        cpp = _cpp()
        self._jit_compile = cpp._jit_compile
        self._signature = inspect.signature(self._jit_compile)

    def record_failures(self) -> None:
        """Build worker: compile as torch does, remembering each failure before re-raising it."""
        self._wrap_entry_points(lambda name, exc: f"{type(exc).__name__}: {exc}")

    def import_only(self) -> None:
        """Run worker: import what the build worker built; refuse (and record) anything else."""
        cpp = _cpp()

        def import_built(*args, **kwargs):
            call = self._signature.bind(*args, **kwargs)
            call.apply_defaults()
            name, directory = call.arguments["name"], call.arguments["build_directory"]
            library = os.path.join(directory, f"{name}{getattr(cpp, 'LIB_EXT', '.so')}")
            if call.arguments.get("is_standalone") or not os.path.exists(library):
                raise RuntimeError(NOT_BUILT.format(name=name))
            return cpp._import_module_from_library(name, directory, call.arguments["is_python_module"])

        cpp._jit_compile = import_built
        # Anything failing on the way (the build directory is read-only here) is a refused build.
        self._wrap_entry_points(lambda name, exc: str(exc) if str(exc).startswith("Error building extension")
                                else f"{NOT_BUILT.format(name=name)} ({type(exc).__name__}: {exc})")

    def _wrap_entry_points(self, describe) -> None:
        cpp = _cpp()
        for entry in ("load_inline", "load"):
            setattr(cpp, entry, self._recorded(getattr(cpp, entry), describe))

    def _recorded(self, load, describe):
        def recorded(*args, **kwargs):
            try:
                return load(*args, **kwargs)
            except Exception as exc:
                self.failures.append(describe(kwargs.get("name", args[0] if args else "?"), exc))
                raise

        return recorded

    def failure(self) -> str | None:
        """The build log to report as the compile error, if any build failed or was refused."""
        return "\n\n".join(self.failures) if self.failures else None
