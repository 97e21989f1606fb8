"""Checked outputs handed over in device memory (issue 16; marked gpu, skipped without CUDA).

First the channel alone, between two real processes (the receiver in its own PID namespace when
root, as the workers are), then whole evaluations through it."""
import dataclasses
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from sandbox import evaluate
from sandbox.reward import graduated_reward


def _evaluate_cuda_helpers():
    """test_evaluate_cuda.py's fixtures and helpers (tests import in importlib mode: no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_evaluate_cuda_helpers", Path(__file__).with_name("test_evaluate_cuda.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_helpers = _evaluate_cuda_helpers()
COUNTED, COUNTED_TIMING, CUDA_SOLUTIONS, RELU_ADD = (_helpers.COUNTED, _helpers.COUNTED_TIMING, _helpers.CUDA_SOLUTIONS,
                                                     _helpers.RELU_ADD)
adversary_workspace, big_task, with_spot_checks = _helpers.adversary_workspace, _helpers.big_task, _helpers.with_spot_checks
cfg = _helpers.cfg  # the module-scoped CUDA configuration fixture

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
RECEIVER = textwrap.dedent('''
    import json, socket, sys
    import torch
    from sandbox.compare import chunks
    from sandbox.handover import HandoverError, receive_handover
    sock = socket.socket(fileno=int(sys.argv[1]))
    handed = receive_handover(sock, "n", torch.device("cuda", 0))
    expected = torch.arange(1000, dtype=torch.float32, device="cuda").view(10, 100) * 3
    values_ok = bool(torch.equal(handed.output["x"], expected)) and handed.output["k"] == [2, 5]
    read_ok = bool(torch.equal(handed.read(chunks(handed.output["x"])[0]), expected.reshape(-1)))
    sock.send(b"compared")
    sock.recv(16)  # the sender has written into the shared memory since
    try:
        handed.read(chunks(handed.output["x"])[0])
        read_after_write = "accepted"
    except HandoverError as exc:
        read_after_write = str(exc)
    print(json.dumps({"channel": handed.header["channel"], "values_ok": values_ok, "read_ok": read_ok,
                      "unchanged_after_write": handed.unchanged(), "read_after_write": read_after_write}), flush=True)
    handed.close()
''')


def test_the_device_channel_works_between_two_processes_and_sees_late_writes():
    from sandbox.device_memory import unavailable
    from sandbox.handover import send_output
    from sandbox.process import ISOLATION_PREFIX, namespaces_available

    why = unavailable(0)
    print("device sharing:", why or "available")
    assert not why, f"device memory cannot be shared by descriptor here: {why}"
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    prefix = list(ISOLATION_PREFIX) if not namespaces_available() else []
    print("receiver isolated:", bool(prefix), namespaces_available())
    child = subprocess.Popen([*prefix, sys.executable, "-c", RECEIVER, str(theirs.fileno())], pass_fds=[theirs.fileno()],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
    theirs.close()
    x = torch.arange(1000, dtype=torch.float32, device="cuda").view(10, 100) * 3
    shared = send_output(ours, {"x": x.t().contiguous().t(), "k": [2, 5]}, {"nonce": "n", "seed": 1}, 1 << 30,
                         on_device=True)
    assert shared is not None, "send_output fell back to host memory"
    ours.settimeout(120)
    assert ours.recv(16) == b"compared"
    shared.tensor[:16].fill_(0xFF)  # a write after the hand-over arrived: its chunk is refused from now on
    torch.cuda.synchronize()
    ours.send(b"written")
    out, err = child.communicate(timeout=120)
    shared.close()
    print(out, err[-3000:])
    report = json.loads(out.strip().splitlines()[-1])
    assert report == {"channel": "device", "values_ok": True, "read_ok": True, "unchanged_after_write": False,
                      "read_after_write": "the output's device memory changed after it was handed over"}


@pytest.mark.parametrize("forgery", ["wrong_nonce", "size_beyond_allocation", "size_not_the_layouts", "misaligned",
                                     "tensor_outside"])
def test_forged_device_hand_overs_are_refused(forgery):
    from sandbox.device_memory import DeviceBuffer, granularity
    from sandbox.handover import HandoverError, receive_handover

    step = granularity(0)
    entry = {"dtype": "torch.float32", "shape": [4], "offset": 0}
    header = {"nonce": "n", "seed": 1, "channel": "device", "layout": {"tensor": 0}, "tensors": [entry], "size": step}
    if forgery == "wrong_nonce":
        header["nonce"] = "guess"
    elif forgery == "size_beyond_allocation":  # a layout that needs two granules, over an allocation of one
        header.update(size=2 * step, tensors=[dict(entry, shape=[(step + 4) // 4])])
    elif forgery == "size_not_the_layouts":
        header["size"] = 2 * step
    elif forgery == "misaligned":
        header["tensors"] = [dict(entry, offset=2)]
    else:
        header["tensors"] = [dict(entry, offset=step - 8)]
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    buffer = DeviceBuffer.create(16, 0)
    fd = buffer.export()
    try:
        socket.send_fds(ours, [json.dumps(header).encode()], [fd])
        with pytest.raises(HandoverError) as caught:
            receive_handover(theirs, "n", torch.device("cuda", 0)).close()
        print(forgery, "->", caught.value)
    finally:
        os.close(fd)
        buffer.close()
        ours.close()
        theirs.close()


def assert_through_device(m, checks: int):
    print("handovers:", m.handovers, "stage_seconds:", {k: round(v, 3) for k, v in m.stage_seconds.items()})
    assert m.handovers == {"device": checks}, (m.handovers, m.logs.get("run", "")[-2000:])


def test_a_correct_solution_passes_through_device_memory_with_spot_checks(cfg):
    m = evaluate(RELU_ADD, CUDA_SOLUTIONS / "relu_add_workspace", with_spot_checks(cfg, 1.0))
    assert m.correct and m.error is None, (m.error, m.error_detail, m.violations)
    assert m.spot_checks == COUNTED_TIMING["repeats"] and m.trials_passed == 7
    assert_through_device(m, 7 + COUNTED_TIMING["repeats"])
    assert graduated_reward(m) >= 1


def test_garbage_in_the_timed_runs_only_is_caught_through_device_memory(cfg, tmp_path):
    m = evaluate(RELU_ADD, adversary_workspace(tmp_path, COUNTED), with_spot_checks(cfg, 1.0))
    print("error:", m.error, m.violations, m.handovers)
    assert m.error == "violation" and graduated_reward(m) == -1, (m.error, m.error_detail)
    assert any(v.startswith("timing_output_mismatch: timed run") for v in m.violations), m.violations
    assert m.handovers.get("device", 0) >= 6 and "host" not in m.handovers, m.handovers


# Correct output, then a thread that keeps rewriting it (with a kernel of its own) after forward returned.
LATE_WRITER = r'''
import threading
import time

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

__global__ void scribble_kernel(float* out, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = 12345.f;
}

torch::Tensor relu_add(torch::Tensor a, torch::Tensor b) {
  auto out = torch::empty_like(a);
  const int64_t n = a.numel();
  relu_add_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
  return out;
}

void scribble(torch::Tensor out) {
  const int64_t n = out.numel();
  scribble_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(out.data_ptr<float>(), n);
}
"""

