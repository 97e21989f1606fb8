"""The suite's device gates are its own (conftest.pytest_configure): a family pipeline or benchmark
running beside it holds the machine-wide CPU gate for minutes, and tests must not queue behind it."""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sandbox.gate import gate_dir
from tests.conftest import GATE_DIR_GIVEN


def test_the_suite_gates_apart_from_the_machine_wide_folder():
    if GATE_DIR_GIVEN:
        pytest.skip("CUDA_AGENT_GATE_DIR was given to the session (or this is an xdist worker)")
    assert gate_dir() != Path(tempfile.gettempdir()) / "cuda-agent-gates"
    assert gate_dir().name.startswith("cuda-agent-test-gates-") and gate_dir().is_dir()


def test_the_suite_s_subprocesses_meet_on_the_same_gates():
    """A sandbox worker or train.py the suite starts inherits the folder, so they gate each other."""
    seen = subprocess.run([sys.executable, "-c", "from sandbox.gate import gate_dir; print(gate_dir())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert seen == str(gate_dir())
