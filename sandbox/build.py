"""Workspace builds: compile each translation unit once per content, link an extension module.

The expensive part of a torch extension is compiling files that include ``torch/extension.h``
(the fixed ``binding.cpp`` and the ``*_binding.cpp`` wrappers). Kernel files (``*.cu`` with
``extern "C"`` launchers) include no torch headers and compile in seconds. Objects are cached
by a hash of (source, every workspace header, compiler identity, flags), so a kernel-only edit
recompiles one file and relinks. Files that start by including torch's extension header compile
against a precompiled copy of it (sandbox/pch.py), about half their time. Runs inside a build
worker process, never in the judge.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .errors import CompileError
from .files import replaced_atomically
from .pch import HeaderUse, TorchHeader
from .solution import HEADER_SUFFIXES, TEMPLATE_DIR

MODULE_NAME = "cuda_extension"
# Compiler output kept per failed file; enough for every error line of a typical failure.
MAX_COMPILER_OUTPUT = 20_000


# Diagnostic lines shown first in a compile error; the full output follows them.
MAX_ERROR_LINES = 25
# gcc/clang/nvcc diagnostics ("x.cu(3): error: ...", "a.cpp:1:2: error: ...") and linker failures.
COMPILER_DIAGNOSTIC = re.compile(r"error:|undefined reference|fatal error|error : ")


def summarize_compiler_output(text: str) -> str:
    """Put the compiler's error lines first: the command lines before them are long and useless."""
    lines = text.splitlines()
    errors = [ln.strip() for ln in lines if COMPILER_DIAGNOSTIC.search(ln)]
    head = "\n".join(errors[:MAX_ERROR_LINES]) or (lines[0] if lines else "build failed")
    return f"{head}\n\n--- full compiler output (tail) ---\n{text[-MAX_COMPILER_OUTPUT:]}"


@dataclass(frozen=True)
class Toolchain:
    """Compilers and flags for one backend; its ``identity`` enters every cache key."""

    backend: str
    cxx: str
    nvcc: str | None
    arch: str | None                      # e.g. "9.0"
    cxx_flags: tuple[str, ...]
    nvcc_flags: tuple[str, ...]
    include_dirs: tuple[str, ...]
    link_flags: tuple[str, ...]
    identity: str = field(default="")


def std_flag() -> str:
    """The C++ standard torch's own extension builder uses for this torch version."""
    import torch

    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    return "-std=c++20" if (major, minor) >= (2, 12) else "-std=c++17"


@functools.lru_cache(maxsize=None)
def _tool_version(exe: str) -> str:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CompileError(f"compiler {exe!r} is not usable: {exc}") from None
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else exe


