"""Trial data at KernelBench's sizes and the hand-over channel (issue 16), on the cpu backend.

- A task with more than 1 GiB of trial data (two 400 MiB inputs, a 400 MiB output) is judged
  correct with a correct kernel and rejected with one wrong in its very last element, with each
  worker's peak memory bounded by about one trial (one call at a time, no files, no pipes).
- The hand-over channel (sealed shared memory over a Unix socket, run -> reference only): what
  the receiving side refuses (in-process, on a real socket pair), and solutions that probe it
  end to end (forged hand-overs, looking for shared memory or reference data, redefining the
  task's size globals).
"""
from __future__ import annotations

import fcntl
import mmap
import os
import shutil
import socket
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from sandbox import SandboxConfig, TimingConfig, evaluate
from sandbox.handover import HandoverError, receive_output, send_output

MIB = 1 << 20
# 10240 x 10240 fp32: 400 MiB per tensor; a, b and the output make 1.2 GiB of trial data.
SIDE = 10240
BIG_TASK = f'''"""relu(a + b) on two 400 MiB inputs."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)


def get_inputs():
    return [torch.randn({SIDE}, {SIDE}), torch.randn({SIDE}, {SIDE})]


def get_init_inputs():
    return []
'''
WRONG_LAST_ELEMENT = """#include <cstdint>

extern "C" void relu_add_launch(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = a[i] + b[i];
    out[i] = v > 0.0f ? v : 0.0f;
  }
  out[n - 1] = -1.0f;  // relu is never negative: wrong in the last of 104857600 values only
}
"""
FAST = TimingConfig(warmup=1, warmup_ms=0.0, repeats=3)


def workspace(tmp: Path, examples, kernel: str | None = None, model_new: str | None = None) -> Path:
    dest = tmp / "ws"
    shutil.copytree(examples.cpu_solutions / "relu_add_workspace", dest)
    if kernel is not None:
        (dest / "kernels" / "relu_add.cpp").write_text(kernel)
    if model_new is not None:
        (dest / "model_new.py").write_text(model_new)
    return dest


# ------------------------------------------------------------------ more than 1 GiB of trial data

def test_a_task_with_over_a_gib_of_trial_data_is_judged_with_bounded_memory(tmp_path_factory, example_paths,
                                                                              sandbox_cache):
    task = tmp_path_factory.mktemp("big") / "big_relu_add.py"
    task.write_text(BIG_TASK)
    cfg = SandboxConfig(backend="cpu", cache_dir=str(sandbox_cache), compile_baseline=False, num_correct_trials=2,
                        post_timing_trials=1, timing=FAST, run_timeout_s=900, reference_timeout_s=900)
    solutions = [workspace(tmp_path_factory.mktemp("right"), example_paths),
                 workspace(tmp_path_factory.mktemp("wrong"), example_paths, kernel=WRONG_LAST_ELEMENT)]
    with ThreadPoolExecutor(2) as pool:
        right, wrong = pool.map(lambda s: evaluate(task, s, cfg), solutions)
    assert right.correct and right.error is None, (right.error, right.error_detail)
    assert right.trials_passed == 3 and right.runtime_us > 0
    assert (wrong.error, wrong.correct) == ("mismatch", False), (wrong.error, wrong.error_detail)
    assert "1/104857600 values" in wrong.error_detail, wrong.error_detail
    # One trial at a time: a worker holds the inputs (plus a fresh set being copied in) and two
    # outputs at most, never the outputs of every trial (five outputs were 2 GiB on their own).
    tensor_mb = SIDE * SIDE * 4 / MIB
    for role in ("run", "reference"):
        assert right.worker_max_rss_mb[role] < 5 * tensor_mb + 700, right.worker_max_rss_mb


# ------------------------------------------------------------------ the channel, in-process

@pytest.fixture
def pair():
    ends = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ends[1].settimeout(5)
    yield ends
    for end in ends:
        end.close()


def send_raw(sock: socket.socket, header: bytes, data: bytes, seal: bool = True) -> None:
    fd = os.memfd_create("forged", os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW |
                    fcntl.F_SEAL_WRITE)
    socket.send_fds(sock, [header], [fd])
    os.close(fd)


HEADER = b'{"nonce": "n", "seed": 1, "size": 16, "layout": {"tensor": 0}, ' \
         b'"tensors": [{"dtype": "torch.float32", "shape": [4], "offset": 0}]}'


def test_a_handed_over_output_arrives_whole_and_sealed(pair):
    output = {"y": torch.randn(6, 5).t(), "n": [torch.arange(3), 2.5]}
    send_output(pair[0], output, {"nonce": "n", "seed": 7}, 1 << 30)
    header, got = receive_output(pair[1], "n", torch.device("cpu"))
    assert header["seed"] == 7 and torch.equal(got["y"], output["y"]) and got["n"][1] == 2.5
    assert torch.equal(got["n"][0], output["n"][0])


