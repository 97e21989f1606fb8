"""Filter worker: runs ONE synthesized task in its own process and reports verdicts as JSON.

    python -m data_gen.filter_worker JOB.json

The pipeline (data_gen.filter) writes JOB.json, starts this module in a subprocess with a
timeout (in PID and network namespaces when root) and reads ``result_path``. The task is
untrusted: it runs only here, never in the pipeline's process. The result file is rewritten
after every rubric, so a worker killed on timeout still says how far it got.

Rubrics, in order (cheapest first; the expensive torch.compile last):
  eager          Model(*get_init_inputs()) builds and forward runs on get_inputs()
  deterministic  the same inputs give the same outputs (a third call after other inputs)
  nontrivial     outputs are finite, not constant, and differ between two input sets
  runtime        eager median runtime inside [window_ms] (sandbox timing method)
  compile        torch.compile(model) runs and matches eager
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

from sandbox.config import TimingConfig
from sandbox.timing import measure
from sandbox.inputs import load_module, seeded_inputs
from sandbox.worker_common import apply_limits, device_name

RUBRICS = ("eager", "deterministic", "nontrivial", "runtime", "compile")
DETAIL_CHARS = 600


class RubricFailure(Exception):
    """The candidate fails the current rubric; the message is the reported reason."""


class OutOfDeviceMemory(Exception):
    """The device, shared with concurrent candidates, ran out of memory: the load's fault, not
    the candidate's, so no verdict; the pipeline judges it again on resume."""


# The worker error of a candidate that ran out of device memory starts with this.
OUT_OF_DEVICE_MEMORY = "out of device memory"


def raise_if_out_of_memory(exc: BaseException) -> None:
    # CUDA reports it as OutOfMemoryError from the allocator, AcceleratorError from a kernel or
    # context, or wrapped by get_inputs' harness: the text is what they share.
    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc):
        raise OutOfDeviceMemory(short(exc)) from exc


