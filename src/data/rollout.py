"""The rollout DataModule: tasks in, on-policy trajectories out, through the sandbox pool.

    dm = RolloutDataModule(tasks="data/ops_h200/tasks.parquet", sandbox=..., agent=..., ...)
    # PPO stages: each training batch is a list of tasks; the stage calls
    result = dm.rollout(policy, tasks, agent, tag="train", step=global_step)
    result.rows, result.batch (RolloutBatch), result.metrics
    # SFT / value stages: dm.use_trajectories(rows) first, then batches are RolloutBatches

On-policy: ``rollout`` runs episodes with the policy it is given, which wraps the module being
trained (src/agent HFPolicy over the actor's own weights), at the moment the training step asks.
Many episodes are in flight at once (``episodes_in_flight``; their replies are batched by the
policy) and their sandbox work overlaps in the pool. Under DDP every rank runs its own share of
episodes, and all ranks share rank 0's pool (sandbox/service.py), never one pool per rank.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset

from .batch import RolloutBatch, collate_rows
from .tasks import Task, TaskSetError, load_task_set, split_by_column, split_tasks

log = logging.getLogger(__name__)
# Environment that hands rank 0's pool address and key to the other ranks (set by train.py
# before the ranks are launched, so that every rank inherits the same values).
POOL_ADDRESS_ENV, POOL_KEY_ENV = "CUDA_AGENT_POOL_ADDRESS", "CUDA_AGENT_POOL_KEY"
# device_gate settings: auto (gate when the sandbox times on the training device), always, never.
GATE_MODES = ("auto", "always", "never")
# Tags whose rollouts file every batch of a run appends to (a PPO step's episodes, a validation's),
# unlike a sampling batch's file of its own (src/stages/common.collect_trajectories).
SHARED_TAGS = ("train", "val")


class ListDataset(Dataset):
    def __init__(self, items: Sequence[Any]):
        self.items = list(items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Any:
        return self.items[index]


class StepBatches:
    """The training tasks of each step, a function of the step alone: step ``s`` takes batch
    ``s mod n`` of epoch ``s // n``'s order of the tasks (a permutation seeded by the run's seed
    and the epoch; ``n`` batches an epoch), rank ``r`` of ``world`` taking from every
    ``world``-th task of that order, starting at the ``r``-th. An iteration starts at the step the
    trainer is at (``step()``: 0, or a resumed checkpoint's) and runs to the end of that epoch, so
    a resumed run draws the tasks an uninterrupted one draws, and those the stopped run drew for
    the step it was cut off in (whose finished episodes it then takes: RolloutDataModule.rollout's
    ``resume``). A shuffled DataLoader would not: a resumed run restarts its epoch from the first
    batch, in an order drawn from the global RNG, which sampling draws from too. Lightning reads
    this as resumable (``state_dict``): the step it restores is the whole state."""

    def __init__(self, items: Sequence[Any], batch_size: int, seed: int, step: Any, rank: int = 0,
                 world: int = 1):
        self.items, self.batch_size, self.seed, self.step = list(items), batch_size, seed, step
        self.rank, self.world = rank, world

    def __len__(self) -> int:
        return (len(self.items) // self.world) // self.batch_size

    def batch(self, step: int) -> list[Any]:
        per_epoch = len(self)
        epoch, index = divmod(step, per_epoch)
        order = torch.randperm(len(self.items), generator=torch.Generator().manual_seed(self.seed * 100_003 + epoch))
        share = order[:len(self.items) // self.world * self.world][self.rank::self.world]
        return [self.items[i] for i in share[index * self.batch_size:(index + 1) * self.batch_size].tolist()]

    def __iter__(self):
        first = int(self.step())
        for step in range(first, (first // len(self) + 1) * len(self)):
            yield self.batch(step)

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def as_list(items: list) -> list:
    """collate_fn that keeps a batch of tasks (or rows) a plain list."""
    return list(items)


@dataclass
class RolloutResult:
    rows: list[dict[str, Any]]
    batch: Optional[RolloutBatch]
    metrics: dict[str, float] = field(default_factory=dict)


def share_pool_env(output_dir: Path) -> None:
    """Give every rank launched after this call the same pool address and key."""
    os.environ.setdefault(POOL_ADDRESS_ENV, str(output_dir / ".sandbox-pool.sock"))
    os.environ.setdefault(POOL_KEY_ENV, secrets.token_hex(16))


def baselines_cached(task_path: Path, cfg) -> bool:
    """The task's baselines are in the sandbox cache under ``cfg`` (an unusable task file: not
    cached; timing it names the problem)."""
    from sandbox.baselines import cached_baselines
    from sandbox.errors import TaskError

    try:
        return cached_baselines(task_path, cfg) is not None
    except TaskError:
        return False


class RolloutDataModule(pl.LightningDataModule):
    def __init__(self, tasks: str, output_dir: str, sandbox: Mapping[str, Any], reward: str,
                 tasks_per_step: int = 4, samples_per_task: int = 2, val_fraction: float = 0.1,
                 val_max_tasks: int = 16, val_samples_per_task: int = 1, split_seed: int = 0,
                 max_tasks: int = 0, episodes_in_flight: int = 8, drop_stop_reasons: Sequence[str] = (),
                 mask_stop_reasons: Sequence[str] = (), trajectory_batch_size: int = 8, split_column: str = "",
                 device_gate: str = "auto", prewarm_baselines: int = 0, task_order_seed: int = 0):
        super().__init__()
        self.source, self.output_dir = tasks, Path(output_dir)
        self.sandbox_cfg, self.reward_name = dict(sandbox), reward
        self.tasks_per_step, self.samples_per_task = tasks_per_step, samples_per_task
        self.val_fraction, self.val_max_tasks, self.val_samples = val_fraction, val_max_tasks, val_samples_per_task
        self.split_seed, self.max_tasks, self.episodes_in_flight = split_seed, max_tasks, episodes_in_flight
        self.drop_stop_reasons, self.mask_stop_reasons = set(drop_stop_reasons), set(mask_stop_reasons)
        self.trajectory_batch_size, self.split_column = trajectory_batch_size, split_column
        # Seeds the training tasks' order (StepBatches): the run's seed.
        self.task_order_seed = task_order_seed
        if device_gate not in GATE_MODES:
            raise ValueError(f"device_gate={device_gate!r}: expected one of {', '.join(GATE_MODES)}")
        self.gate_mode = device_gate
        if prewarm_baselines < 0:
            raise ValueError(f"prewarm_baselines={prewarm_baselines}: expected 0 (off) or a number of tasks at once")
        self.prewarm_workers = prewarm_baselines
        self._gate: Any = None
        self.train_tasks: list[Task] = []
        self.val_tasks: list[Task] = []
        self.pool = None
        self._server = None
        self._trajectories: Optional[list[dict[str, Any]]] = None
        self.pad_id = 0

    # ------------------------------------------------------------------ set-up

    def prepare(self) -> None:
        """Tasks and split; the same on every rank (deterministic)."""
        if self.train_tasks or self.val_tasks:
            return
        tasks = load_task_set(self.source, self.output_dir / "tasks", self.max_tasks, self.split_column)
        split = split_by_column(tasks, self.val_max_tasks) if self.split_column else \
            split_tasks(tasks, self.val_fraction, self.val_max_tasks, self.split_seed)
        self.train_tasks, self.val_tasks = split.train, split.val
        if not self.train_tasks:
            raise TaskSetError(f"task source {self.source} leaves no training task after the split")

    def setup(self, stage: Optional[str] = None) -> None:
        self.prepare()
        if self.pool is None:
            self.pool = self._connect_pool()
        if self.prewarm_workers and self._trajectories is None and self._is_rank_zero():
            self.prewarm()

    def _is_rank_zero(self) -> bool:
        return self.trainer is None or self.trainer.global_rank == 0

    def prewarm(self) -> None:
        """Time the eager and torch.compile baselines of every training and validation task,
        ``prewarm_workers`` tasks at once, into the sandbox's baseline cache, before the first
        step. Otherwise each task pays them (tens of seconds of torch.compile work on the
        host) on its first rollout, inside a training step, a few tasks at a time. Tasks whose
        baselines are already cached are read here and skipped (no worker starts: a stage that
        follows another on the same host pays nothing); a task the sandbox refuses is logged and
        left to its rollouts (which report it)."""
        from tqdm import tqdm

        from sandbox.baselines_cli import time_tasks

        tasks, cfg = self.train_tasks + self.val_tasks, self.sandbox_config()
        start, refused = time.monotonic(), 0
        todo = [t for t in tasks if not baselines_cached(t.path, cfg)]
        with tqdm(total=len(todo), unit="task", desc="baselines", disable=None) as bar:
            for record in time_tasks([(t.path, t.id) for t in todo], cfg, self.prewarm_workers):
                if "task_error" in record:
                    refused += 1
                    log.warning("baselines of task %s: %s", record["id"], record["task_error"])
                bar.update(1)
        log.info("baselines of %d tasks ready in %.0f s (%d cached before, %d timed %d at once; %d refused)",
                 len(tasks), time.monotonic() - start, len(tasks) - len(todo), len(todo),
                 self.prewarm_workers, refused)

    def sandbox_config(self):
        from sandbox.config import SandboxConfig

        return SandboxConfig.from_dict(self.sandbox_cfg)

    def _connect_pool(self):
        from sandbox.pool import make_pool
        from sandbox.service import PoolServer, RemotePool

        trainer = self.trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        if world == 1:
            return make_pool(self.sandbox_config())
        address, key = os.environ.get(POOL_ADDRESS_ENV), os.environ.get(POOL_KEY_ENV)
        if not address or not key:
            raise RuntimeError(f"{world} ranks but no shared sandbox pool address: train.py sets "
                               f"{POOL_ADDRESS_ENV}/{POOL_KEY_ENV} before the ranks start")
        if rank == 0:
            if not address.count(":") and os.path.exists(address):
                os.unlink(address)  # a socket left by a killed run
            pool = make_pool(self.sandbox_config())
            self._server = PoolServer(pool, address, key.encode())
            log.info("rank 0 serves its sandbox pool to %d other ranks at %s", world - 1, address)
            return pool
        log.info("rank %d judges through the sandbox pool of rank 0 at %s", rank, address)
        return RemotePool(address, key.encode())

    def teardown(self, stage: Optional[str] = None) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self.pool is not None:
            self.pool.close(cancel_pending=True)
            self.pool = None

    # ------------------------------------------------------------------ loaders

    def use_trajectories(self, rows: list[dict[str, Any]], pad_id: int) -> None:
        """SFT / value stages: batches become RolloutBatches of these rows instead of tasks."""
        self._trajectories, self.pad_id = list(rows), pad_id

    def train_dataloader(self) -> DataLoader | StepBatches:
        if self._trajectories is not None:
            return DataLoader(ListDataset(self._trajectories), batch_size=self.trajectory_batch_size, shuffle=True,
                              collate_fn=lambda rows: collate_rows(rows, self.pad_id))
        self.prepare()
        trainer = self.trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        per_rank = len(self.train_tasks) // world
        if per_rank == 0:
            raise TaskSetError(f"{len(self.train_tasks)} training tasks for {world} ranks: each rank needs one")
        return StepBatches(self.train_tasks, min(self.tasks_per_step, per_rank), self.task_order_seed,
                           lambda: trainer.global_step if trainer is not None else 0, rank, world)

    def val_dataloader(self) -> DataLoader:
        self.prepare()
        return DataLoader(ListDataset(self.val_tasks), batch_size=max(1, len(self.val_tasks)), shuffle=False,
                          collate_fn=as_list)

    # ------------------------------------------------------------------ rollouts

    def rollout(self, policy: Any, tasks: Sequence[Task], agent: Any, tag: str, step: int,
                samples: Optional[int] = None, resume: bool = False) -> RolloutResult:
        """Run ``samples`` episodes per task with ``policy`` (``agent``: an AgentConfig), append
        the rows to ``rollouts/<tag>.jsonl``, and return them with their batch and metrics. With
        ``resume``, the episodes that file already holds (a batch cut off by a stopped run, by
        episode id: the same tasks, tag and step give the same ids) are taken as they are and only
        the rest are run, so a sampling stage stopped midway loses no finished episode. Only for
        the batch a (re)started run's weights sampled before: its first, which the stopped run
        drew with the weights it resumes from (a later one's file rows are of other weights)."""
        from src.agent import TrajectoryWriter, run_episodes

        samples = self.samples_per_task if samples is None else samples
        episode_tasks = [t for t in tasks for _ in range(samples)]
        rank = self.trainer.global_rank if self.trainer is not None else 0
        ids = [f"{tag}-s{step:06d}-r{rank}-{i:04d}-{t.id}" for i, t in enumerate(episode_tasks)]
        path = self.output_dir / "rollouts" / f"{tag}.jsonl"
        earlier = self.resumed_rows(path, ids, tag in SHARED_TAGS) if resume else {}
        if earlier:
            log.info("%s: %d of %d episodes already sampled (a stopped run's), sampling the other %d",
                     path.name, len(earlier), len(ids), len(ids) - len(earlier))
        todo = [i for i, eid in enumerate(ids) if eid not in earlier]
        writer = TrajectoryWriter(path, extra={"train_step": step})
        start = time.monotonic()
        trajectories = asyncio.run(run_episodes([episode_tasks[i].path for i in todo], policy, self.pool, agent,
                                                self.sandbox_cfg.get("backend", "cuda"), writer=writer,
                                                concurrency=self.episodes_in_flight,
                                                episode_ids=[ids[i] for i in todo], reward=self.reward_name)) \
            if todo else []
        wall = time.monotonic() - start
        new = {eid: {**t.to_row(), "train_step": step} for eid, t in zip((ids[i] for i in todo), trajectories)}
        rows = [earlier[eid] if eid in earlier else new[eid] for eid in ids]
        kept = self.trainable(rows)
        batch = collate_rows(kept, self.pad_token_id(policy)) if kept else None
        metrics = rollout_metrics(rows, kept, wall)
        if earlier:  # the wall is this run's: its speeds are of the episodes it sampled
            done_now = list(new.values())
            metrics.update({k: v for k, v in rollout_metrics(done_now, self.trainable(done_now), wall).items()
                            if k.startswith("perf/")})
        return RolloutResult(rows, batch, metrics)

    def resumed_rows(self, path: Path, ids: list[str], shared: bool) -> dict[str, dict[str, Any]]:
        """The rows of ``ids`` that ``path`` holds (src.agent.resume_trajectories). Every rank
        appends to a shared file (SHARED_TAGS): rank 0 alone tidies it, before the others read."""
        from src.agent import resume_trajectories

        trainer = self.trainer
        if not shared or trainer is None or trainer.world_size == 1:
            return resume_trajectories(path, ids, shared=shared)
        if trainer.global_rank == 0:
            resume_trajectories(path, ids, shared=True)
        trainer.strategy.barrier()
        return resume_trajectories(path, ids, shared=True, tidy=False)

    def trainable(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Drop rows whose ids cannot train (``drop_stop_reasons``), zero the policy mask of rows
        that should not teach (``mask_stop_reasons``), keep the rest as they are."""
        kept = []
        for row in rows:
            reason = row.get("stop_reason", "")
            if reason in self.drop_stop_reasons or not row.get("token_ids"):
                continue
            if reason in self.mask_stop_reasons:
                row = dict(row, loss_mask=[0] * len(row["loss_mask"]))
            kept.append(row)
        return kept

    def device_gate(self):
        """Held around generation and updates when the sandbox times on the device training
        uses (sandbox/gate.py: the lanes hold the same gate), so that no timed run overlaps
        them; a no-op when the devices differ or ``device_gate=never``."""
        if self._gate is None:
            from sandbox.gate import DeviceGate

            key = self._gate_key()
            self._gate = DeviceGate(key) if key else contextlib.nullcontext()
            log.info("device gate: %s", f"generation and updates hold {key}" if key else "off")
        return self._gate

    def gate_wait_s(self) -> float:
        """Seconds training has waited for the device gate so far (lanes were timing)."""
        return float(getattr(self._gate, "waited_s", 0.0))

    def _gate_key(self) -> Optional[str]:
        from sandbox.gate import gate_key, gate_key_for_torch_device
        from sandbox.pool import visible_devices

        if self.gate_mode == "never":
            return None
        trainer = self.trainer
        device = trainer.strategy.root_device if trainer is not None else torch.device("cpu")
        key = gate_key_for_torch_device(device)
        if device.type == "cpu" and trainer is not None and trainer.world_size > 1:
            # Ranks sharing the host would share its gate, and an update holds the gate across
            # gradient all-reduces: one rank waiting for the gate would stall them all.
            if self.gate_mode == "always":
                raise ValueError(f"device_gate=always with {trainer.world_size} ranks on the CPU would deadlock "
                                 "(they share one gate across their collectives): use auto or never")
            return None
        if self.gate_mode == "always":
            return key
        cfg = self.sandbox_config()
        lanes = cfg.devices or visible_devices(cfg.backend)
        return key if key in {gate_key(cfg.backend, d) for d in lanes} else None

    @staticmethod
    def pad_token_id(policy: Any) -> int:
        tok = policy.tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id


# The reward every stage also reads its episodes by, whatever it trains on: the paper's, so
# that runs trained on other rewards (binary, continuous) compare on one scale.
COMMON_REWARD = "graduated"


def reward_under(row: dict[str, Any], reward_name: str) -> float:
    """The episode's reward read by another reward (sandbox.reward.REWARDS), from the measurement
    its own reward was taken from (``reward_source``: final or best); -1 where there is none, as
    the episode's own reward counts it."""
    from sandbox.measurement import Measurement
    from sandbox.reward import reward_fn

    measured = row.get(f"{row.get('reward_source', 'final')}_measurement")
    return reward_fn(reward_name)(Measurement.from_dict(measured)) if measured else -1.0


def rollout_metrics(rows: list[dict[str, Any]], kept: list[dict[str, Any]], wall_s: float) -> dict[str, float]:
    """The rollout/ metrics of one batch of episodes (the README's metric table explains each)."""
    from sandbox.reward import meaningfully_faster

    n = max(len(rows), 1)

    def share(pred) -> float:
        return sum(1 for r in rows if pred(r)) / n

    def ok(m: Optional[dict]) -> bool:
        return bool(m) and bool(m.get("correct")) and not m.get("violations") and m.get("error") is None

    def faster(m: Optional[dict], baseline: str) -> bool:
        return ok(m) and meaningfully_faster(m.get("runtime_us"), m.get(baseline))

    def reward(r: dict) -> float:
        return float(r["reward"]) if r["reward"] is not None else -1.0

    def best_reward(r: dict) -> float:
        return float(r["best_reward"]) if r.get("best_reward") is not None else reward(r)

    calls = sum(len(t["tool_calls"]) + len(t["parse_errors"]) for r in rows for t in r["turns"])
    failed_calls = sum(r.get("invalid_tool_calls", 0) for r in rows)
    metrics = {
        "rollout/reward_mean": sum(reward(r) for r in rows) / n,
        f"rollout/{COMMON_REWARD}_reward_mean": sum(reward_under(r, COMMON_REWARD) for r in rows) / n,
        "rollout/pass_rate": share(lambda r: ok(r.get("final_measurement"))),
        "rollout/faster_than_eager": share(lambda r: faster(r.get("final_measurement"), "eager_us")),
        "rollout/faster_than_compile": share(lambda r: faster(r.get("final_measurement"), "compile_us")),
        # The paper's evaluation rule: an episode counts its best correct workspace state (the
        # reward of the final one where none was correct). Multi-turn only differs from the above.
        "rollout/best_reward_mean": sum(best_reward(r) for r in rows) / n,
        "rollout/best_pass_rate": share(lambda r: ok(r.get("best_measurement"))),
        "rollout/best_faster_than_compile": share(lambda r: faster(r.get("best_measurement"), "compile_us")),
        "rollout/turns_mean": sum(r["num_turns"] for r in rows) / n,
        "rollout/tool_error_rate": failed_calls / max(calls, 1),
        "rollout/length_clipped_ratio": share(lambda r: r["stop_reason"] == "context_limit"
                                              or any(t["finish_reason"] == "length" for t in r["turns"][-1:])),
        "rollout/episodes": float(len(rows)),
        "rollout/dropped_episodes": float(len(rows) - len(kept)),
        "rollout/drift_episodes": float(sum(1 for r in rows if r["stop_reason"] == "template_drift")),
        "rollout/tokens_mean": sum(r["num_tokens"] for r in rows) / n,
        "perf/rollout_s": wall_s,
    }
    generate = sum(r["timings"].get("generate_s", 0.0) for r in rows)
    tools = sum(r["timings"].get("sandbox_s", 0.0) for r in rows)
    busy = max(generate + tools, 1e-9)
    # Episodes overlap, so their own seconds add up to more than the wall: split the wall by share.
    metrics["perf/generation_s"] = wall_s * generate / busy
    metrics["perf/sandbox_s"] = wall_s * tools / busy
    generated = sum(sum(r["loss_mask"]) for r in rows)
    metrics["perf/rollout_tokens_per_s"] = generated / max(wall_s, 1e-9)
    return metrics

