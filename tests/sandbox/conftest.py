"""Fixtures of the pool tests (test_pool.py, test_lanes.py): a cheap CPU configuration and
pure-Python relu_add solutions."""
from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import SandboxConfig, TimingConfig


@pytest.fixture
def cfg(sandbox_cache):
    """CPU backend, guards and the compile baseline off, the fewest timed runs."""
    return SandboxConfig(backend="cpu", cache_dir=str(sandbox_cache), compile_baseline=False, guards=False,
                         timing=TimingConfig(warmup=1, warmup_ms=0, repeats=2), run_timeout_s=60)


@pytest.fixture
def python_solution(tmp_path):
    """A pure-Python relu_add ModelNew whose forward body is given, in its own file."""
    def make(name: str, body: str) -> Path:
        path = tmp_path / name / "model_new.py"
        path.parent.mkdir()
        indented = "\n".join("        " + line for line in body.splitlines())
        path.write_text("import os\nimport time\n\nimport torch\nimport torch.nn as nn\n\n\n"
                        "class ModelNew(nn.Module):\n    def forward(self, a, b):\n" + indented + "\n")
        return path
    return make
