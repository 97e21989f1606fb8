"""Many evaluations at once: the API that rollouts, data_gen and eval.py use.

    from sandbox.pool import EvalRequest, evaluate_many
    for result in evaluate_many([EvalRequest("a", task, solution)], cfg, workers=8):
        result.id, result.measurement, result.task_error

Results come back as they finish (not in submission order); every request yields exactly one
result. A broken task is reported on its own result (``task_error``) and never stops the batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional

from .config import SandboxConfig
from .errors import TaskError
from .measurement import Measurement


@dataclass(frozen=True)
class EvalRequest:
    """One (task, solution) pair to judge; ``id`` is the caller's key for the result."""

    id: str
    task: Path
    solution: Path


@dataclass
class EvalResult:
    """Exactly one per request: a measurement, or why the task itself could not be used."""

    id: str
    measurement: Optional[Measurement] = None
    task_error: Optional[str] = None


def evaluate_one(request: EvalRequest, cfg: SandboxConfig) -> EvalResult:
    from .judge import evaluate

    try:
        return EvalResult(request.id, measurement=evaluate(request.task, request.solution, cfg))
    except TaskError as exc:
        return EvalResult(request.id, task_error=str(exc))


def evaluate_many(requests: Iterable[EvalRequest], cfg: SandboxConfig,
                  workers: Optional[int] = None) -> Iterator[EvalResult]:
    """Judge every request; yields one EvalResult each, in completion order."""
    for request in requests:
        yield evaluate_one(request, cfg)
