"""The solution shares a process with the timing-input generator: shrinking or freezing the
timing inputs (through the task module or torch's random functions) is a violation."""
import shutil
from pathlib import Path

import pytest

from sandbox import SandboxConfig, TimingConfig, evaluate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RELU_ADD = EXAMPLES / "tasks" / "relu_add.py"
WORKSPACE = EXAMPLES / "solutions" / "cpu" / "relu_add_workspace"


@pytest.fixture
def cfg(sandbox_cache):
    return SandboxConfig(backend="cpu", cache_dir=str(sandbox_cache), compile_baseline=False,
                         num_correct_trials=2, timing=TimingConfig(warmup=1, warmup_ms=0, repeats=3))


def workspace_with(tmp_path: Path, extra: str) -> Path:
    """The correct relu_add workspace with lines appended to model_new.py (kernel unchanged)."""
    ws = tmp_path / "ws"
    shutil.copytree(WORKSPACE, ws)
    with open(ws / "model_new.py", "a") as fh:
        fh.write("\n" + extra + "\n")
    return ws


@pytest.mark.parametrize("extra, expected", [
    ("import model\nmodel.N = 1024", "timing inputs"),
    ("import model, torch\nmodel.get_inputs = lambda: [torch.randn(8), torch.randn(8)]", "timing inputs"),
    ("import torch\n_orig = torch.randn\ntorch.randn = lambda *s, **k: _orig(*s, **k).zero_()", "torch.randn"),
], ids=["task-size-constant", "get_inputs-replaced", "torch.randn-replaced"])
def test_tampering_with_timing_inputs_is_a_violation(tmp_path, cfg, extra, expected):
    m = evaluate(RELU_ADD, workspace_with(tmp_path, extra), cfg)
    assert m.error == "violation" and m.runtime_us is None
    assert any(v.startswith("task_tampered") and expected in v for v in m.violations), m.violations


def test_untouched_workspace_passes_the_same_checks(tmp_path, cfg):
    m = evaluate(RELU_ADD, workspace_with(tmp_path, "# nothing else"), cfg)
    assert m.correct and m.violations == [] and m.runtime_us > 0
