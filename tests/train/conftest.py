"""Training test support: a tiny real HF model + tokenizer made here (no download), the real
train.yaml composed with overrides that shrink everything to seconds on a CPU, and a runner for
train.py as a user types it."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

# Tiny models gain nothing from intra-op threads, and on a shared 2-core machine (CI, or tests
# running beside sandbox workers) spinning thread pools made each small matmul ~30x slower.
torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_TASKS = ROOT / "examples" / "kernelbench_sample"
# The task and solution of the expert trajectory (a real episode with reward > 0, for RFT).
EXPERT_TASK = SAMPLE_TASKS / "level1" / "1_ReLU.py"
EXPERT_SOLUTION = ROOT / "examples" / "kernelbench_sample_solutions" / "cpu" / "level1" / "1_ReLU"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised Llama of ~50k parameters with this project's BPE tokenizer and chat
    template, saved like any HF model (train.py loads it by path)."""
    import torch
    from transformers import LlamaForCausalLM

    from src.agent.episode import AgentConfig, system_prompt, task_prompt
    from src.agent.offline_model import build_chat_tokenizer, small_model_config
    from src.agent.workspace import Workspace

    cfg = AgentConfig()
    workspace = Workspace.create("", "cpu")
    try:
        corpus = [system_prompt(workspace, cfg)]
    finally:
        workspace.cleanup()
    corpus += [task_prompt(p.read_text(), cfg) for p in sorted(SAMPLE_TASKS.rglob("*.py"))]
    tokenizer = build_chat_tokenizer(corpus, vocab_size=512)
    config = small_model_config(tokenizer, "tiny", max_positions=8192)
    config.hidden_size, config.intermediate_size, config.num_attention_heads, config.num_key_value_heads = 32, 64, 2, 2
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    out = tmp_path_factory.mktemp("tiny_model")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def small_overrides(model_dir: Path, out_dir: Path, sandbox_cache: Path, device: str = "cpu") -> list[str]:
    """Every size at its smallest: 2 steps of 2 short episodes, cheap timing. ``device="cuda"``:
    training on the GPU, the sandbox timing on it too (the GPU tests)."""
    trainer, sandbox = ("trainer=gpu", "sandbox.backend=cuda") if device == "cuda" else ("trainer=cpu", "sandbox=cpu")
    return [f"model.actor.name_or_path={model_dir}", f"output_dir={out_dir}", trainer,
            "trainer.max_steps=2", "trainer.val_check_interval=100", "trainer.enable_progress_bar=false",
            sandbox, f"sandbox.cache_dir={sandbox_cache}", "sandbox.compile_baseline=false",
            "sandbox.timing.warmup=1", "sandbox.timing.warmup_ms=0", "sandbox.timing.repeats=3",
            "sandbox.build_workers=1", "data.tasks_per_step=1", "data.samples_per_task=2",
            "data.episodes_in_flight=2", "data.val_max_tasks=1", "agent.max_turns=2",
            "agent.max_new_tokens_per_turn=12", "agent.max_consecutive_invalid=1",
            "sampling.max_batch=2", "export_actor=false"]


@pytest.fixture
def compose_train(tiny_model_dir: Path, tmp_path: Path, sandbox_cache: Path) -> Callable[..., Any]:
    """The real conf/train.yaml composed with small_overrides() and then ``extra`` overrides."""
    from hydra import compose, initialize_config_dir

    import train  # registers the config resolvers

    def make(*extra: str, out_dir: Path | None = None, device: str = "cpu", model: tuple[str, ...] = ()):
        """``model``: overrides choosing another model in place of the tiny test model's path."""
        overrides = small_overrides(tiny_model_dir, out_dir or tmp_path / "run", sandbox_cache, device)
        overrides = ([o for o in overrides if not o.startswith("model.actor.name_or_path=")] + list(model)
                     if model else overrides) + list(extra)
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            return compose(config_name="train", overrides=overrides)

    assert train.ROOT == ROOT
    return make


