"""Guards applied in the run worker around the solution's verified forward calls.

Each guard turns a way of gaming the reward into a named violation (reward -1):
- torch operators executing inside ``ModelNew.forward``, seen at the dispatcher level, so calls
  from Python (functional, tensor methods, module forwards, ``torch.*``) and from C++ (``at::``
  compute inside an extension) are caught alike, while a docstring that mentions them is not;
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
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

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


class TorchOpRecorder(TorchDispatchMode):
    """Records every aten operator dispatched while active, from Python or C++."""

    def __init__(self):
        super().__init__()
        self.forbidden: Counter[str] = Counter()

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Otherwise torch wraps __torch_dispatch__ in torch._disable_dynamo, whose first call
        # imports torch._dynamo: one second of every evaluation, for a compiler never used here.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ not in ALLOWED_OPS:
            self.forbidden[str(func)] += 1
        return func(*args, **(kwargs or {}))


# Namespaces whose functions are ATen kernels called directly, bypassing the dispatcher.
DIRECT_KERNEL_NAMESPACES = ("at::cpu::", "at::cuda::blas::", "at::native::", "at::compositeexplicitautograd::",
                            "at::compositeimplicitautograd::", "at::compositeexplicitautogradnonfunctional::")
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
        if symbol.startswith(DIRECT_KERNEL_NAMESPACES):
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

    def __init__(self, allowed_libraries: Iterable[str], own_dirs: Iterable[str]):
        self.allowed_patterns = list(INFRASTRUCTURE_LIBRARIES) + [
            f"lib{name}*" if not name.startswith("lib") else f"{name}*" for name in allowed_libraries]
        self.own_dirs = [str(Path(d).resolve()) for d in own_dirs if d]
        self.stdlib_dirs = {str(Path(sysconfig.get_paths()[k]).resolve()) for k in ("stdlib", "platstdlib")}
        self.libraries_before = loaded_libraries()
        self.flags_before = backend_flags()
        self.ops: Counter[str] = Counter()
        self.profiled_ops: Counter[str] = Counter()
        self.own_modules: list[str] = []

    @contextmanager
    def watch(self) -> Iterator[None]:
        """Two independent recorders: the dispatch mode sees ops from Python and C++; the
        profiler's RecordFunction hooks still see them when forward switches dispatch modes off."""
        recorder = TorchOpRecorder()
        # The legacy (CPU-only) profiler: Kineto's first start costs ~1 s on CPU and several on
        # a GPU (CUPTI), per evaluation; RecordFunction events are all this needs.
        with torch.autograd.profiler.profile(use_kineto=False) as profiled:
            with recorder:
                yield
        self.ops.update(recorder.forbidden)
        for event in profiled.function_events:
            op = event.name[len("aten::"):] if event.name.startswith("aten::") else None
            if op is not None and op not in ALLOWED_OPS:
                self.profiled_ops[f"aten.{op}"] += 1

    def violations(self) -> list[str]:
        found = [f"torch_op: {op} ran inside forward ({n}x); kernels must do the work"
                 for op, n in sorted(self.ops.items()) if n]
        seen = {op.rsplit(".", 1)[0] for op, n in self.ops.items() if n}  # "aten.add.Tensor" -> "aten.add"
        found += [f"torch_op: {op} ran inside forward ({n}x, with dispatch modes switched off)"
                  for op, n in sorted(self.profiled_ops.items()) if op not in seen]
        found += self._linked_aten()
        found += self._library_violations()
        found += self._flag_violations()
        found += self._background_work()
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