ext = load_inline(name="late_writer_relu_add",
                  cpp_sources="torch::Tensor relu_add(torch::Tensor a, torch::Tensor b); void scribble(torch::Tensor out);",
                  cuda_sources=CUDA_SOURCE, functions=["relu_add", "scribble"], extra_cuda_cflags=["-O3"])


def _keep_writing(out):
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        ext.scribble(out)
        time.sleep(0.0002)


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = ext.relu_add(a.contiguous(), b.contiguous())
        threading.Thread(target=_keep_writing, args=(out,), daemon=True).start()
        return out
'''


def test_a_thread_writing_into_its_output_after_return_is_not_rewarded(cfg, tmp_path):
    path = tmp_path / "late_writer.py"
    path.write_text(LATE_WRITER)
    m = evaluate(RELU_ADD, path, with_spot_checks(cfg, 1.0))
    print("error:", m.error, (m.error_detail or "")[:300], m.violations, m.handovers)
    assert graduated_reward(m) == -1 and m.error in ("mismatch", "violation"), (m.error, m.error_detail)


def test_a_gib_output_is_spot_checked_faster_in_device_memory(cfg, tmp_path):
    # relu(a + b) over 16384 x 16384 floats: two 1 GiB inputs, a 1 GiB output; every timed run checked.
    task = big_task(tmp_path, 16384, 16384)
    small = dataclasses.replace(cfg, num_correct_trials=2, post_timing_trials=1, compile_baseline=False,
                                timing=dataclasses.replace(cfg.timing, warmup=2, warmup_ms=0.0, repeats=8,
                                                           spot_check_probability=1.0))
    seconds = {}
    for on_device in (True, False):
        start = time.monotonic()
        m = evaluate(task, CUDA_SOLUTIONS / "relu_add_workspace", dataclasses.replace(small, device_handover=on_device))
        wall = time.monotonic() - start
        assert m.correct and m.error is None, (on_device, m.error, m.error_detail)
        assert m.handovers == {("device" if on_device else "host"): 3 + 8}, m.handovers
        seconds[on_device] = {k: round(m.stage_seconds.get(k, 0.0), 2) for k in ("verify", "check", "spot_checks",
                                                                                "timing")} | {"wall": round(wall, 1)}
    print(f"\n1 GiB output, stage seconds: device hand-over {seconds[True]}  host hand-over {seconds[False]}")


# relu(a + b) in place over 8192 x 8192 floats: 512 MiB of inputs, a 256 MiB output, no temporaries
# in the reference's forward (so that its peak is the trial data's).
IN_PLACE_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return (a + b).relu_()


def get_inputs():
    return [torch.randn(8192, 8192), torch.randn(8192, 8192)]


def get_init_inputs():
    return []
"""


def test_a_checked_call_holds_one_trials_inputs_and_two_outputs_per_worker(cfg, tmp_path):
    # Issue 16: the reference compares the run worker's copy in place (it used to take a private
    # copy of it as well: inputs + 3 outputs), and the run worker drops the output once copied.
    from sandbox.timing import L2_FLUSH_BYTES

    task = tmp_path / "relu_add_in_place.py"
    task.write_text(IN_PLACE_TASK)
    small = dataclasses.replace(cfg, num_correct_trials=2, post_timing_trials=1, compile_baseline=False,
                                timing=dataclasses.replace(cfg.timing, warmup=2, warmup_ms=0.0, repeats=4,
                                                           spot_check_probability=1.0))
    m = evaluate(task, CUDA_SOLUTIONS / "relu_add_workspace", small)
    assert m.correct and m.error is None, (m.error, m.error_detail)
    assert_through_device(m, 3 + 4)
    inputs_mb, output_mb = 512, 256
    flush_mb = L2_FLUSH_BYTES >> 20 if small.timing.flush_l2 else 0  # the run worker's L2 flush buffer: not trial data
    peaks = m.worker_device_peak_mb
    print(f"device peaks, MiB: {peaks} (inputs {inputs_mb}, output {output_mb}, L2 flush {flush_mb})")
    assert peaks["reference"] < inputs_mb + 2.5 * output_mb, peaks
    assert peaks["run"] - flush_mb < inputs_mb + 2.5 * output_mb, peaks
