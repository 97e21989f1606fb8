"""The sandbox's verdict on one (task, solution) pair.

The sandbox knows nothing of RL: it fills a ``Measurement``; rewards are pure functions of it
(``sandbox.reward``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional


class ErrorKind:
    """Typed failure causes (the ``error`` field). A failed evaluation has exactly one."""

    INVALID_SOLUTION = "invalid_solution"  # missing ModelNew, bad workspace layout, syntax error
    COMPILE_ERROR = "compile_error"        # the compiler rejected the sources
    COMPILE_TIMEOUT = "compile_timeout"    # the build ran past compile_timeout_s
    RUNTIME_ERROR = "runtime_error"        # a Python/CUDA exception while running the solution
    TIMEOUT = "timeout"                    # the run ran past run_timeout_s
    CRASH = "crash"                        # the process died (signal, os._exit, sys.exit)
    MISMATCH = "mismatch"                  # outputs differ from the reference
    VIOLATION = "violation"                # a guard caught a forbidden behaviour
    SANDBOX_ERROR = "sandbox_error"        # the harness itself failed; not the solution's fault


@dataclass
class TimingStats:
    """Summary of repeated timed runs, in microseconds."""

    median_us: float
    mean_us: float
    std_us: float
    min_us: float
    max_us: float
    p25_us: float
    p75_us: float
    n: int

    @classmethod
    def from_samples(cls, samples_us: list[float]) -> "TimingStats":
        ordered = sorted(samples_us)
        n = len(ordered)
        mean = sum(ordered) / n
        var = sum((x - mean) ** 2 for x in ordered) / max(n - 1, 1)
        return cls(
            median_us=_quantile(ordered, 0.5), mean_us=mean, std_us=var ** 0.5,
            min_us=ordered[0], max_us=ordered[-1],
            p25_us=_quantile(ordered, 0.25), p75_us=_quantile(ordered, 0.75), n=n,
        )


def _quantile(ordered: list[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted list."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class Measurement:
    """Everything the sandbox observed about one solution. JSON-serialisable via ``to_dict``."""

    compiled: bool = False
    correct: bool = False
    violations: list[str] = field(default_factory=list)
    runtime_us: Optional[float] = None
    eager_us: Optional[float] = None
    compile_us: Optional[float] = None
    runtime_stats: Optional[TimingStats] = None
    eager_stats: Optional[TimingStats] = None
    compile_stats: Optional[TimingStats] = None
    # Why the torch.compile baseline has no time (None: it has one, or was not asked for).
    compile_error: Optional[str] = None
    # Typed failure (an ErrorKind value) and its one-paragraph explanation.
    error: Optional[str] = None
    error_detail: Optional[str] = None
    # Correctness detail: trials passed, and the worst differences seen.
    trials_passed: int = 0
    num_trials: int = 0
    # Timed runs whose outputs were checked against the reference (spot checks) and matched.
    spot_checks: int = 0
    max_abs_diff: Optional[float] = None
    # Under a looser tolerance preset: would the outputs also pass KernelBench's? (None: not checked)
    passes_kernelbench_tolerance: Optional[bool] = None
    # Context: where and how it was measured.
    backend: str = ""
    device: str = ""
    solution_form: str = ""
    tolerance: str = ""
    baseline_cached: bool = False
    # How far the evaluation was asked to go: build, verify or timing (only "timing" has runtimes);
    # "none" when the verdict came without running anything (no usable solution, or none at all).
    stopped_after: str = "none"
    # How solution code was isolated from the judge ("pid+net namespaces" or "none: why").
    isolation: str = ""
    # Checked outputs per hand-over channel ("device": GPU memory shared by descriptor, "host":
    # a sealed memfd), as the reference worker received them.
    handovers: dict[str, int] = field(default_factory=dict)
    # Wall-clock seconds per stage (build, reference, baselines, verify, check, timing, spot_checks).
    stage_seconds: dict[str, float] = field(default_factory=dict)
    # Peak resident memory of the run and reference workers, MiB (one trial at a time bounds it).
    worker_max_rss_mb: dict[str, float] = field(default_factory=dict)
    # Peak device memory of the run worker (its whole run) and of the reference worker (its
    # checks), MiB: torch's allocations plus the hand-over memory each created or mapped (CUDA).
    worker_device_peak_mb: dict[str, float] = field(default_factory=dict)
    # Tails of the build and run logs.
    logs: dict[str, str] = field(default_factory=dict)

    @property
    def speedup_vs_eager(self) -> Optional[float]:
        return _speedup(self.eager_us, self.runtime_us) if self.correct else None

    @property
    def speedup_vs_compile(self) -> Optional[float]:
        return _speedup(self.compile_us, self.runtime_us) if self.correct else None

    def fail(self, kind: str, detail: str) -> "Measurement":
        """Record the first failure; later ones do not overwrite the cause."""
        if self.error is None:
            self.error, self.error_detail = kind, detail
        self.correct = False
        return self

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["speedup_vs_eager"] = self.speedup_vs_eager
        out["speedup_vs_compile"] = self.speedup_vs_compile
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Measurement":
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in values.items() if k in names}
        for key in ("runtime_stats", "eager_stats", "compile_stats"):
            if kwargs.get(key) is not None:
                kwargs[key] = TimingStats(**kwargs[key])
        return cls(**kwargs)


def _speedup(baseline_us: Optional[float], runtime_us: Optional[float]) -> Optional[float]:
    if baseline_us is None or runtime_us is None or runtime_us <= 0:
        return None
    return baseline_us / runtime_us