@pytest.fixture
def run_train(tiny_model_dir: Path, sandbox_cache: Path) -> Callable[..., subprocess.CompletedProcess]:
    """``python train.py ARGS`` in a subprocess from the repository root."""

    def run(out_dir: Path, *extra: str, timeout: float = 600, small: bool = True, **popen: Any):
        args = (small_overrides(tiny_model_dir, out_dir, sandbox_cache) if small else []) + list(extra)
        env = dict(os.environ, CUDA_AGENT_CACHE=str(sandbox_cache), PYTHONUNBUFFERED="1")
        return subprocess.run([sys.executable, "train.py", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=timeout, **popen)

    return run


@pytest.fixture(scope="session")
def expert_trajectories(tiny_model_dir, sandbox_cache, tmp_path_factory) -> Path:
    """One real expert episode (write, compile, verify, profile, finish through the CPU sandbox)
    tokenised with the tiny model's tokenizer: a trajectory with reward > 0 for RFT."""
    from transformers import AutoTokenizer

    from sandbox.config import SandboxConfig, TimingConfig
    from sandbox.pool import SandboxPool
    from src.agent import AgentConfig, TrajectoryWriter
    from src.agent.offline_model import expert_episode

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    cfg = SandboxConfig(backend="cpu", cache_dir=str(sandbox_cache), compile_baseline=False,
                        timing=TimingConfig(warmup=1, warmup_ms=0.0, repeats=3), build_workers=1)
    path = tmp_path_factory.mktemp("expert") / "expert.jsonl"
    with SandboxPool(cfg) as pool:
        episode = expert_episode(EXPERT_TASK, EXPERT_SOLUTION, tokenizer, pool, AgentConfig(max_turns=12), "cpu",
                                 reward="graduated")
        traj = asyncio.run(episode)
    assert traj.reward is not None and traj.reward > 0, (traj.stop_reason, traj.final_measurement)
    TrajectoryWriter(path).append(traj)
    return path


def read_wandb_records(run_dir: Path) -> list:
    """The protobuf records of an offline W&B run file (W&B's log format: a 7-byte file header,
    then 32 KiB blocks of records, each with a 7-byte header: crc, length, type; a record larger
    than a block's rest continues in the next block)."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data = next(run_dir.glob("*.wandb")).read_bytes()
    records, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        block_left = 32768 - pos % 32768
        if block_left < 7:
            pos += block_left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += block_left  # zero padding to the block's end
            continue
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


@pytest.fixture(scope="session")
def wandb_records() -> Callable[[Path], list]:
    """read_wandb_records, for tests that check what an offline W&B run holds."""
    return read_wandb_records


def write_metrics_csv(stage_dir: Path, rows: list[dict]) -> None:
    """A stage's metrics.csv as Lightning's CSV logger writes it: one column per key, blanks
    where a row lacks one (for tests of the scripts that read runs)."""
    stage_dir.mkdir(parents=True, exist_ok=True)
    keys = sorted({k for r in rows for k in r})
    lines = [",".join(keys)] + [",".join(str(r.get(k, "")) for k in keys) for r in rows]
    (stage_dir / "metrics.csv").write_text("\n".join(lines) + "\n")


def finished_stage(runs: Path, rel: str, seed: int = 0) -> Path:
    """A family-pipeline stage directory as train.py leaves it: a Lightning checkpoint (weights,
    optimizer and loop state) and the pipeline's done marker (for tests of the scripts that
    carry runs between machines)."""
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))
    import family_pipeline

    stage = runs / rel
    (stage / "checkpoints").mkdir(parents=True)
    torch.manual_seed(seed)
    state = {"actor.w": torch.randn(300, 100), "critic.v": torch.randn(100)}
    torch.save({"state_dict": state, "optimizer_states": [{"exp_avg": torch.randn(300, 100)}], "global_step": 3},
               stage / "checkpoints" / "last.ckpt")
    (stage / family_pipeline.DONE).write_text("{}\n")
    return stage
