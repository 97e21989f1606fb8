"""Solution workers run in their own PID and network namespaces (when root): they cannot
reach the network and nothing they start outlives the evaluation."""
import socket
import threading
import uuid
from pathlib import Path

import pytest

from sandbox import SandboxConfig, TimingConfig, evaluate
from sandbox.cgroups import WorkerCgroup
from sandbox.judge import ISOLATED, namespaces_available

pytestmark = pytest.mark.skipif(bool(namespaces_available()), reason="needs root and unshare (namespaces)")

TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a):
        return a


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
'''


@pytest.fixture
def cfg(sandbox_cache):
    return SandboxConfig(backend="cpu", cache_dir=str(sandbox_cache), compile_baseline=False,
                         timing=TimingConfig(warmup=1, warmup_ms=0, repeats=2))


def judge(tmp_path: Path, cfg: SandboxConfig, preamble: str):
    task = tmp_path / "identity_task.py"
    task.write_text(TASK)
    solution = tmp_path / "model_new.py"
    solution.write_text(preamble + "\n\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                        "    def forward(self, a):\n        return a\n")
    return evaluate(task, solution, cfg)


def test_solution_code_cannot_reach_a_local_server(tmp_path, cfg):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted = []
    server.settimeout(0.2)

    def accept_loop(stop):
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(conn.recv(100))
            conn.close()

    stop = threading.Event()
    thread = threading.Thread(target=accept_loop, args=(stop,), daemon=True)
    thread.start()
    try:
        m = judge(tmp_path, cfg, f'''
import socket
try:
    with socket.create_connection(("127.0.0.1", {port}), timeout=2) as s:
        s.sendall(b"exfiltrated")
except OSError:
    pass
''')
    finally:
        stop.set()
        thread.join()
        server.close()
    assert m.isolation.startswith(ISOLATED)
    assert m.correct, (m.error, m.error_detail)  # the solution ran; only its connection failed
    assert accepted == []


def test_processes_started_by_the_solution_die_with_the_evaluation(tmp_path, cfg):
    marker = f"cuda-agent-orphan-{uuid.uuid4().hex}"
    m = judge(tmp_path, cfg, f'''
import subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "{marker}"], start_new_session=True)
''')
    assert m.correct, (m.error, m.error_detail)
    survivors = [p for p in Path("/proc").glob("[0-9]*/cmdline")
                 if marker.encode() in _read(p)]
    assert survivors == []


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def test_solution_code_cannot_write_outside_its_own_directory(tmp_path, cfg, sandbox_cache):
    """Project, task, cache, reference data and /tmp stay unwritable; the capabilities that could
    remount them are gone. The solution returns a wrong result if any write succeeds."""
    task_file = tmp_path / "identity_task.py"
    targets = [str(task_file), str(tmp_path / "new_file"), str(sandbox_cache / "planted"),
               str(Path(__file__).resolve()), f"/tmp/planted-{uuid.uuid4().hex}", "../reference/inputs.pt"]
    m = judge(tmp_path, cfg, f"""
import os

_escaped = []
for _path in {targets!r}:
    try:
        with open(_path, "a") as _fh:
            _fh.write("")
        _escaped.append(_path)
    except OSError:
        pass
with open("/proc/self/status") as _fh:
    _caps = [ln for ln in _fh if ln.startswith("CapEff:")][0].split()[1]
if _escaped or int(_caps, 16) != 0:
    raise SystemExit(f"escaped: {{_escaped}} capabilities: {{_caps}}")
with open("own_file", "w") as _fh:  # its own worker directory stays writable
    _fh.write("ok")
""")
    assert m.isolation.startswith(ISOLATED)
    assert m.correct, (m.error, m.error_detail, m.logs)
    assert not (tmp_path / "new_file").exists() and not (sandbox_cache / "planted").exists()


def cgroups_unavailable() -> str:
    cgroup, why_not = WorkerCgroup.create(64, 0)
    if cgroup is not None:
        cgroup.remove()
    return why_not


@pytest.mark.skipif(bool(cgroups_unavailable()), reason="needs writable cgroups (pids controller)")
def test_process_explosion_stops_at_the_cgroup_cap(tmp_path, sandbox_cache):
    """A solution that forks as many sleeping children as it can gets fewer than max_processes
    (the worker's own threads count too); it then reaps them, so the evaluation itself passes."""
    cfg = SandboxConfig(backend="cpu", cache_dir=str(sandbox_cache), compile_baseline=False,
                        timing=TimingConfig(warmup=1, warmup_ms=0, repeats=2), max_processes=64)
    m = judge(tmp_path, cfg, """
import os
import signal
import time

_children = []
for _ in range(1000):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    _children.append(pid)
for pid in _children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
if len(_children) >= 64:
    raise SystemExit(f"forked {len(_children)} children past the cap")
""")
    assert "cgroup caps: 64 processes" in m.isolation
    assert m.correct, (m.error, m.error_detail)  # capped (no SystemExit), and nothing lingered
