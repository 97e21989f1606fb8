"""What a worker's calls are made of: task inputs under a seed, copies of outputs, the typed
failure a worker reports. Shared by every role (and data_gen's filter workers); nothing from the
solution is imported before these are bound.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import random
import secrets
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

from .errors import TASK_ERROR
from .measurement import ErrorKind

TRACEBACK_CHARS = 3000


class WorkerFailure(Exception):
    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind, self.detail = kind, detail


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def to_device(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(x, device) for x in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


def to_cpu_copy(obj: Any) -> Any:
    """A CPU copy that later calls cannot change (outputs may alias a reused buffer). Only plain
    tensors and plain containers: copying a subclass would run the solution's code here."""
    if isinstance(obj, torch.Tensor):
        if type(obj) is not torch.Tensor:
            raise WorkerFailure(ErrorKind.MISMATCH, f"output is a {type(obj).__name__}, not a plain torch.Tensor")
        return obj.detach().to("cpu", copy=True)
    if type(obj) in (list, tuple):
        return type(obj)(to_cpu_copy(x) for x in obj)
    if type(obj) is dict:
        return {k: to_cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, dict)):
        raise WorkerFailure(ErrorKind.MISMATCH, f"output is a {type(obj).__name__}, not a plain list, tuple or dict")
    return obj


def describe_exception(exc: BaseException) -> str:
    """The exception first (what a model or a person needs), then the traceback's tail."""
    summary = f"{type(exc).__name__}: {exc}"
    trace = "".join(traceback.format_exception(exc))
    return f"{summary[:TRACEBACK_CHARS]}\n\n{trace[-TRACEBACK_CHARS:]}"


def call_task(task, fn_name: str) -> Any:
    try:
        return getattr(task, fn_name)()
    except Exception as exc:  # the task is broken: not the solution's fault
        raise WorkerFailure(TASK_ERROR, f"{fn_name}() raised {type(exc).__name__}: {exc}") from None


def check_inputs(inputs: Any, fn_name: str) -> list:
    if not isinstance(inputs, (list, tuple)):
        raise WorkerFailure(TASK_ERROR, f"{fn_name}() must return a list or tuple, got {type(inputs).__name__}")
    for i, item in enumerate(inputs):
        if fn_name == "get_inputs" and not isinstance(item, (torch.Tensor, int, float, bool)):
            raise WorkerFailure(TASK_ERROR, f"get_inputs()[{i}] is a {type(item).__name__}; "
                                            "inputs must be tensors (or plain numbers)")
    if fn_name == "get_inputs" and not any(isinstance(x, torch.Tensor) for x in inputs):
        raise WorkerFailure(TASK_ERROR, "get_inputs() returned no tensor")
    return list(inputs)


# Bound before any solution code runs: replacing torch.manual_seed, random.seed or os.urandom
# later can neither freeze the inputs nor predict seeds and spot checks.
_manual_seed, _random_seed, _urandom = torch.manual_seed, random.seed, os.urandom


def fresh_seed() -> int:
    """A per-call input seed from the OS's randomness, drawn right before it is used."""
    return int.from_bytes(_urandom(8), "little") >> 1


def chance(probability: float) -> bool:
    """True with ``probability``, from the OS's randomness (the spot checks' draw)."""
    return int.from_bytes(_urandom(7), "little") < probability * (1 << 56)


def seeded_inputs(task, seed: int, device: torch.device | None = None) -> list:
    """get_inputs() under a seed (torch's and Python's generators); made on ``device`` when given,
    so that the reference worker regenerates a run worker's inputs bit for bit."""
    _manual_seed(seed)
    _random_seed(seed)
    if device is None or device.type == "cpu":
        return check_inputs(call_task(task, "get_inputs"), "get_inputs")
    with device:
        inputs = check_inputs(call_task(task, "get_inputs"), "get_inputs")
    return to_device(inputs, device)


def same_inputs(first: list, second: list) -> bool:
    return len(first) == len(second) and all(
        torch.equal(a, b) if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) else
        (not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor) and a == b)
        for a, b in zip(first, second))


def inputs_digest(inputs: list) -> str:
    """SHA-256 of an input set: each tensor's shape, dtype and content, each number's repr. The
    judge compares the digest of the inputs as a call left them with the digest of the inputs
    the reference worker regenerated for its seed: in-place mutation, without shipping tensors.
    CPU tensors: their bytes. CUDA tensors: a fingerprint computed on the device (GBs of input
    are not copied to the host for it; see ``device_fingerprint``)."""
    h = hashlib.sha256()
    for item in inputs:
        if isinstance(item, torch.Tensor):
            h.update(repr((tuple(item.shape), str(item.dtype))).encode())
            if item.device.type == "cuda":
                h.update(device_fingerprint(item))
            else:
                h.update(memoryview(item.detach().contiguous().reshape(-1).view(torch.uint8).numpy()))
        else:
            h.update(repr(item).encode())
    return h.hexdigest()


# Odd 63-bit multipliers of the device fingerprint's mix (any fixed odd constants would do).
_MIX = (0x7F4A7C159E3779B1, 0x2545F4914F6CDD1D, 0x5851F42D4C957F2D)
# Words mixed at a time (bounds the fingerprint's device memory: about 3 x 32 MiB).
_FINGERPRINT_WORDS = 1 << 22


def secret_mix() -> tuple[int, int, int]:
    """Fresh odd multipliers for ``device_fingerprint``: a fingerprint under a mix the solution
    never sees cannot be kept by a crafted change (the fixed ``_MIX`` could be)."""
    return tuple(secrets.randbits(63) | 1 for _ in range(3))


def device_fingerprint(t: torch.Tensor, mix: tuple[int, int, int] = _MIX) -> bytes:
    """One int64 per 4M words of ``t``: each word mixed with its position (multiply, xor-shift,
    wrapping arithmetic) and summed, on the device. Any change of a word or of word order
    changes it, barring collisions; under the fixed ``_MIX`` it is not built to resist a solution
    that crafts a mutation to keep it (a mutation the reference's regenerated inputs ignore
    anyway); under a ``secret_mix`` it is."""
    data = t.detach().contiguous().reshape(-1).view(torch.uint8)
    words = data.view(torch.int32) if data.numel() % 4 == 0 else data
    sums = []
    for start in range(0, words.numel(), _FINGERPRINT_WORDS):
        x = words[start:start + _FINGERPRINT_WORDS].to(torch.int64)
        x.mul_(mix[0]).add_(torch.arange(start, start + x.numel(), device=x.device, dtype=torch.int64).mul_(mix[1]))
        x.bitwise_xor_(x >> 29).mul_(mix[2])
        sums.append(x.bitwise_xor_(x >> 32).sum())
    return torch.stack(sums).cpu().numpy().tobytes() if sums else b""