def test_the_cpu_backend_hands_over_in_host_memory_and_records_it(pair):
    from sandbox.handover import device_channel

    assert device_channel("cpu", True) == "the backend is not cuda"
    assert device_channel("cuda", False).startswith("switched off")
    if not torch.cuda.is_available():  # no driver or a CPU build of torch: a reason, never a crash
        assert device_channel("cuda", True).split(":")[0] in ("AssertionError", "OSError", "RuntimeError")
    # A CUDA-capable run worker never sends CPU tensors through device memory.
    assert send_output(pair[0], torch.ones(3), {"nonce": "n", "seed": 1}, 1 << 20, on_device=True) is None
    header, got = receive_output(pair[1], "n", torch.device("cpu"))
    assert header["channel"] == "host" and torch.equal(got, torch.ones(3))


@pytest.mark.parametrize("forgery", ["wrong_nonce", "unsealed", "too_short", "two_descriptors", "device_to_cpu"])
def test_the_reference_side_refuses_forged_hand_overs(pair, forgery):
    data = bytes(16)
    if forgery == "wrong_nonce":
        send_raw(pair[0], HEADER.replace(b'"n"', b'"guess"'), data)
    elif forgery == "unsealed":  # the sender could still rewrite it while it is compared
        send_raw(pair[0], HEADER, data, seal=False)
    elif forgery == "too_short":
        send_raw(pair[0], HEADER, bytes(8))
    elif forgery == "device_to_cpu":  # a device hand-over claimed for a memfd, to a worker without a GPU
        send_raw(pair[0], HEADER.replace(b'"seed": 1', b'"seed": 1, "channel": "device"'), data)
    else:
        fds = [os.memfd_create("x"), os.memfd_create("y")]
        socket.send_fds(pair[0], [HEADER], fds)
    with pytest.raises(HandoverError):
        receive_output(pair[1], "n", torch.device("cpu"))


def test_a_sealed_hand_over_cannot_be_written_by_anyone(pair):
    # The solution's process created it: once sealed, not even a descriptor of its own can write.
    fd = os.memfd_create("probe", os.MFD_ALLOW_SEALING)
    os.write(fd, bytes(16))
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK |
                fcntl.F_SEAL_GROW)
    again = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
    with pytest.raises(PermissionError):
        os.pwrite(again, b"x", 0)
    with pytest.raises(PermissionError):
        mmap.mmap(again, 16, prot=mmap.PROT_WRITE)
    with pytest.raises(PermissionError):
        os.ftruncate(again, 0)
    os.close(again)
    os.close(fd)


# ------------------------------------------------------------------ the channel, end to end

MODEL_NEW = '''"""relu_add through the workspace kernel, probing the sandbox."""
import os
import socket
import stat

import torch
import torch.nn as nn

import cuda_extension

{preamble}


class ModelNew(nn.Module):
    def forward(self, a, b):
        {forward}
        return cuda_extension.relu_add(a.contiguous(), b.contiguous())
'''
PROBES = {
    # At import, a forged hand-over into every socket it holds (the channel to the reference).
    "forged_hand_over": ('''
def _sockets():
    for name in os.listdir("/proc/self/fd"):
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                yield socket.socket(fileno=os.dup(int(name)))
        except OSError:
            pass


for _sock in _sockets():
    _fd = os.memfd_create("forged")
    try:
        socket.send_fds(_sock, [b'{"nonce": "guess", "seed": 0}'], [_fd])
    except OSError:
        pass
''', "pass"),
    # In every call: shared memory of earlier hand-overs still open, or anything to read on a
    # socket (reference outputs, inputs): either would make it return garbage.
    "looks_for_trial_data": ('''
def _leak():
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = int(name)
            if "memfd:" in os.readlink(f"/proc/self/fd/{name}"):
                found.append(fd)
            elif stat.S_ISSOCK(os.fstat(fd).st_mode):
                sock = socket.socket(fileno=os.dup(fd))
                sock.setblocking(False)
                try:
                    if sock.recv(1 << 16, socket.MSG_PEEK):
                        found.append(fd)
                except (BlockingIOError, OSError):
                    pass
                finally:
                    sock.close()
        except (OSError, ValueError):
            pass
    return found
''', "if _leak():\n            return torch.empty_like(a)"),
    # KernelBench solutions often redefine the size globals; the task's own sizes count.
    "redefined_sizes": ('''
N = 7
batch_size = 1


def get_inputs():
    return [torch.randn(N), torch.randn(N)]
''', "if a.numel() == N:\n            return torch.empty_like(a)"),
}
EVERY_RUN = TimingConfig(warmup=1, warmup_ms=0.0, repeats=3, spot_check_probability=1.0)


