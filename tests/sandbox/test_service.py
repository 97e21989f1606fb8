"""One pool for many processes (sandbox/service.py): another process submits through a
RemotePool and gets the serving pool's verdicts; a wrong key is refused; a client whose server
goes away gets an error on every pending evaluation instead of waiting forever."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sandbox import SandboxConfig, TimingConfig
from sandbox.pool import EvalRequest, SandboxPool
from sandbox.service import PoolServer, RemotePool

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return {body}
"""

CLIENT = textwrap.dedent("""
    import json, sys
    from sandbox.pool import EvalRequest
    from sandbox.service import RemotePool
    address, key, task, good, bad = sys.argv[1:]
    with RemotePool(address, key.encode(), connect_timeout_s=30) as pool:
        futures = [pool.submit(EvalRequest(name, task, path)) for name, path in (("good", good), ("bad", bad))]
        results = [f.result(timeout=300) for f in futures]
    print(json.dumps({r.id: [r.measurement.correct, r.measurement.error] for r in results}))
""")


@pytest.fixture
def pool(sandbox_cache):
    cfg = SandboxConfig(backend="cpu", cache_dir=str(sandbox_cache), compile_baseline=False, guards=False,
                        timing=TimingConfig(warmup=1, warmup_ms=0, repeats=2), run_timeout_s=60)
    with SandboxPool(cfg) as p:
        yield p


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_another_process_is_judged_by_the_served_pool(pool, small_task, tmp_path):
    good = write(tmp_path / "good" / "model_new.py", SOLUTION.format(body="torch.relu(a + b)"))
    bad = write(tmp_path / "bad" / "model_new.py", SOLUTION.format(body="a + b"))
    address = str(tmp_path / "pool.sock")
    server = PoolServer(pool, address, b"k3y")
    try:
        out = subprocess.run([sys.executable, "-c", CLIENT, address, "k3y", str(small_task), str(good), str(bad)],
                             cwd=ROOT, capture_output=True, text=True, timeout=400)
    finally:
        server.close()
    assert out.returncode == 0, out.stderr[-2000:]
    verdicts = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert verdicts == {"good": [True, None], "bad": [False, "mismatch"]}


def test_a_client_with_the_wrong_key_is_refused(pool, tmp_path):
    address = str(tmp_path / "pool.sock")
    server = PoolServer(pool, address, b"right")
    try:
        with pytest.raises(Exception) as info:
            RemotePool(address, b"wrong", connect_timeout_s=5)
        assert "digest" in str(info.value).lower() or "authentication" in type(info.value).__name__.lower()
        # The refusal did not end the server: a rank with the right key still connects.
        with RemotePool(address, b"right", connect_timeout_s=5):
            pass
    finally:
        server.close()


def test_a_server_that_never_answers_the_handshake_is_a_clear_connection_error(tmp_path):
    import socket

    address = str(tmp_path / "silent.sock")
    with socket.socket(socket.AF_UNIX) as silent:  # listens (the connection is queued), never accepts
        silent.bind(address)
        silent.listen(1)
        with pytest.raises(ConnectionError, match="did not start the key handshake within 1 s"):
            RemotePool(address, b"k", connect_timeout_s=1)


def test_no_server_is_a_clear_connection_error(tmp_path):
    with pytest.raises(ConnectionError, match="no sandbox pool server"):
        RemotePool(str(tmp_path / "nobody.sock"), b"k", connect_timeout_s=0.5)


SERVER = textwrap.dedent("""
    import sys, time
    from sandbox import SandboxConfig, TimingConfig
    from sandbox.pool import SandboxPool
    from sandbox.service import PoolServer
    address, cache = sys.argv[1:]
    cfg = SandboxConfig(backend="cpu", cache_dir=cache, compile_baseline=False, guards=False,
                        timing=TimingConfig(warmup=1, warmup_ms=0, repeats=2))
    server = PoolServer(SandboxPool(cfg), address, b"k")
    print("ready", flush=True)
    time.sleep(600)
""")


def test_pending_evaluations_fail_when_the_server_process_dies(small_task, sandbox_cache, tmp_path):
    slow = write(tmp_path / "slow" / "model_new.py",
                 "import time\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                 "    def forward(self, a, b):\n        time.sleep(60)\n        return torch.relu(a + b)\n")
    address = str(tmp_path / "pool.sock")
    server = subprocess.Popen([sys.executable, "-c", SERVER, address, str(sandbox_cache)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        client = RemotePool(address, b"k", connect_timeout_s=30)
        future = client.submit(EvalRequest("slow", small_task, slow))
        server.kill()
        with pytest.raises(ConnectionError, match="went away"):
            future.result(timeout=60)
        client.close()
    finally:
        server.kill()
        server.wait()
