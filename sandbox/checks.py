"""Checked calls (verified trials and spot-checked timed runs: one mechanism for both).

The run worker reports each checked call (kind, label, seed, the digest of its inputs as the call
left them) and hands its output to the reference worker in shared memory (``sandbox.handover``:
device memory on CUDA, a sealed memfd on the CPU); the reference worker regenerates the inputs from the seed (their digest),
computes the reference output, compares (``judge_call``, in the reference worker: trusted code,
on its device) and reports the result; the judge turns both into the verdict
(``CallChecks.record``). One
call at a time: at most one trial's inputs and two outputs exist per worker (on the device channel
the reference worker's two are its reference output and its mapping of the run worker's copy).
"""
from __future__ import annotations

from typing import Any

from .compare import compare_outputs
from .config import SandboxConfig
from .measurement import ErrorKind, Measurement

# Kinds of checked calls: verified trials fail as "mismatch", timed runs as a violation.
TRIAL, TIMED_RUN = "trial", "timed_run"


def judge_call(expected: Any, output: Any, cfg: SandboxConfig, read=None) -> dict:
    """The reference worker's comparison of one call's output with the reference output;
    ``read`` (``Handed.read``) takes each chunk of the output as the comparison reads it."""
    read = read or (lambda chunk: chunk)
    result = compare_outputs(expected, output, cfg.tolerance_for, read=read)
    strict_ok = None
    if result.ok and cfg.tolerance != "kernelbench":
        # Under a looser preset, also whether the kernel passes KernelBench's tolerances:
        # reduced precision is a property of the kernel worth reporting.
        strict_ok = compare_outputs(expected, output, SandboxConfig(backend=cfg.backend).tolerance_for, read=read).ok
    return {"ok": result.ok, "reason": result.reason, "max_abs_diff": result.max_abs_diff, "strict_ok": strict_ok}


class CallChecks:
    """Fills the measurement from the reference worker's results: the first failure decides."""

    def __init__(self, m: Measurement):
        self.m = m

    def record(self, kind: str, call: dict, result: dict) -> bool:
        """``call``: the run worker's report of it; ``result``: the reference worker's check,
        with the digest of the inputs it regenerated (in-place mutation: they differ)."""
        label = str(call.get("label"))
        if result.get("forged"):
            return self._violation(f"harness_tampered: the output of {label} was not handed over as the harness "
                                   f"sent it ({result['forged']})")
        if call.get("inputs_after") != result.get("inputs_given"):
            return self._violation(f"input_mutation: {label} inputs were modified in place")
        self.m.max_abs_diff = max(self.m.max_abs_diff or 0.0, float(result.get("max_abs_diff") or 0.0))
        if not result.get("ok"):
            if kind == TIMED_RUN:
                return self._violation(f"timing_output_mismatch: {label} returned other outputs than the "
                                       f"reference ({result.get('reason')}); outputs must be right in every call")
            self.m.fail(ErrorKind.MISMATCH, f"{label}: {result.get('reason')}")
            return False
        if result.get("strict_ok") is not None:
            self.m.passes_kernelbench_tolerance = bool(result["strict_ok"]) and \
                self.m.passes_kernelbench_tolerance is not False
        if kind == TIMED_RUN:
            self.m.spot_checks += 1
        else:
            self.m.trials_passed += 1
        self.m.correct = self.m.error is None
        return True

    def _violation(self, detail: str) -> bool:
        self.m.violations.append(detail)
        self.m.fail(ErrorKind.VIOLATION, detail)
        return False
