"""Which backend judges on this machine: the default every entry point uses, and the one-line
error when the backend asked for cannot run here.

The default is the machine's (cuda when torch sees a CUDA GPU, else cpu), so a first command
works on a laptop; a backend named explicitly is honoured, and cuda without a GPU stops before
any work with the override that fixes it, in the caller's own syntax (``--backend cpu`` for the
CLI, ``sandbox=cpu`` for the Hydra entry scripts).
"""
from __future__ import annotations

from .errors import TaskError


def visible_backend() -> str:
    """cuda when torch sees a usable CUDA GPU, else cpu."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def require_backend(backend: str, cpu_override: str) -> None:
    """Raise TaskError (one line, naming ``cpu_override``) when ``backend`` cannot run here."""
    if backend == "cuda" and visible_backend() != "cuda":
        raise TaskError("backend 'cuda' needs a CUDA GPU and a CUDA build of torch; none is visible "
                        f"here (use {cpu_override})")
