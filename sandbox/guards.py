"""Guards applied in the run worker around every call of the solution's forward.

Each guard turns a way of gaming the reward into a named violation (reward -1):
- torch operators executing inside ``ModelNew.forward`` (or on any other thread while the
  solution is judged), seen by a RecordFunction callback in the dispatcher (``sandbox.recorder``),
  so calls from Python (functional, tensor methods, module forwards, ``torch.*``) and from C++
  (``at::`` compute inside an extension) are caught alike, in verified and timed calls alike,
  while a docstring that mentions them is not;
- shared libraries the solution brought in beyond the allowed ones (cuBLAS, cuDNN by default);
- global backend flags (TF32, cuDNN, matmul precision) changed by the solution;
- work still running on the CPU after ``forward`` returned (threads left computing).

What the guards let through: allocation, view/shape metadata and data movement (copies,
``.contiguous()``), i.e. what a kernel wrapper needs. See docs/sandbox.md for the threat model.
"""
from __future__ import annotations

import fnmatch
import os
import subprocess
import threading
import sysconfig
import time
from pathlib import Path
from typing import Iterable

import torch

from .recorder import OTHER_THREAD, OpRecorder

# aten operators a kernel wrapper may run: allocation and initialisation of outputs ...
ALLOCATION_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "zero_", "fill_",
}
# ... views and metadata (no arithmetic) ...
VIEW_OPS = {
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "t", "transpose", "permute",
    "expand", "expand_as", "squeeze", "unsqueeze", "select", "slice", "narrow", "unflatten", "flatten",
    "split", "split_with_sizes", "chunk", "unbind", "alias", "detach", "view_as", "movedim",
    "diagonal", "view_as_real", "view_as_complex", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "is_contiguous", "is_same_size", "lift_fresh", "record_stream",
    # conjugate / negative bits: no arithmetic unless a bit is set, then a copy (reading .tolist())
    "resolve_conj", "resolve_neg",
}
# ... and data movement (contiguous copies, device/dtype moves, reading a scalar).
MOVEMENT_OPS = {"clone", "copy_", "_to_copy", "to", "contiguous", "_local_scalar_dense", "item"}
ALLOWED_OPS = frozenset(ALLOCATION_OPS | VIEW_OPS | MOVEMENT_OPS)

# Libraries that are infrastructure, not someone else's kernels (runtime, compiler support, libc).
INFRASTRUCTURE_LIBRARIES = (
    "libcudart*", "libcuda.so*", "libgomp*", "libomp*", "libiomp*", "libstdc++*", "libgcc_s*",
    "libc.so*", "libm.so*", "libdl*", "libpthread*", "librt*", "ld-linux*", "libnvToolsExt*",
    "libutil*",
    # NVIDIA driver and toolchain user-space libraries torch loads lazily (NVML for device
    # queries, the PTX JIT, CUPTI for the profiler) or that compile a solution's own kernels.
    "libnvidia-*", "libcupti*", "libnvrtc*", "libnvJitLink*",
)
# Bound at import (before solution code): replacing time.process_time later cannot hide work.
_process_time, _perf_counter, _sleep = time.process_time, time.perf_counter, time.sleep
# Bound before any solution code runs (it could point the guard at its own spinning thread).
_native_id = threading.get_native_id
# CPU seconds per wall second, after forward returned, above which work is still running.
BACKGROUND_CPU_FRACTION = 0.5
BACKGROUND_WINDOW_S = 0.05


# Namespaces whose functions are ATen kernels called directly, bypassing the dispatcher.
DIRECT_KERNEL_NAMESPACES = ("at::cpu::", "at::cuda::blas::", "at::native::", "at::compositeexplicitautograd::",
                            "at::compositeimplicitautograd::", "at::compositeexplicitautogradnonfunctional::")
# Functions that switch the operator recorder off or reach operators around it (a typed
# ``c10::Dispatcher`` handle; its inline ``call`` can be compiled without RecordFunction).
RECORDER_BYPASS_SYMBOLS = (
    "at::enableRecordFunction", "at::RecordFunctionGuard", "at::DisableRecordFunctionGuard",
    "at::clearCallbacks", "at::clearGlobalCallbacks", "at::clearThreadLocalCallbacks", "at::removeCallback",
    "at::disableCallback", "at::set_record_function_tls_", "at::ObservedOperators", "at::ThreadLocalStateGuard",
    "at::ThreadLocalState::setThreadLocalState", "c10::Dispatcher::findSchema", "c10::Dispatcher::findOp",
)
MAX_SYMBOLS_REPORTED = 5


def _op_allowed(struct_name: str) -> bool:
    """``at::_ops::<op>_<overload>`` struct names: allowed when the op part is an allowed op."""
    return any(struct_name == op or struct_name.startswith(op + "_") for op in ALLOWED_OPS)


