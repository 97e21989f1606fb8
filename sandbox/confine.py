"""Confinement of solution code when the sandbox runs as root.

A worker started by the judge as root already lives in its own PID, mount and network
namespaces (``unshare``). Before it runs any solution code it calls ``confine``, which

1. makes every mount in its private mount namespace read-only, except the few directories the
   evaluation must write (its own worker directory, a private temporary directory, the
   solution's extension build directory) and a fresh private ``/dev/shm``;
2. drops every capability for good (bounding set, ambient set, ``no_new_privs``, and the
   securebits that stop root from regaining them on exec).

Without ``CAP_SYS_ADMIN`` the solution cannot remount anything writable again, so the project,
the task files, the reference data and the shared caches are out of its reach, although it
still runs as uid 0 (the interpreter lives under /root, mode 700, which another uid could not
even start from). Mount changes stay inside the worker's namespace; the host never sees them.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
# Per-mount options that a bind remount must repeat or the kernel may refuse or drop them.
KEPT_OPTIONS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": 0x400,
                "nodiratime": 0x800, "relatime": 0x200000, "strictatime": 0x1000000}

PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS = 24, 28, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
# NOROOT(+locked), NO_SETUID_FIXUP(+locked), KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE(+locked):
# uid 0 gains no capabilities from exec'ing anything, ever again.
SECUREBITS_LOCKED_DOWN = 0x1 | 0x2 | 0x4 | 0x8 | 0x20 | 0x40 | 0x80
LINUX_CAPABILITY_VERSION_3 = 0x20080522
# Size of the private /dev/shm (POSIX shared memory of the solution only).
SHM_SIZE = "256m"


class ConfinementError(RuntimeError):
    """Confinement could not be completed: solution code must not run."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise ConfinementError(f"{what}: {os.strerror(err)}")


def mounts() -> list[tuple[str, set[str]]]:
    """(mount point, per-mount options) of every mount visible to this process."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        # Mount points escape blanks as octal (\040); options are the sixth field.
        point = fields[4].encode().decode("unicode_escape")
        found.append((point, set(fields[5].split(","))))
    return found


def confine(writable: list[str]) -> None:
    """Read-only filesystem except ``writable``, then no capabilities. Raises ConfinementError."""
    libc = _libc()
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making mounts private")
    existing = mounts()
    for path in writable:
        Path(path).mkdir(parents=True, exist_ok=True)
        _check(libc.mount(path.encode(), path.encode(), None, MS_BIND | MS_REC, None), f"binding {path}")
    for point, options in existing:
        if "ro" in options:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for name, bit in KEPT_OPTIONS.items():
            flags |= bit if name in options else 0
        _check(libc.mount(None, point.encode(), None, flags, None), f"remounting {point} read-only")
    if Path("/dev/shm").is_dir():
        _check(libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV,
                          f"size={SHM_SIZE},mode=1777".encode()), "mounting a private /dev/shm")
    # The working directory was entered before the binds: enter it again, through them.
    os.chdir(os.getcwd())
    drop_capabilities(libc)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities(libc: ctypes.CDLL | None = None) -> None:
    """Empty bounding, ambient, effective, permitted and inheritable sets; locked."""
    libc = libc or _libc()
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    last_cap = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "setting no_new_privs")
    _check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing ambient capabilities")
    for cap in range(last_cap + 1):
        _check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"dropping capability {cap}")
    _check(libc.prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED_DOWN, 0, 0, 0), "locking securebits")
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(libc.capset(ctypes.byref(header), data), "clearing capabilities")
    if effective_capabilities() != 0:
        raise ConfinementError("capabilities remain after dropping them")


def effective_capabilities() -> int:
    """This process's effective capability mask (from /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    raise ConfinementError("no CapEff line in /proc/self/status")
