"""The judge's comparison of checked calls with the reference (verified trials and spot-checked
timed runs: one mechanism for both).

The run worker names each checked call by label, seed and the digest of its inputs as the call
left them, and writes a copy of its output; the reference worker regenerates those inputs from
the seeds (their digests) and computes the reference outputs. Everything here runs in the judge, on data loaded with
``torch.load(weights_only=True)``, so nothing the solution produced can execute code.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .compare import compare_outputs
from .config import SandboxConfig
from .measurement import ErrorKind, Measurement
from .protocol import digest

# Kinds of checked calls: verified trials fail as "mismatch", timed runs as a violation.
TRIAL, TIMED_RUN = "trial", "timed_run"


class CallChecks:
    """Fills the measurement from comparisons: the first failure decides the verdict."""

    def __init__(self, cfg: SandboxConfig, m: Measurement):
        self.cfg, self.m = cfg, m

    def load(self, record: dict, worker_dir: Path) -> dict | None:
        """The copies a record names, from the worker's own directory, if they are what the
        worker reported (size, digest, shape of the data)."""
        path = worker_dir / Path(str(record.get("path", ""))).name
        limit = self.cfg.file_size_limit_mb << 20
        try:
            if path.stat().st_size > limit:
                self.m.fail(ErrorKind.MISMATCH, f"solution outputs exceed {self.cfg.file_size_limit_mb} MiB")
                return None
            data = path.read_bytes()
        except OSError as exc:
            self.m.fail(ErrorKind.MISMATCH, f"solution outputs could not be read: {type(exc).__name__}")
            return None
        if digest(data) != record.get("sha256"):
            self._violation(f"harness_tampered: {path.name} changed after the run worker wrote it")
            return None
        try:
            loaded = torch.load(path, weights_only=True)
        except Exception as exc:  # unreadable or forged content
            self.m.fail(ErrorKind.MISMATCH, f"solution outputs could not be read: {type(exc).__name__}")
            return None
        if not (isinstance(loaded, dict) and isinstance(loaded.get("outputs"), list)):
            self.m.fail(ErrorKind.MISMATCH, "solution outputs are malformed")
            return None
        return loaded

    def compare(self, kind: str, calls: list[dict], data: dict, reference: dict) -> bool:
        """Each call's inputs as the solution left them against the inputs it was given (digests
        of their bytes: in-place mutation), then its output against the reference output of the
        same seed."""
        rows = list(zip(calls, data["outputs"], reference["outputs"], reference["inputs"]))
        if {len(calls), len(data["outputs"]), len(reference["outputs"])} != {len(rows)}:
            self.m.fail(ErrorKind.MISMATCH, f"wrong number of outputs for {len(calls)} checked calls")
            return False
        for call, output, expected, given in rows:
            label = call["label"]
            if call.get("inputs_after") != given:
                return self._violation(f"input_mutation: {label} inputs were modified in place")
            result = compare_outputs(expected, output, self.cfg.tolerance_for)
            self.m.max_abs_diff = max(self.m.max_abs_diff or 0.0, result.max_abs_diff)
            if not result.ok:
                if kind == TIMED_RUN:
                    return self._violation(f"timing_output_mismatch: {label} returned other outputs than the "
                                           f"reference ({result.reason}); outputs must be right in every call")
                self.m.fail(ErrorKind.MISMATCH, f"{label}: {result.reason}")
                return False
            self._note_strict_tolerance(expected, output)
            if kind == TIMED_RUN:
                self.m.spot_checks += 1
            else:
                self.m.trials_passed += 1
        self.m.correct = True
        return True

    def _violation(self, detail: str) -> bool:
        self.m.violations.append(detail)
        self.m.fail(ErrorKind.VIOLATION, detail)
        return False

    def _note_strict_tolerance(self, expected, output) -> None:
        """Under a looser preset, record whether the kernel would also pass KernelBench's
        tolerances: reduced precision is a property of the kernel worth reporting."""
        if self.cfg.tolerance == "kernelbench":
            return
        strict = SandboxConfig(backend=self.cfg.backend).tolerance_for
        ok = compare_outputs(expected, output, strict).ok
        self.m.passes_kernelbench_tolerance = ok and self.m.passes_kernelbench_tolerance is not False