def write_json(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= DETAIL_CHARS else text[:DETAIL_CHARS] + "..."


def flat_tensors(out: Any) -> list[torch.Tensor]:
    """Output tensors in order; anything that is not a tensor (or a tuple/list of them) fails."""
    if isinstance(out, torch.Tensor):
        return [out.detach()]
    if isinstance(out, (tuple, list)) and out:
        return [t for item in out for t in flat_tensors(item)]
    raise RubricFailure(f"forward returned {type(out).__name__}, not a tensor or a tuple of tensors")


# Elements compared at a time: float64 copies of whole GB-sized outputs, in 16 concurrent
# workers, exhausted host memory (the kernel's OOM killer ended 32 of 209 candidates on an H200).
COMPARE_CHUNK = 1 << 24


def chunks(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return t.reshape(-1).split(COMPARE_CHUNK)


def close(a: list[torch.Tensor], b: list[torch.Tensor], atol: float, rtol: float) -> bool:
    if len(a) != len(b):
        return False
    return all(x.shape == y.shape and x.dtype == y.dtype
               and all(torch.allclose(xc.double(), yc.double(), atol=atol, rtol=rtol, equal_nan=True)
                       for xc, yc in zip(chunks(x), chunks(y)))
               for x, y in zip(a, b))


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    if not a or len(a) != len(b):
        return float("inf")
    return max([(xc.double() - yc.double()).abs().nan_to_num(0.0).max().item()
                for x, y in zip(a, b) for xc, yc in zip(chunks(x), chunks(y))], default=0.0)


class Candidate:
    """The task module, its model on the device, and input/output helpers."""

    def __init__(self, job: dict):
        self.job = job
        self.device = torch.device("cuda", 0) if job["device"] == "cuda" else torch.device("cpu")
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("device cuda requested but no CUDA device is visible")
        self.task = load_module(Path(job["task_path"]), "model")
        init_inputs = self.task.get_init_inputs()
        torch.manual_seed(job["init_seed"])
        # Parameters are drawn on the device: GPU-sized weights took seconds on one CPU thread.
        with self.device:
            self.model = self.task.Model(*init_inputs).to(self.device)

    def inputs(self, seed: int) -> list:
        return seeded_inputs(self.task, seed, self.device)

    def run(self, fn: Callable, seed: int) -> list[torch.Tensor]:
        inputs = self.inputs(seed)
        # get_inputs ran under a fixed seed; without a fresh one every forward would replay the
        # same random stream and dropout or torch.rand in forward would look deterministic.
        torch.seed()
        with torch.no_grad():
            # Copies stay on the device (host memory is the scarcer one with many workers); a
            # model may hand out the same buffer on every call, hence the copy.
            outs = [t.clone() for t in flat_tensors(fn(*inputs))]
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return outs


class Filter:
    def __init__(self, job: dict):
        self.job = job
        self.result: dict[str, Any] = {"verdicts": {}, "device": "", "eager_ms": None, "compile_ms": None,
                                       "output_shapes": None, "stage_s": {}}
        self.path = Path(job["result_path"])
        self.cand: Candidate | None = None
        self.outputs: dict[str, list[torch.Tensor]] = {}

    def verdict(self, rubric: str, passed: bool | None, reason: str = "") -> None:
        self.result["verdicts"][rubric] = {"passed": passed, "reason": reason}
        write_json(self.path, self.result)

    def run(self) -> None:
        write_json(self.path, self.result)
        failed = False
        for rubric in RUBRICS:
            eager_ok = rubric == "eager" or self.result["verdicts"]["eager"]["passed"]
            if not eager_ok or (failed and self.job["stop_at_first_failure"]):
                self.verdict(rubric, None, "not run: an earlier rubric failed")
                continue
            self.result["stage"] = rubric
            write_json(self.path, self.result)  # a kill from here on is this rubric's failure
            start = time.perf_counter()
            try:
                getattr(self, f"check_{rubric}")()
                self.verdict(rubric, True)
            except RubricFailure as exc:
                failed = True
                self.verdict(rubric, False, str(exc))
            except Exception as exc:  # the task's code raised: that is this rubric's failure
                raise_if_out_of_memory(exc)
                failed = True
                self.verdict(rubric, False, short(exc))
            self.result["stage_s"][rubric] = round(time.perf_counter() - start, 3)
        self.result["stage"] = "done"
        write_json(self.path, self.result)

    def check_eager(self) -> None:
        try:
            self.cand = Candidate(self.job)
        except Exception as exc:
            raise_if_out_of_memory(exc)
            raise RubricFailure(f"building Model failed: {short(exc)}") from None
        self.result["device"] = device_name(self.cand.device)
        seed_a, seed_b = self.job["seeds"]
        try:
            self.outputs["a"] = self.cand.run(self.cand.model, seed_a)
            self.outputs["b"] = self.cand.run(self.cand.model, seed_b)
            self.outputs["a_again"] = self.cand.run(self.cand.model, seed_a)
        except RubricFailure:
            raise
        except Exception as exc:
            raise_if_out_of_memory(exc)
            raise RubricFailure(f"forward failed: {short(exc)}") from None
        self.result["output_shapes"] = [list(t.shape) for t in self.outputs["a"]]

    def check_deterministic(self) -> None:
        tol = self.job["tolerances"]["deterministic"]
        a, again = self.outputs["a"], self.outputs["a_again"]
        if not close(a, again, tol["atol"], tol["rtol"]):
            raise RubricFailure(f"same inputs gave different outputs (max abs diff {max_diff(a, again):.3g}; "
                                "random ops in forward, dropout in training mode, or state kept between calls)")

    def check_nontrivial(self) -> None:
        tol = self.job["tolerances"]["distinct"]
        a, b = self.outputs["a"], self.outputs["b"]
        for i, t in enumerate(a):
            if t.is_floating_point() and not torch.isfinite(t).all():
                raise RubricFailure(f"output {i} contains NaN or Inf")
            if t.numel() > 1 and t.is_floating_point() and (t.max() - t.min()).item() <= tol["atol"]:
                raise RubricFailure(f"output {i} is constant (all {t.numel()} elements within {tol['atol']:g})")
        for i, (x, y) in enumerate(zip(a, b)):
            if close([x], [y], tol["atol"], tol["rtol"]):
                raise RubricFailure(f"output {i} is numerically indistinguishable for different inputs "
                                    f"(max abs diff {max_diff([x], [y]):.3g} within atol=rtol={tol['atol']:g})")

    def check_runtime(self) -> None:
        ms = self.time(self.cand.model)
        self.result["eager_ms"] = ms
        lo, hi = self.job["window_ms"]
        if not lo <= ms <= hi:
            raise RubricFailure(f"eager runtime {ms:.3g} ms outside [{lo:g}, {hi:g}] ms")

    def check_compile(self) -> None:
        opts = self.job["compile"]
        try:
            compiled = torch.compile(self.cand.model, backend=opts["backend"], mode=opts.get("mode") or None)
            out = self.cand.run(compiled, self.job["seeds"][0])
        except Exception as exc:
            raise_if_out_of_memory(exc)
            raise RubricFailure(f"torch.compile failed: {short(exc)}") from None
        tol = self.job["tolerances"]["compile"]
        if not close(out, self.outputs["a"], tol["atol"], tol["rtol"]):
            raise RubricFailure(f"compiled output differs from eager (max abs diff "
                                f"{max_diff(out, self.outputs['a']):.3g}, atol=rtol={tol['atol']:g})")
        if self.job["time_compiled"]:
            self.result["compile_ms"] = self.time(compiled)

    def time(self, fn: Callable) -> float:
        """Median runtime in ms by the sandbox's method, holding the device's timing lock so that
        concurrent candidates on one device do not time each other's work."""
        cfg = TimingConfig(**self.job["timing"])
        base = self.job["seeds"][1] + 1000
        with timing_lock(self.job.get("timing_lock", "")):
            samples = measure(lambda inp: fn(*inp), lambda i: self.cand.inputs(base + i), cfg, self.cand.device)
        samples.sort()
        return round(samples[len(samples) // 2] / 1e3, 5)


@contextlib.contextmanager
def timing_lock(path: str):
    if not path:
        yield
        return
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m data_gen.filter_worker JOB.json", file=sys.stderr)
        return 2
    job = json.loads(Path(argv[0]).read_text())
    apply_limits(job)
    torch.set_num_threads(job["timing"].get("cpu_threads", 1))
    try:
        Filter(job).run()
    except OutOfDeviceMemory as exc:
        write_json(Path(job["result_path"]).with_name("worker_error.json"),
                   {"error": f"{OUT_OF_DEVICE_MEMORY}, shared with concurrent candidates: {str(exc)[:160]}"})
        return 1
    except Exception:  # a harness bug, not a verdict: the parent reports it as such
        write_json(Path(job["result_path"]).with_name("worker_error.json"), {"error": traceback.format_exc()[-3000:]})
        return 1
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