def forbidden_aten_symbols(library: str) -> list[str]:
    """Undefined (imported) ATen compute symbols of a shared object, demangled, via ``nm``."""
    try:
        listing = subprocess.run(["nm", "-D", "-C", "--undefined-only", library], capture_output=True,
                                 text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []  # no binutils: the dispatcher-level recorders remain
    found = []
    for line in listing.splitlines():
        symbol = line.split(None, 1)[-1].strip()
        if symbol.startswith(DIRECT_KERNEL_NAMESPACES + RECORDER_BYPASS_SYMBOLS):
            found.append(symbol)
        elif symbol.startswith("at::_ops::"):
            struct = symbol[len("at::_ops::"):].split("::", 1)[0]
            if not _op_allowed(struct):
                found.append(symbol)
    return sorted(set(found))[:MAX_SYMBOLS_REPORTED]


def loaded_libraries() -> set[str]:
    """Paths of the shared objects mapped into this process."""
    paths = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) == 6 and ".so" in parts[5]:
                    paths.add(parts[5].strip())
    except OSError:  # no /proc: the library check is skipped
        pass
    return paths


def backend_flags() -> dict[str, object]:
    """Global switches that trade accuracy or determinism for speed."""
    return {
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.backends.cudnn.enabled": torch.backends.cudnn.enabled,
        "torch.backends.cudnn.benchmark": torch.backends.cudnn.benchmark,
        "torch.backends.cudnn.deterministic": torch.backends.cudnn.deterministic,
        "torch.float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


class ForwardGuard:
    """Baselines taken before the solution is imported; checks applied around its forwards."""

    def __init__(self, allowed_libraries: Iterable[str], own_dirs: Iterable[str], recorder_path: str):
        # Loaded first: the recorder's own library is part of the baseline, not the solution's.
        self.recorder = OpRecorder(recorder_path, ALLOWED_OPS)
        trap_recorder_switches(self.recorder)
        self.allowed_patterns = list(INFRASTRUCTURE_LIBRARIES) + [
            f"lib{name}*" if not name.startswith("lib") else f"{name}*" for name in allowed_libraries]
        self.own_dirs = [str(Path(d).resolve()) for d in own_dirs if d]
        self.stdlib_dirs = {str(Path(sysconfig.get_paths()[k]).resolve()) for k in ("stdlib", "platstdlib")}
        self.libraries_before = loaded_libraries()
        self.flags_before = backend_flags()
        self.own_modules: list[str] = []

    def arm(self) -> None:
        """Count operators from now on (before the first call; the caller's thread is the harness's)."""
        self.recorder.arm()

    def enter_call(self) -> None:
        """A call of forward begins: operators on this thread count until ``leave_call``, so the
        copy of its output is watched too."""
        self.recorder.in_call(True)

    def leave_call(self) -> None:
        self.recorder.in_call(False)

    def violations(self) -> list[str]:
        found = self._recorded()
        found += self._linked_aten()
        found += self._library_violations()
        found += self._flag_violations()
        found += self._background_work()
        return found

    def _recorded(self) -> list[str]:
        """Operators (and trapped switches) the recorder saw, and whether it still sees any."""
        found = []
        for what, n in sorted(self.recorder.findings().items()):
            if ": " in what:  # a trap's note, already a violation
                found.append(f"{what} ({n}x)")
            elif what.endswith(OTHER_THREAD):
                op = what[:-len(OTHER_THREAD)].replace("::", ".")
                found.append(f"torch_op: {op} ran on another thread while the solution was judged ({n}x); "
                             "kernels must do the work")
            else:
                found.append(f"torch_op: {what.replace('::', '.')} ran inside forward ({n}x); kernels must do the work")
        if self.recorder.armed and not self.recorder.alive():
            found.append("harness_tampered: the operator recorder no longer sees operators (RecordFunction "
                         "switched off or its callbacks removed)")
        return found

    def _linked_aten(self) -> list[str]:
        """ATen compute the solution's own modules link to. Calls such as ``at::cpu::add`` run
        ATen kernels without the dispatcher, so neither recorder sees them; the symbol table does."""
        found = []
        for path in sorted(loaded_libraries() - self.libraries_before):
            if any(str(Path(path).resolve()).startswith(d + os.sep) for d in self.own_dirs):
                found += [f"linked_aten: {os.path.basename(path)} calls {symbol}"
                          for symbol in forbidden_aten_symbols(path)]
        return found

    def _library_violations(self) -> list[str]:
        found = []
        for path in sorted(loaded_libraries() - self.libraries_before):
            if self._is_own_or_stdlib(str(Path(path).resolve())):
                continue
            name = os.path.basename(path)
            if not any(fnmatch.fnmatch(name, pattern) for pattern in self.allowed_patterns):
                found.append(f"library: {name} was loaded by the solution and is not allowed")
        return found

    def _is_own_or_stdlib(self, path: str) -> bool:
        return any(path.startswith(d + os.sep) for d in [*self.own_dirs, *self.stdlib_dirs])

    def _flag_violations(self) -> list[str]:
        after = backend_flags()
        return [f"backend_flag: {name} changed from {self.flags_before[name]!r} to {value!r}"
                for name, value in after.items() if value != self.flags_before[name]]

    @staticmethod
    def _background_work() -> list[str]:
        start_demand, start_wall = _cpu_demand_s(), _perf_counter()
        _sleep(BACKGROUND_WINDOW_S)
        busy = (_cpu_demand_s() - start_demand) / (_perf_counter() - start_wall)
        if busy > BACKGROUND_CPU_FRACTION:
            return [f"background_work: threads wanted {busy:.0%} of a CPU after forward returned"]
        return []


def _cpu_demand_s() -> float:
    """Seconds this process's threads ran or waited to run (schedstat), so that a busy host,
    which shrinks the share a spinning thread gets, does not hide it; CPU time where the kernel
    keeps no schedstats."""
    total_ns, found = 0, False
    # The calling thread only sleeps through the window; its wake-up wait on a busy host is not
    # background work (counted, it gave false violations on a loaded 2-core machine).
    own = str(_native_id())
    try:
        for stat in Path("/proc/self/task").glob("*/schedstat"):
            if stat.parent.name == own:
                continue
            run_ns, wait_ns = stat.read_text().split()[:2]
            total_ns += int(run_ns) + int(wait_ns)
            found = True
    except (OSError, ValueError):
        found = False
    return total_ns / 1e9 if found else _process_time()


def trap_recorder_switches(recorder: OpRecorder) -> None:
    """Replace the Python-level ways around RecordFunction before solution code runs: switching it
    off (``_enable_record_function``), removing its callbacks (``_clear_callbacks``), and
    redispatching an operator below the dispatcher's entry point, where no RecordFunction runs
    (``OpOverload.redispatch``). Switches become a violation and do nothing; a redispatch of
    one of torch's operators is recorded like the operator itself (``torch.library.custom_op``
    redispatches the solution's own operators, which stay allowed)."""
    def switched_off(*args, **kwargs) -> None:
        recorder.note("harness_tampered: the solution tried to switch the operator recorder off "
                      "(torch.autograd._enable_record_function / _clear_callbacks)", always=True)

    for owner in (torch._C._autograd, torch.autograd):
        for name in ("_enable_record_function", "_clear_callbacks"):
            if hasattr(owner, name):
                setattr(owner, name, switched_off)
    handle_type = torch._C._DispatchOperatorHandle
    redispatch = handle_type.redispatch_boxed

    def redispatch_boxed(handle, keyset, *args, **kwargs):
        name = handle.schema().name
        if name in recorder.watched:
            recorder.note(name)
        return redispatch(handle, keyset, *args, **kwargs)

    handle_type.redispatch_boxed = redispatch_boxed


# --------------------------------------------------------------------------- timing inputs
# The run worker draws fresh timing inputs from the task's get_inputs(), in the same process as
# the solution, so the solution could shrink them (patch get_inputs, the task's size constants
# or torch's random functions) and look fast. These checks make that a violation.

RANDOM_FACTORIES = ("randn", "rand", "randint", "randn_like", "rand_like", "randint_like",
                    "randperm", "normal", "empty", "zeros", "ones", "full", "tensor")
SIMPLE_TYPES = (int, float, bool, str, tuple, type(None))


def task_fingerprint(task) -> dict[str, object]:
    """What get_inputs() depends on: its code, the task's simple module-level values, and the
    torch factories it calls."""
    fp: dict[str, object] = {f"torch.{name}": id(getattr(torch, name)) for name in RANDOM_FACTORIES}
    fp.update({f"torch.Tensor.{name}": id(getattr(torch.Tensor, name)) for name in ("normal_", "uniform_", "random_")})
    get_inputs = getattr(task, "get_inputs", None)
    fp["task.get_inputs"] = id(get_inputs)
    fp["task.get_inputs.__code__"] = id(getattr(get_inputs, "__code__", None))
    for name, value in vars(task).items():
        if not name.startswith("__") and isinstance(value, SIMPLE_TYPES):
            fp[f"task.{name}"] = repr(value)
    return fp


def task_tampering(before: dict[str, object], task) -> list[str]:
    now = task_fingerprint(task)
    return [f"task_tampered: {name} changed after the solution was imported"
            for name, value in before.items() if now.get(name) != value]


def input_layout(inputs: list) -> list[tuple]:
    return [(tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else (type(x).__name__, x) for x in inputs]


def check_timing_inputs(inputs: list, expected_layout: list[tuple]) -> str:
    """Empty if a timing input set has the trial inputs' shapes and dtypes, else the difference."""
    layout = input_layout(inputs)
    if layout != expected_layout:
        return f"timing inputs {layout} differ from the task's {expected_layout}"
    return ""