@pytest.fixture(scope="module")
def probes(tmp_path_factory, small_task, example_paths, sandbox_cache) -> dict:
    cfg = SandboxConfig(backend="cpu", cache_dir=str(sandbox_cache), compile_baseline=False, timing=EVERY_RUN)

    def judge(name: str):
        preamble, forward = PROBES[name]
        source = MODEL_NEW.replace("{preamble}", textwrap.dedent(preamble)).replace("{forward}", forward)
        return evaluate(small_task, workspace(tmp_path_factory.mktemp(name), example_paths, model_new=source), cfg)

    with ThreadPoolExecutor(len(PROBES)) as pool:
        return dict(zip(PROBES, pool.map(judge, PROBES)))


def test_a_forged_hand_over_is_harness_tampering(probes):
    m = probes["forged_hand_over"]
    assert m.error == "violation" and not m.correct, (m.error, m.error_detail)
    assert any(v.startswith("harness_tampered: the output of trial 0") for v in m.violations), m.violations


@pytest.mark.parametrize("probe", ["looks_for_trial_data", "redefined_sizes"])
def test_probing_solutions_find_nothing_and_pass(probes, probe):
    m = probes[probe]
    assert m.correct and m.error is None, (m.error, m.error_detail, m.logs.get("run", "")[-1500:])
    assert m.spot_checks == EVERY_RUN.repeats and m.trials_passed == 7


def test_the_device_fingerprint_of_inputs_sees_every_change(monkeypatch):
    # Computed on the GPU for CUDA inputs (here on CPU tensors: the same arithmetic), in chunks
    # of 16M words; small chunks here, so that small tensors span several.
    import sandbox.inputs as inputs

    # The device hand-over's checks use a secret mix, fresh each time: the same properties.
    monkeypatch.setattr(inputs, "_FINGERPRINT_WORDS", 1 << 10)
    secret = inputs.secret_mix()
    assert all(m % 2 for m in secret) and secret != inputs.secret_mix()
    for t in (torch.randn(700), torch.randn(5000)):
        assert inputs.device_fingerprint(t, secret) != inputs.device_fingerprint(t)
        for mix in (inputs._MIX, secret):
            base = inputs.device_fingerprint(t, mix)
            assert inputs.device_fingerprint(t.clone(), mix) == base
            bumped = t.clone()
            bumped[-1] = torch.nextafter(bumped[-1], torch.tensor(float("inf")))
            swapped = t.clone()
            swapped[[0, 1]] = t[[1, 0]]
            assert inputs.device_fingerprint(bumped, mix) != base and inputs.device_fingerprint(swapped, mix) != base


def test_a_trial_that_cannot_fit_is_one_task_error_naming_the_bytes(tmp_path, example_paths, sandbox_cache):
    from sandbox.errors import TaskError

    task = tmp_path / "huge_relu_add.py"
    task.write_text(BIG_TASK.replace(str(SIDE), str(1 << 20)))  # 2 x 4 TiB of inputs: sized on meta, never made
    cfg = SandboxConfig(backend="cpu", cache_dir=str(sandbox_cache), compile_baseline=False, timing=FAST)
    with pytest.raises(TaskError, match=r"one trial of this task needs 17592186044416 bytes per worker "
                                        r"\(8796093022208 of inputs \+ 2 x 4398046511104 of outputs\); \d+ bytes"):
        evaluate(task, workspace(tmp_path, example_paths), cfg)


def test_trial_size_comes_from_the_meta_device_or_else_from_real_inputs():
    from types import SimpleNamespace

    from sandbox.trial_size import trial_bytes

    class Plain(torch.nn.Module):
        def forward(self, x):
            return x.sum(dim=1)

    class NeedsValues(torch.nn.Module):  # data-dependent: no meta run
        def forward(self, x):
            return x[: int(x[0, 0] > 0) + 1]

    get_inputs = lambda: [torch.randn(64, 32)]  # noqa: E731
    for model, expected in ((Plain, (64 * 32 * 4, 64 * 4)), (NeedsValues, (64 * 32 * 4, None))):
        task = SimpleNamespace(Model=model, get_inputs=get_inputs, get_init_inputs=lambda: [])
        assert trial_bytes(task, torch.device("cpu")) == expected


def test_task_weights_larger_than_the_file_size_limit_reach_the_run_worker(sandbox_cache, example_paths):
    # KernelBench's level-2 56_Matmul_Sigmoid_Sum holds 4 GiB of Linear weights: the reference's
    # hand-over of them (then a file, init.pt) outgrew the 4 GiB file_size_limit_mb and the task
    # was judged a task error (EFBIG) on the H200. A memfd's writes count against that limit too
    # (RLIMIT_FSIZE). Here 4 MiB of weights against a 2 MiB limit.
    cfg = SandboxConfig(backend="cpu", cache_dir=str(sandbox_cache), file_size_limit_mb=2, compile_baseline=False,
                        timing=TimingConfig(warmup=1, warmup_ms=0, repeats=2))
    m = evaluate(example_paths.linear_relu_task, example_paths.cpu_solutions / "linear_relu_workspace", cfg)
    assert m.correct and m.error is None, (m.error, m.error_detail)
