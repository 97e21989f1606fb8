"""The precompiled torch header of workspace builds (sandbox/pch.py): which files may take it,
that the first build needing it makes it beside its own compiles, and that a later build's
binding file compiles against it into a module that computes the same; and the other build cache
of this change, the reference worker's shared inductor cache.

The builds use the session cache (the header is made once per session, and later tests' builds
use it); each build here has a binding file of its own, so it always compiles."""
from __future__ import annotations

import fcntl
import importlib.util
import shutil
import uuid
from pathlib import Path

import pytest
import torch

from sandbox.build import build_workspace, make_toolchain, torch_header
from sandbox.judge import worker_env
from sandbox.pch import takes_torch_header
from sandbox import SandboxConfig
from sandbox.solution import TEMPLATE_DIR


@pytest.mark.parametrize("source, takes", [
    ('#include "binding_registry.h"\nint x;\n', True),
    ("#include <torch/extension.h>\n", True),
    ("// a wrapper\n/* of\n   relu */\n\n  #  include <torch/extension.h>\n", True),
    # Standard-library and torch headers first: they mean the same in either order.
    ('#include <vector>\n\n#include <ATen/cuda/CUDAContext.h>\n#include "binding_registry.h"\n', True),
    # Anything else first may change what torch's headers see, or what the file means.
    ('#define TORCH_ASSERT_ONLY_METHOD_OPERATORS\n#include <torch/extension.h>\n', False),
    ('#include "my_helpers.h"\n#include "binding_registry.h"\n', False),
    ('#include <cuda_runtime.h>\n#include <torch/extension.h>\n', False),
    ('#pragma once\n#include <torch/extension.h>\n', False),
    ('extern "C" void relu_add_launch(const float* a, float* out, long n);\n', False),
])
def test_only_files_that_start_with_torchs_header_take_it(tmp_path, source, takes):
    src = tmp_path / "op_binding.cpp"
    src.write_text(source)
    assert takes_torch_header(src) is takes


def test_a_kernel_file_or_a_workspaces_own_registry_header_keeps_the_plain_compile(tmp_path):
    cuda = tmp_path / "op.cu"
    cuda.write_text("#include <torch/extension.h>\n")
    assert not takes_torch_header(cuda)  # nvcc compiles it
    binding = tmp_path / "op_binding.cpp"
    binding.write_text('#include "binding_registry.h"\n')
    (tmp_path / "binding_registry.h").write_text("#define torch evil\n#include <torch/extension.h>\n")
    assert not takes_torch_header(binding)  # the quoted include finds the workspace's copy first
    assert takes_torch_header(TEMPLATE_DIR / "binding.cpp")


def test_another_process_building_the_header_is_not_waited_for(tmp_path):
    tc = make_toolchain("cpu", None, ("-O3",), ())
    header = torch_header(tc, tmp_path)
    header.dir.mkdir(parents=True)
    ran = []
    with open(header.dir / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert header.build(lambda cmd, what: ran.append(cmd)) == "being built by another build"
    assert ran == [] and not header.ready()


def test_the_reference_worker_alone_shares_inductors_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # set by an earlier torch.compile, say
    cfg = SandboxConfig(backend="cpu", cache_dir=str(tmp_path))
    assert worker_env(cfg, "reference", "k")["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path.resolve() / "inductor")
    for role in ("build", "run"):
        assert "TORCHINDUCTOR_CACHE_DIR" not in worker_env(cfg, role, "k")


def _variant(example_paths, root: Path) -> Path:
    """The example relu_add workspace with a binding file no cache has seen."""
    workspace = root / uuid.uuid4().hex[:8]
    shutil.copytree(example_paths.cpu_solutions / "relu_add_workspace", workspace)
    binding = workspace / "kernels" / "relu_add_binding.cpp"
    binding.write_text(binding.read_text() + f"// variant {workspace.name}\n")
    return workspace


def _relu_add(module_path: Path):
    spec = importlib.util.spec_from_file_location("cuda_extension", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.relu_add


def _first_and_later_builds(example_paths, cache: Path, tmp_path: Path) -> bool:
    """Build the same binding twice in ``cache``; whether the first of them made the header."""
    cfg = SandboxConfig(backend="cpu")
    tc = make_toolchain("cpu", None, cfg.cxx_flags, cfg.nvcc_flags)
    header = torch_header(tc, cache)
    made_first = not header.ready()
    if made_first:  # no earlier build in this cache needed it yet
        first = build_workspace(_variant(example_paths, tmp_path), tmp_path / "first", tc, cache)
        assert first.precompiled == [] and first.torch_header == "built beside this build, for the next ones"
        assert header.ready()
    later = build_workspace(_variant(example_paths, tmp_path), tmp_path / "later", tc, cache)
    assert "relu_add_binding.cpp" in later.precompiled and later.torch_header == ""
    assert "relu_add.cpp" not in later.precompiled  # a kernel file: no torch header to precompile
    a, b = torch.randn(1000), torch.randn(1000)
    assert torch.equal(_relu_add(later.module_path)(a, b), torch.relu(a + b))
    return made_first


def test_the_first_build_makes_the_header_and_later_bindings_compile_against_it(example_paths, sandbox_cache, tmp_path):
    _first_and_later_builds(example_paths, sandbox_cache, tmp_path)


@pytest.mark.slow
def test_a_fresh_cache_makes_the_header_in_its_first_build(example_paths, tmp_path):
    # The case above takes the first-build branch only when no earlier test of the session made
    # the header; in a fresh cache it always does (a minute or two of compiling: not in CI).
    assert _first_and_later_builds(example_paths, tmp_path / "cache", tmp_path)