def make_toolchain(backend: str, arch: str | None, cxx_flags: tuple[str, ...],
                   nvcc_flags: tuple[str, ...]) -> Toolchain:
    import torch
    import torch.utils.cpp_extension as ce

    cxx = os.environ.get("CXX", "c++")
    abi = [f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    includes = list(ce.include_paths("cuda" if backend == "cuda" else "cpu"))
    includes.append(sysconfig.get_paths()["include"])
    lib_dirs = ce.library_paths("cuda" if backend == "cuda" else "cpu")
    libs = ["-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python"]
    nvcc = None
    if backend == "cuda":
        nvcc = shutil.which("nvcc") or (os.path.join(ce.CUDA_HOME, "bin", "nvcc") if ce.CUDA_HOME else None)
        if not nvcc or not os.path.exists(nvcc):
            raise CompileError("nvcc not found: install the CUDA toolkit or set CUDA_HOME")
        if not arch:
            raise CompileError("no CUDA arch: no visible GPU to read it from and none configured")
        libs += ["-lc10_cuda", "-ltorch_cuda", "-lcudart", "-lcublas"]
    link = [f"-L{d}" for d in lib_dirs] + [f"-Wl,-rpath,{d}" for d in lib_dirs] + libs + ["-fopenmp"]
    identity = json.dumps([backend, _tool_version(cxx), _tool_version(nvcc) if nvcc else None, arch,
                           torch.__version__, cxx_flags, nvcc_flags, abi, std_flag()])
    return Toolchain(backend, cxx, nvcc, arch, tuple(cxx_flags) + tuple(abi), tuple(nvcc_flags),
                     tuple(includes), tuple(link), hashlib.sha256(identity.encode()).hexdigest())


@dataclass
class BuildReport:
    module_path: Path
    compiled: list[str]       # files compiled in this build
    reused: list[str]         # files whose objects came from the cache
    seconds: float
    precompiled: list[str] = field(default_factory=list)  # compiled files that used the precompiled torch header
    torch_header: str = ""    # why no file could use it ("" when one did or none needed it)


def _compile_command(tc: Toolchain, src: Path, obj: Path, include_dirs: list[str],
                     extra: tuple[str, ...] = ()) -> list[str]:
    """The command compiling ``src`` (a ``.h`` into a precompiled header) to ``obj``."""
    import torch.utils.cpp_extension as ce

    incs = [f"-I{d}" for d in include_dirs] + [x for d in tc.include_dirs for x in ("-isystem", d)]
    if src.suffix == ".cu":
        gencode = tc.arch.replace(".", "")
        return [tc.nvcc, "-c", str(src), "-o", str(obj), std_flag(), "-Xcompiler", "-fPIC",
                f"-gencode=arch=compute_{gencode},code=sm_{gencode}", *ce.COMMON_NVCC_FLAGS,
                *tc.nvcc_flags, *incs]
    defines = [f"-DTORCH_EXTENSION_NAME={MODULE_NAME}", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    language = ["-x", "c++-header"] if src.suffix == ".h" else []
    return [tc.cxx, *extra, *language, "-c", str(src), "-o", str(obj), std_flag(), "-fPIC", *defines,
            *tc.cxx_flags, *incs]


def torch_header(tc: Toolchain, cache_root: Path) -> TorchHeader:
    """The precompiled torch/extension.h of this toolchain (built with the flags every file gets)."""
    return TorchHeader(lambda header, out: _compile_command(tc, header, out, []), tc.identity,
                       tc.include_dirs, cache_root)


def _object_key(tc: Toolchain, src: Path, headers: bytes) -> str:
    h = hashlib.sha256()
    for part in (tc.identity.encode(), src.suffix.encode(), src.read_bytes(), headers):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def _headers_blob(dirs: list[Path]) -> bytes:
    """Every header a translation unit could include, in a stable order."""
    parts = []
    for d in dirs:
        for p in sorted(d.iterdir()) if d.is_dir() else []:
            if p.suffix in HEADER_SUFFIXES and p.is_file():
                parts.append(p.name.encode() + b"\0" + p.read_bytes())
    return b"\0\0".join(parts)


def workspace_sources(workspace: Path, backend: str) -> list[Path]:
    """binding.cpp (ours) plus the workspace's kernel and wrapper files."""
    kernels = workspace / "kernels"
    files = sorted(p for p in kernels.iterdir() if p.suffix in (".cu", ".cpp", ".cc")) if kernels.is_dir() else []
    if backend == "cpu" and any(p.suffix == ".cu" for p in files):
        raise CompileError("the cpu backend cannot build .cu files; write the kernels as C++ (.cpp)")
    return [TEMPLATE_DIR / "binding.cpp", *files]


def build_workspace(workspace: Path, out_dir: Path, tc: Toolchain, cache_root: Path,
                    jobs: int = 4, timeout_s: float = 600.0, precompile: bool = True) -> BuildReport:
    """Compile (or reuse) every object and link ``out_dir/cuda_extension.so``. ``precompile``:
    compile torch-header files against the toolchain's precompiled header, building it (beside
    this build's compiles, which go without) when it is missing."""
    start = time.perf_counter()
    include_dirs = [str(workspace / "kernels"), str(TEMPLATE_DIR)]
    plan = _object_plan(workspace, tc, cache_root)
    plan[0][1].parent.mkdir(parents=True, exist_ok=True)
    todo = [(s, o) for s, o in plan if not o.exists()]
    header = HeaderUse(torch_header(tc, cache_root) if precompile else None, [s for s, _ in todo])
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        compiles = [pool.submit(_compile_one, tc, s, o, include_dirs, timeout_s, header.flags(s)) for s, o in todo]
        header.start(pool, lambda cmd, what: _run(cmd, what, timeout_s))
        for fut in compiles:
            fut.result()
        note = header.note()
    linked = _module_cache_path(tc, [o for _, o in plan], cache_root)
    if linked.exists():
        module = _install_module(linked, out_dir)
    else:
        module = _link(tc, [o for _, o in plan], out_dir, timeout_s)
        _store_atomically(module, linked)
    reused = [s.name for s, o in plan if (s, o) not in todo]
    return BuildReport(module, [s.name for s, _ in todo], reused, time.perf_counter() - start,
                       header.precompiled(), note)


def cached_module(workspace: Path, out_dir: Path, tc: Toolchain, cache_root: Path) -> Path | None:
    """Install the linked module of exactly these sources from the cache, if it is there: a
    repeated solution then needs no build worker at all. None on a miss (or a bad workspace)."""
    try:
        objects = [obj for _, obj in _object_plan(workspace, tc, cache_root)]
    except (CompileError, OSError):
        return None
    linked = _module_cache_path(tc, objects, cache_root)
    return _install_module(linked, out_dir) if linked.exists() else None


def _object_plan(workspace: Path, tc: Toolchain, cache_root: Path) -> list[tuple[Path, Path]]:
    """(source, cached object path) for every translation unit of the workspace."""
    headers = _headers_blob([workspace / "kernels", TEMPLATE_DIR])
    objects_dir = cache_root / "build" / "objects"
    return [(src, objects_dir / f"{_object_key(tc, src, headers)}.o")
            for src in workspace_sources(workspace, tc.backend)]


def _module_cache_path(tc: Toolchain, objects: list[Path], cache_root: Path) -> Path:
    """Linked modules are cached by the toolchain and the (content-keyed) objects they hold."""
    key = hashlib.sha256(json.dumps([tc.identity, tc.link_flags, [o.name for o in objects]]).encode()).hexdigest()
    return cache_root / "build" / "modules" / f"{key}.so"


def _install_module(linked: Path, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    module = out_dir / f"{MODULE_NAME}.so"
    shutil.copyfile(linked, module)
    return module


def _store_atomically(module: Path, linked: Path) -> None:
    with replaced_atomically(linked, ".so") as tmp:
        shutil.copyfile(module, tmp)


def _compile_one(tc: Toolchain, src: Path, obj: Path, include_dirs: list[str], timeout_s: float,
                 extra: tuple[str, ...] = ()) -> None:
    # Write to a private name, then rename: concurrent builds never see half an object.
    with replaced_atomically(obj, ".o") as tmp:
        _run(_compile_command(tc, src, tmp, include_dirs, extra), f"compiling {src.name}", timeout_s)


def _link(tc: Toolchain, objects: list[Path], out_dir: Path, timeout_s: float) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    module = out_dir / f"{MODULE_NAME}.so"
    _run([tc.cxx, "-shared", *map(str, objects), "-o", str(module), *tc.link_flags], "linking", timeout_s)
    return module


def _run(cmd: list[str], what: str, timeout_s: float) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise CompileError(f"{what} took longer than {timeout_s:.0f} s") from None
    except OSError as exc:
        raise CompileError(f"{what}: cannot run {cmd[0]}: {exc}") from None
    if proc.returncode != 0:
        output = (proc.stderr + proc.stdout)[-MAX_COMPILER_OUTPUT:]
        raise CompileError(f"{what} failed:\n{output}", log=output)
