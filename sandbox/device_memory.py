"""CUDA device memory that the run worker hands to the reference worker by file descriptor.

The driver's virtual memory API (``cuMemCreate`` with POSIX file-descriptor handles, called
through ctypes: torch has no Python binding for it) makes an allocation outside torch's caching
allocator, exportable as a file descriptor. The descriptor travels over the hand-over socket like
a memfd (SCM_RIGHTS); the receiver imports it and maps it into its own address space. Unlike
``cudaIpcGetMemHandle`` (what ``torch.multiprocessing`` uses), nothing here names the exporting
process, so it works between workers in separate PID and IPC namespaces. ``tensor`` views a
mapping as uint8 (``__cuda_array_interface__``: no copy, torch does not own the memory).
"""
from __future__ import annotations

import contextlib
import ctypes
import functools

import torch

# cuda.h: CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
# CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_ALLOC_GRANULARITY_MINIMUM, CU_MEM_ACCESS_FLAGS_PROT_READWRITE.
_PINNED, _POSIX_FD, _ON_DEVICE, _GRANULARITY_MINIMUM, _READ_WRITE = 1, 1, 1, 0, 3
# Bound before solution code runs (the module is fingerprinted with the harness).
_as_tensor = torch.as_tensor


class DeviceMemoryError(Exception):
    """A driver call failed (no VMM support, out of memory, a descriptor that is not an allocation)."""


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Properties(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _Access(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


@functools.lru_cache(maxsize=None)
def _driver() -> ctypes.CDLL:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise DeviceMemoryError(f"the CUDA driver library could not be loaded ({exc})") from None


def _call(name: str, *args) -> None:
    status = getattr(_driver(), name)(*args)
    if status:
        text = ctypes.c_char_p()
        _driver().cuGetErrorString(status, ctypes.byref(text))
        raise DeviceMemoryError(f"{name} failed: {(text.value or b'?').decode()} (CUresult {status})")


def _properties(device_index: int) -> _Properties:
    return _Properties(type=_PINNED, requestedHandleTypes=_POSIX_FD, location=_Location(_ON_DEVICE, device_index))


def _make_context_current(device_index: int) -> None:
    """Driver calls need a current context: torch's (the device's primary context)."""
    torch.cuda.init()
    context = ctypes.c_void_p()
    _call("cuCtxGetCurrent", ctypes.byref(context))
    if not context.value:
        device = ctypes.c_int()
        _call("cuDeviceGet", ctypes.byref(device), device_index)
        _call("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
        _call("cuCtxSetCurrent", context)


def granularity(device_index: int) -> int:
    """Allocation sizes are multiples of this (2 MiB on current GPUs)."""
    _make_context_current(device_index)
    size = ctypes.c_size_t()
    props = _properties(device_index)
    _call("cuMemGetAllocationGranularity", ctypes.byref(size), ctypes.byref(props), _GRANULARITY_MINIMUM)
    return size.value


class _ArrayInterface:
    def __init__(self, address: int, size: int):
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (address, False),
                                         "version": 2, "strides": None}


class DeviceBuffer:
    """``size`` bytes of one allocation mapped here; ``tensor`` views them. ``create`` makes a
    fresh allocation, ``open`` maps one another process exported; ``close`` unmaps and releases
    it (the memory is freed once every process that mapped it has released it)."""

    def __init__(self, handle: int, size: int, device_index: int):
        self.handle, self.size, self.device_index = handle, size, device_index
        self.address, self.mapped, self.tensor = 0, False, None
        try:
            address = ctypes.c_ulonglong()
            _call("cuMemAddressReserve", ctypes.byref(address), ctypes.c_size_t(size), ctypes.c_size_t(0),
                  ctypes.c_ulonglong(0), ctypes.c_ulonglong(0))
            self.address = address.value
            _call("cuMemMap", ctypes.c_ulonglong(self.address), ctypes.c_size_t(size), ctypes.c_size_t(0),
                  ctypes.c_ulonglong(handle), ctypes.c_ulonglong(0))
            self.mapped = True
            access = _Access(_Location(_ON_DEVICE, device_index), _READ_WRITE)
            _call("cuMemSetAccess", ctypes.c_ulonglong(self.address), ctypes.c_size_t(size), ctypes.byref(access),
                  ctypes.c_size_t(1))
            self.tensor = _as_tensor(_ArrayInterface(self.address, size), device=torch.device("cuda", device_index))
        except Exception:
            # From here the handle is ours to release (close does); the first error is the one
            # to report, not one of the clean-up's.
            with contextlib.suppress(Exception):
                self.close()
            raise

    @classmethod
    def create(cls, nbytes: int, device_index: int) -> "DeviceBuffer":
        """A fresh allocation of at least ``nbytes`` (rounded up to the granularity)."""
        step = granularity(device_index)
        size = max(step, -(-nbytes // step) * step)
        handle = ctypes.c_ulonglong()
        props = _properties(device_index)
        _call("cuMemCreate", ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(props), ctypes.c_ulonglong(0))
        return cls(handle.value, size, device_index)  # a failed mapping releases the handle itself

    @classmethod
    def open(cls, fd: int, size: int, device_index: int) -> "DeviceBuffer":
        """Map ``size`` bytes of the allocation behind ``fd`` (fails if the allocation is smaller)."""
        _make_context_current(device_index)
        handle = ctypes.c_ulonglong()
        _call("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD)
        return cls(handle.value, size, device_index)  # a failed mapping releases the handle itself

    def export(self) -> int:
        """A new file descriptor for the allocation (the caller closes it)."""
        fd = ctypes.c_int(-1)
        _call("cuMemExportToShareableHandle", ctypes.byref(fd), ctypes.c_ulonglong(self.handle), _POSIX_FD,
              ctypes.c_ulonglong(0))
        return fd.value

    def close(self) -> None:
        """Unmap and release (after a device-wide sync: no queued kernel may still use the range)."""
        if self.handle is None:
            return
        self.tensor = None
        torch.cuda.synchronize(self.device_index)
        if self.mapped:
            _call("cuMemUnmap", ctypes.c_ulonglong(self.address), ctypes.c_size_t(self.size))
        if self.address:
            _call("cuMemAddressFree", ctypes.c_ulonglong(self.address), ctypes.c_size_t(self.size))
        handle, self.handle = self.handle, None
        _call("cuMemRelease", ctypes.c_ulonglong(handle))


@functools.lru_cache(maxsize=None)
def unavailable(device_index: int = 0) -> str:
    """Why device buffers cannot be shared here ("" when they can): one round trip through an
    exported descriptor in this process, made once."""
    import os

    try:
        sent = DeviceBuffer.create(1, device_index)
        try:
            sent.tensor.fill_(7)
            fd = sent.export()
            try:
                received = DeviceBuffer.open(fd, sent.size, device_index)
            finally:
                os.close(fd)
            try:
                ok = bool((received.tensor == 7).all())
            finally:
                received.close()
        finally:
            sent.close()
    except Exception as exc:  # noqa: BLE001 - any failure (no libcuda: OSError; a CPU torch: AssertionError) means "not here"
        return f"{type(exc).__name__}: {exc}"
    return "" if ok else "an exported allocation read back other bytes"
