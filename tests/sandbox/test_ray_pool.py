"""The Ray backend of the sandbox pool, against a real local Ray instance (CPU only)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from sandbox import SandboxConfig, TimingConfig
from sandbox.pool import EvalRequest, make_pool
from sandbox.ray_pool import pack_request, unpack_request

ray = pytest.importorskip("ray")

FAST = TimingConfig(warmup=1, warmup_ms=0, repeats=2)


def python_solution(directory: Path, body: str) -> Path:
    directory.mkdir(parents=True)
    path = directory / "model_new.py"
    path.write_text("import os\nimport time\n\nimport torch\nimport torch.nn as nn\n\n\n"
                    "class ModelNew(nn.Module):\n    def forward(self, a, b):\n"
                    + "\n".join("        " + ln for ln in body.splitlines()) + "\n")
    return path


@pytest.fixture(scope="module")
def ray_pool(sandbox_cache):
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    cfg = SandboxConfig(backend="cpu", cache_dir=str(sandbox_cache), compile_baseline=False, guards=False,
                        timing=FAST, pool_backend="ray", ray_actors=1)
    pool = make_pool(cfg, workers=2)
    yield pool
    pool.close()
    ray.shutdown()


def test_ray_actors_judge_requests_by_value(ray_pool, small_task, tmp_path):
    requests = [EvalRequest("good", small_task, python_solution(tmp_path / "g", "return torch.relu(a + b)")),
                EvalRequest("wrong", small_task, python_solution(tmp_path / "w", "return a - b")),
                EvalRequest("crash", small_task, python_solution(tmp_path / "c", "os._exit(9)"))]
    results = {r.id: r for r in ray_pool.map(requests)}
    assert set(results) == {"good", "wrong", "crash"}
    assert results["good"].measurement.correct, results["good"].measurement.error_detail
    assert results["wrong"].measurement.error == "mismatch"
    assert results["crash"].measurement.error == "crash"


def test_a_killed_actor_is_restarted_and_its_evaluation_retried(ray_pool, small_task, tmp_path):
    slow = python_solution(tmp_path / "s", "time.sleep(4)\nreturn torch.relu(a + b)")
    future = ray_pool.submit(EvalRequest("retried", small_task, slow))
    time.sleep(3)
    ray.kill(ray_pool.actors[0], no_restart=False)
    result = future.result(timeout=300)
    assert result.id == "retried"
    assert result.measurement.correct, (result.measurement.error, result.measurement.error_detail)


def test_packed_solution_files_cannot_leave_their_directory(small_task, tmp_path):
    payload = pack_request(EvalRequest("x", small_task, python_solution(tmp_path / "p", "return a")))
    payload["files"] = {"../../escape.py": b"print('out')"}
    with pytest.raises(ValueError, match="outside"):
        unpack_request(payload, tmp_path / "unpacked")
    assert not (tmp_path / "escape.py").exists()
