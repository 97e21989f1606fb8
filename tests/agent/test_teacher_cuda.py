"""GPU: every CUDA variant of the teacher, on family tasks at GPU sizes, through the real CUDA
sandbox (nvcc, verification at 1e-4, timing against eager and torch.compile), and one teacher
episode. Run with ``pytest -m gpu tests/agent/test_teacher_cuda.py -s`` (the table of rewards
and speedups is printed)."""
from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from data_gen.family import example_specs, render_task
from sandbox.config import SandboxConfig, TimingConfig
from sandbox.pool import SandboxPool
from src.agent import AgentConfig
from src.agent.teacher import EXPECTED_VERDICT, available, judge_variants, teacher_episodes, verdict_class

pytestmark = pytest.mark.gpu

# The five example specs (every op and ending) at GPU sizes; the last has rows that are not
# float4-aligned (2050 columns), so it has no vectorised variant.
SHAPES = [(8192, 1024), (4096, 4096), (16384, 2048), (2048, 8192), (6000, 2050)]
SPECS = [dataclasses.replace(spec, shape=shape) for spec, shape in zip(example_specs((1, 1)), SHAPES)]


@pytest.fixture(scope="module")
def cuda_pool(sandbox_cache):
    cfg = SandboxConfig(backend="cuda", cache_dir=str(sandbox_cache),
                        timing=TimingConfig(warmup=3, warmup_ms=50.0, repeats=10))
    with SandboxPool(cfg) as pool:
        yield pool


def test_cuda_variants_get_their_verdicts(cuda_pool, tmp_path):
    records = asyncio.run(judge_variants(SPECS, "cuda", cuda_pool, tmp_path))
    for r in records:
        print(json.dumps({k: r.get(k) for k in ("id", "signature", "variant", "error", "reward", "runtime_us",
                                                "eager_us", "compile_us", "speedup_vs_eager", "speedup_vs_compile",
                                                "max_abs_diff")}))
    assert len(records) == sum(len(available(s, "cuda")) for s in SPECS)
    assert "vectorised" not in available(SPECS[-1], "cuda")
    wrong = [r for r in records if verdict_class(r) != EXPECTED_VERDICT[r["variant"]]]
    assert not wrong, wrong
    assert all(r["reward"] >= 1.0 for r in records if verdict_class(r) == "correct")


def test_cuda_teacher_episode(cuda_pool, chat_tokenizer, tmp_path):
    spec = SPECS[0]
    task = tmp_path / f"{spec.id}.py"
    task.write_text(render_task(spec))
    trajs = asyncio.run(teacher_episodes([(spec, task)], 1, cuda_pool, AgentConfig(), "cuda", tmp_path / "t.jsonl",
                                         chat_tokenizer, mix={"naive_fused": 1.0}))
    print("naive_fused reward", trajs[0].reward, trajs[0].final_measurement.get("speedup_vs_eager"))
    assert trajs[0].stop_reason == "finish" and trajs[0].reward >= 1.0
