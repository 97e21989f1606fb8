"""Builds only in the build worker (issue 16): a single-file solution's load_inline compiles
there, at import or in ModelNew.__init__; a failed one is a compile error even when the solution
catches it and falls back to PyTorch; the run worker never compiles (a load_inline that first
runs inside forward is refused: a compile error, not a build holding the device lane).

The three evaluations run at once (module fixture), each with a load_inline of its own."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from sandbox import SandboxConfig, TimingConfig, evaluate
from sandbox.extensions import NOT_BUILT

CPP = r"""
torch::Tensor relu_add(torch::Tensor a, torch::Tensor b) {
  auto out = torch::empty_like(a);
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < a.numel(); ++i) po[i] = pa[i] + pb[i] > 0.0f ? pa[i] + pb[i] : 0.0f;
  return out;
}
"""
HEAD = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\nCPP = r'''{cpp}'''\n"
SOLUTIONS = {
    # The build fails (a syntax error); the solution catches it and computes with PyTorch.
    "caught_failure": HEAD + '''
try:
    _ext = load_inline(name="broken_relu_add", cpp_sources=CPP + "this is not C++;", functions=["relu_add"])
except Exception:
    _ext = None


class ModelNew(nn.Module):
    def forward(self, a, b):
        return _ext.relu_add(a, b) if _ext is not None else torch.relu(a + b)
''',
    # load_inline first runs inside forward: it would compile in the run worker.
    "in_forward": HEAD + '''

class ModelNew(nn.Module):
    def forward(self, a, b):
        ext = load_inline(name="forward_relu_add", cpp_sources=CPP, functions=["relu_add"])
        return ext.relu_add(a.contiguous(), b.contiguous())
''',
    # load_inline in __init__: built by the build worker (ModelNew constructed there on meta).
    "in_init": HEAD + '''

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = load_inline(name="init_relu_add", cpp_sources=CPP, functions=["relu_add"])

    def forward(self, a, b):
        return self.ext.relu_add(a.contiguous(), b.contiguous())
''',
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory, small_task, sandbox_cache) -> dict:
    cfg = SandboxConfig(backend="cpu", cache_dir=str(sandbox_cache), compile_baseline=False,
                        timing=TimingConfig(warmup=1, repeats=3))

    def judge(name: str):
        path = tmp_path_factory.mktemp(name) / "model_new.py"
        path.write_text(SOLUTIONS[name].replace("{cpp}", CPP))
        return evaluate(small_task, path, cfg)

    with ThreadPoolExecutor(len(SOLUTIONS)) as pool:
        return dict(zip(SOLUTIONS, pool.map(judge, SOLUTIONS)))


def test_failed_load_inline_caught_by_the_solution_is_a_compile_error(verdicts):
    m = verdicts["caught_failure"]
    assert (m.error, m.compiled, m.correct) == ("compile_error", False, False), (m.error, m.error_detail)
    assert "broken_relu_add" in m.error_detail and "error" in m.error_detail.lower(), m.error_detail
    assert "run" not in m.logs and "verify" not in m.stage_seconds  # no run worker ever started


def test_load_inline_inside_forward_is_refused_in_the_run_worker(verdicts):
    m = verdicts["in_forward"]
    assert (m.error, m.compiled, m.correct) == ("compile_error", False, False), (m.error, m.error_detail)
    assert NOT_BUILT.format(name="forward_relu_add") in m.error_detail, m.error_detail


def test_load_inline_in_init_is_built_by_the_build_worker(verdicts):
    m = verdicts["in_init"]
    assert m.correct and m.error is None, (m.error, m.error_detail, m.logs.get("run", "")[-2000:])
    assert m.runtime_us and m.runtime_us > 0
