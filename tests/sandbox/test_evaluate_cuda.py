"""CUDA end-to-end checks on a real GPU (marked gpu; skipped without CUDA)."""
import dataclasses
import shutil
from pathlib import Path

import pytest

from sandbox import SandboxConfig, evaluate
from sandbox.reward import graduated_reward

pytestmark = pytest.mark.gpu

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RELU_ADD = EXAMPLES / "tasks" / "relu_add.py"
LINEAR_RELU = EXAMPLES / "tasks" / "linear_relu.py"
CUDA_SOLUTIONS = EXAMPLES / "solutions" / "cuda"


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    return SandboxConfig(backend="cuda", cache_dir=str(tmp_path_factory.mktemp("cuda-cache")))


def edited_workspace(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of the relu_add workspace with one edit in its kernel file."""
    ws = tmp_path / "ws"
    shutil.copytree(CUDA_SOLUTIONS / "relu_add_workspace", ws)
    kernel = ws / "kernels" / "relu_add.cu"
    source = kernel.read_text()
    assert old in source
    kernel.write_text(source.replace(old, new))
    return ws


def assert_passes(m):
    assert m.error is None, (m.error, m.error_detail)
    assert m.correct and m.compiled and m.trials_passed == m.num_trials == 5 + 2
    assert m.runtime_us > 0 and m.eager_us > 0 and m.compile_us > 0
    assert graduated_reward(m) >= 1


def test_workspace_kernel_passes(cfg):
    m = evaluate(RELU_ADD, CUDA_SOLUTIONS / "relu_add_workspace", cfg)
    assert_passes(m)
    assert m.solution_form == "workspace"


def test_single_file_load_inline_passes(cfg):
    m = evaluate(RELU_ADD, CUDA_SOLUTIONS / "relu_add_inline.py", cfg)
    assert_passes(m)
    assert m.solution_form == "single_file"


def test_cublas_gemm_with_reference_weights_passes(cfg):
    m = evaluate(LINEAR_RELU, CUDA_SOLUTIONS / "linear_relu_cublas", cfg)
    assert_passes(m)
    assert m.max_abs_diff < 1e-3


def test_wrong_kernel_is_a_mismatch(cfg, tmp_path):
    ws = edited_workspace(tmp_path, "fmaxf(x.x + y.x, 0.f)", "fmaxf(x.x - y.x, 0.f)")
    m = evaluate(RELU_ADD, ws, cfg)
    assert m.compiled and not m.correct and m.error == "mismatch"


def test_cuda_compile_error_is_surfaced(cfg, tmp_path):
    ws = edited_workspace(tmp_path, "float4 x = a[i], y = b[i];", "float4 x = a[i], y = b[i] + undefined_thing;")
    m = evaluate(RELU_ADD, ws, cfg)
    assert m.error == "compile_error"
    assert "undefined_thing" in m.error_detail.splitlines()[0]


def test_illegal_address_fails_and_does_not_leak_into_next_evaluation(cfg, tmp_path):
    ws = edited_workspace(tmp_path, "out[i] = make_float4(", "out[i + (1ll << 40)] = make_float4(")
    bad = evaluate(RELU_ADD, ws, cfg)
    assert not bad.correct and bad.error in ("runtime_error", "crash")
    assert graduated_reward(bad) == -1
    good = evaluate(RELU_ADD, CUDA_SOLUTIONS / "relu_add_workspace", cfg)
    assert_passes(good)


SIDE_STREAM_SOLUTION = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu_add_kernel(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = fmaxf(a[i] + b[i], 0.f);
}

__global__ void spin_kernel(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {}
}

static cudaStream_t side_stream() {
  static cudaStream_t s = nullptr;
  if (!s) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  return s;
}

torch::Tensor relu_add_with_side_work(torch::Tensor a, torch::Tensor b) {
  auto out = torch::empty_like(a);
  const int64_t n = a.numel();
  relu_add_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
  spin_kernel<<<1, 1, 0, side_stream()>>>(20000000LL);  // ~10 ms at ~2 GHz, left running
  return out;
}
"""

ext = load_inline(name="side_stream_relu_add",
                  cpp_sources="torch::Tensor relu_add_with_side_work(torch::Tensor a, torch::Tensor b);",
                  cuda_sources=CUDA_SOURCE, functions=["relu_add_with_side_work"],
                  extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.relu_add_with_side_work(a.contiguous(), b.contiguous())
'''


def test_work_left_on_a_side_stream_is_timed(cfg, tmp_path):
    path = tmp_path / "side_stream.py"
    path.write_text(SIDE_STREAM_SOLUTION)
    m = evaluate(RELU_ADD, path, cfg)
    assert m.correct, (m.error, m.error_detail)
    # The relu_add itself takes tens of microseconds; the spin left behind takes ~10 ms.
    assert m.runtime_us > 5000
    assert graduated_reward(m) == 1


# ------------------------------------------------------------------ guards on the GPU

def test_torch_ops_on_the_gpu_are_a_violation(cfg, tmp_path):
    path = tmp_path / "torch_relu.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                    "    def forward(self, a, b):\n        return torch.relu(a + b)\n")
    m = evaluate(RELU_ADD, path, cfg)
    assert m.error == "violation" and graduated_reward(m) == -1
    assert any(v.startswith("torch_op: aten.relu") for v in m.violations)


def test_unwritten_output_on_the_caching_allocator_is_a_mismatch(cfg, tmp_path):
    # The output comes from torch.empty_like; memory the caching allocator hands back held the
    # previous trial's output, never a reference answer (that lives in another process).
    ws = edited_workspace(tmp_path, "    out[i] = make_float4(", "    if (n4 < 0) out[i] = make_float4(")
    m = evaluate(RELU_ADD, ws, cfg)
    assert m.error == "mismatch" and graduated_reward(m) == -1


def test_kernel_skipping_repeated_input_pointers_is_a_mismatch(cfg, tmp_path):
    ws = edited_workspace(
        tmp_path, "  const int64_t n4 = n / 4;",
        "  static const float* last_a = nullptr;\n  if (a == last_a) return;\n  last_a = a;\n"
        "  const int64_t n4 = n / 4;")
    m = evaluate(RELU_ADD, ws, cfg)
    assert m.error == "mismatch" and graduated_reward(m) == -1


# ------------------------------------------------------------------ timed calls told apart (issue 19)

# Counts fixed (no time-based warm-up) so that a solution can count the calls; 16 timed runs.
COUNTED_TIMING = dict(warmup=5, warmup_ms=0.0, repeats=16)
ADVERSARY = '''
import json
import os
import threading

import torch
import torch.nn as nn
from torch.utils._python_dispatch import _get_current_dispatch_mode

import cuda_extension

{preamble}


class ModelNew(nn.Module):
    def forward(self, a, b):
        if _watched(a, b):
            return cuda_extension.relu_add(a.contiguous(), b.contiguous())
        return torch.empty_like(a)  # uninitialised: whatever the caching allocator hands back
'''
# Honest while the state equals the state of the second call (a verified trial; the first call's
# allocator state differs from every later one, verified or not, before any input is refilled).
LEARNED = '''
_calls, _seen = [0], []


def _watched(a, b):
    _calls[0] += 1
    state = ({signal})
    if _calls[0] == 2:
        _seen.append(state)
    return _calls[0] < 2 or state == _seen[0]
'''
GPU_SIGNALS = {
    "memory_and_stream": "torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), "
                         "torch.cuda.current_stream().cuda_stream, torch.cuda.current_stream().query()",
    "recorder_grad_thread": "torch.autograd._profiler_enabled(), torch._C._len_torch_dispatch_stack(), "
                            "repr(_get_current_dispatch_mode()), torch.is_grad_enabled(), threading.get_ident()",
    "input_tensors": "a.data_ptr(), b.data_ptr(), a.stride(), a.storage_offset(), id(a), a.requires_grad",
}
COUNTED = '''
_timing = json.load(open(f"../{os.path.basename(os.getcwd())}.job.json"))["timing"]
_TIMED = range(5 + 1, 5 + _timing["warmup"] + _timing["repeats"] + 1)
_calls = [0]


def _watched(a, b):
    _calls[0] += 1
    return _calls[0] not in _TIMED
'''


def with_spot_checks(cfg, probability):
    return dataclasses.replace(cfg, timing=dataclasses.replace(cfg.timing, spot_check_probability=probability,
                                                               **COUNTED_TIMING))


def adversary_workspace(tmp_path: Path, preamble: str) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(CUDA_SOLUTIONS / "relu_add_workspace", ws)
    (ws / "model_new.py").write_text(ADVERSARY.format(preamble=preamble))
    return ws


@pytest.mark.parametrize("signal", list(GPU_SIGNALS))
def test_timed_calls_look_like_verified_calls_on_the_gpu(cfg, tmp_path, signal):
    # Every timed output is checked: a pass means the adversary computed in every timed run,
    # i.e. stream, recorder, grad mode, thread and input tensors never told it apart.
    ws = adversary_workspace(tmp_path, LEARNED.replace("{signal}", GPU_SIGNALS[signal]))
    m = evaluate(RELU_ADD, ws, with_spot_checks(cfg, 1.0))
    if signal == "memory_and_stream" and not m.correct:
        # The caching allocator's counters also differ between one verified trial and the next,
        # so an adversary keyed on them fakes whichever call first looks new: a verified trial
        # (mismatch; measured on the H200 on 2026-12-01: trial 3) or a timed run, which the spot
        # check of that run catches (measured on 2026-12-03: timed run 5). Caught either way,
        # never rewarded (docs/sandbox.md, threat table).
        faked_trial = m.error == "mismatch" and m.trials_passed < 5
        faked_timed_run = m.error == "violation" and any(v.startswith("timing_output_mismatch") for v in m.violations)
        assert (faked_trial or faked_timed_run) and graduated_reward(m) == -1, (m.error, m.error_detail, m.violations)
        return
    assert m.correct and m.error is None, (m.error, m.error_detail, m.violations)
    assert m.spot_checks == COUNTED_TIMING["repeats"] and graduated_reward(m) >= 1


def test_garbage_in_the_timed_runs_only_is_a_timing_output_mismatch_on_the_gpu(cfg, tmp_path):
    m = evaluate(RELU_ADD, adversary_workspace(tmp_path, COUNTED), with_spot_checks(cfg, 0.5))
    assert m.error == "violation" and graduated_reward(m) == -1, (m.error, m.error_detail)
    assert any(v.startswith("timing_output_mismatch: timed run") for v in m.violations), m.violations
    assert m.trials_passed == 5 and m.runtime_us is None


def test_kernel_on_the_current_stream_passes_every_spot_check(cfg):
    # The example launches on at::cuda::getCurrentCUDAStream(), as a kernel should.
    m = evaluate(RELU_ADD, CUDA_SOLUTIONS / "relu_add_workspace", with_spot_checks(cfg, 1.0))
    assert m.correct and m.error is None, (m.error, m.error_detail)
    assert m.spot_checks == COUNTED_TIMING["repeats"] and m.stage_seconds["spot_checks"] > 0


# ------------------------------------------------------------------ trial data at KernelBench's sizes (issue 16)

BIG_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)


def get_inputs():
    return [torch.randn({rows}, {cols}), torch.randn({rows}, {cols})]


def get_init_inputs():
    return []
"""


def big_task(tmp_path: Path, rows: int, cols: int) -> Path:
    task = tmp_path / f"relu_add_{rows}x{cols}.py"
    task.write_text(BIG_TASK.format(rows=rows, cols=cols))
    return task


def test_six_gib_of_trial_data_is_judged_through_device_memory_only(cfg, tmp_path):
    # Two 2 GiB inputs and a 2 GiB output (19_ReLU's input is 6 GiB): inputs are made on the GPU,
    # the output crosses to the reference worker in device memory (host channel: in 64 MiB steps),
    # neither worker's host memory holds more than about one output.
    task = big_task(tmp_path, 4096, 131072)
    small = dataclasses.replace(cfg, num_correct_trials=2, post_timing_trials=1, compile_baseline=False,
                                timing=dataclasses.replace(cfg.timing, repeats=5))
    m = evaluate(task, CUDA_SOLUTIONS / "relu_add_workspace", small)
    assert m.correct and m.error is None, (m.error, m.error_detail)
    assert m.trials_passed == 3 and m.runtime_us > 0
    assert m.worker_max_rss_mb["run"] < 2048 + 1500 and m.worker_max_rss_mb["reference"] < 2 * 2048 + 1500, \
        m.worker_max_rss_mb


def test_a_trial_larger_than_the_device_is_one_task_error_naming_the_bytes(cfg, tmp_path):
    from sandbox.errors import TaskError

    task = big_task(tmp_path, 65536, 1 << 20)  # 2 x 256 GiB of inputs
    with pytest.raises(TaskError, match=r"one trial of this task needs \d+ bytes per worker .* bytes free on"):
        evaluate(task, CUDA_SOLUTIONS / "relu_add_workspace", dataclasses.replace(cfg, device_memory_limit_gb=0))
