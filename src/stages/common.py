"""What the stage modules share, as functions (no base class): optimiser steps that count once,
gradient clipping, micro-batching, checkpoint initialisation, the rollout policy, memory."""
from __future__ import annotations

import resource
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

import torch
from torch import nn

from src.data.batch import RolloutBatch


class InitError(ValueError):
    """``init_from`` names a checkpoint that is missing or lacks what the stage needs."""


def step_uncounted(optimizer: Any) -> None:
    """Step a LightningOptimizer without advancing ``trainer.global_step``. In manual
    optimisation Lightning counts every optimizer step, so with an actor and a critic optimiser
    one PPO update would count twice and ``trainer.max_steps`` would mean half as many updates;
    the actor's step is the one that counts."""
    before, after = optimizer._on_before_step, optimizer._on_after_step
    optimizer._on_before_step = optimizer._on_after_step = lambda: None
    try:
        optimizer.step()
    finally:
        optimizer._on_before_step, optimizer._on_after_step = before, after


def clip_grad_norm(module: nn.Module, max_norm: float) -> torch.Tensor:
    """Clip the gradients of ``module``'s trainable parameters; return the norm before clipping
    (inf for "no limit" still measures it)."""
    params = [p for p in module.parameters() if p.requires_grad and p.grad is not None]
    if not params:
        return torch.zeros(())
    limit = max_norm if max_norm > 0 else float("inf")
    return torch.nn.utils.clip_grad_norm_(params, limit)


def micro_batches(batch: RolloutBatch, size: int) -> Iterator[RolloutBatch]:
    """Consecutive sub-batches of at most ``size`` rows (0: the whole batch)."""
    size = size if size > 0 else len(batch)
    for start in range(0, len(batch), size):
        yield batch.rows(slice(start, start + size))


def pad_to(x: torch.Tensor, width: int) -> torch.Tensor:
    """Right-pad a [B, t] tensor with zeros to [B, width] (micro-batches are trimmed)."""
    return torch.nn.functional.pad(x, (0, width - x.shape[1])) if x.shape[1] < width else x


def freeze(module: Optional[nn.Module]) -> None:
    """Frozen parts are carried (and checkpointed) but not trained, and DDP does not track them."""
    if module is not None:
        module.requires_grad_(False)


def load_init(module: nn.Module, path: str | Path, need: tuple[str, ...], fresh: tuple[str, ...] = ()) -> dict[str, int]:
    """Load the ``actor.`` / ``critic.`` weights of a Lightning checkpoint of any stage into the
    module's parts of the same name. Each name in ``need`` must be present in the checkpoint;
    other parts present in both are loaded too (a stage carries what it does not train, so
    the next stage finds it), but those in ``fresh``, which keep their newly built weights.
    Returns the number of tensors loaded per part."""
    if set(fresh) & set(need):
        raise InitError(f"init_fresh {list(fresh)}: this stage needs {list(need)} from init_from")
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / "checkpoints" / "last.ckpt" if (path / "checkpoints" / "last.ckpt").exists() else path / "last.ckpt"
    if not path.is_file():
        raise InitError(f"init_from {path}: no such checkpoint (give a .ckpt file or a run directory)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
    except Exception as exc:
        raise InitError(f"init_from {path}: not a Lightning checkpoint ({type(exc).__name__}: {exc})") from None
    loaded = {}
    for part in (p for p in ("actor", "critic") if p not in fresh):
        target = getattr(module, part, None)
        weights = {k[len(part) + 1:]: v for k, v in state.items() if k.startswith(part + ".")}
        if part in need and not weights:
            raise InitError(f"init_from {path} holds no {part} weights; this stage needs them "
                            f"(parts present: {sorted({k.split('.', 1)[0] for k in state})})")
        if target is None or not weights:
            continue
        missing, unexpected = target.load_state_dict(weights, strict=False)
        if unexpected or (missing and part in need):
            raise InitError(f"init_from {path}: the {part} does not match this model "
                            f"({len(missing)} missing, {len(unexpected)} unexpected tensors, e.g. "
                            f"{(missing or unexpected)[:3]}); was it trained with another model config?")
        loaded[part] = len(weights)
    return loaded


def peak_memory_gb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2 ** 30
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20


# The sampling field that held-out episodes sample at instead of the rollouts' temperature.
VAL_TEMPERATURE = "val_temperature"


def make_policy(actor: Any, device: torch.device, sampling: dict[str, Any], gate: Any = None) -> Any:
    """The rollout policy over the actor's own module (on-policy: no copy); ``gate`` (a context
    manager factory) is held around each generation, so that timing on a GPU shared with
    training never overlaps it."""
    from src.agent import HFPolicy

    rollout = {k: v for k, v in sampling.items() if k != VAL_TEMPERATURE}
    return HFPolicy(model=actor.generation_model, tokenizer=actor.tokenizer, name=actor.name,
                    generation_gate=gate, **rollout)


@contextmanager
def back_on_root_device(module: Any, needed: bool = True) -> Iterator[None]:
    """Inside the block, the module is on its strategy's device again. Lightning's teardown moves
    it to the CPU before ``on_fit_end``, so work on the model there (a resumed run's owed
    held-out episodes) would otherwise generate on the host's cores, beside the CPU sandbox
    timing kernels on them, and far slower. Afterwards it is left where the teardown put it.
    ``needed=False``: the block runs where the module is."""
    left_on, root = module.device, module.trainer.strategy.root_device
    if not needed or left_on == root:
        yield
        return
    module.to(root)
    try:
        yield
    finally:
        module.to(left_on)
        if root.type == "cuda":
            torch.cuda.empty_cache()


def token_share(module: Any, local_tokens: float) -> float:
    """Factor that turns this rank's token mean into its part of the mean over every rank's
    tokens once DDP averages the gradients: world_size * local / global."""
    trainer = module.trainer
    if trainer.world_size == 1:
        return 1.0
    total = trainer.strategy.reduce(torch.tensor(local_tokens, device=module.device), reduce_op="sum")
    return trainer.world_size * local_tokens / max(float(total), 1.0)


@contextmanager
def gradient_sync(module: Any, last: bool) -> Iterator[None]:
    """Under DDP, all-reduce gradients only on the last micro-batch of an update."""
    strategy = module.trainer.strategy
    if last or not hasattr(strategy, "block_backward_sync"):
        yield
        return
    with strategy.block_backward_sync():
        yield


def collect_trajectories(module: Any, agent: Any, rounds: int, tag: str = "sample") -> list[dict[str, Any]]:
    """Multi-turn episodes of the module's actor on the training tasks, ``rounds`` per task,
    each rank its share; rows go to ``rollouts/<tag>.rank<r>.jsonl``. A rerun (a resumed stage)
    reads the files instead of sampling again, and one whose sampling was cut off samples only
    the episodes its file lacks (RolloutDataModule.rollout's ``resume``). Returns every rank's rows."""
    from src.agent import read_trajectories

    trainer, dm = module.trainer, module.trainer.datamodule
    rank, world = trainer.global_rank, trainer.world_size
    directory = dm.output_dir / "rollouts"
    done = directory / f"{tag}.rank{rank}.done"
    if not done.exists():
        own = dm.train_tasks[rank::world]
        policy = make_policy(module.actor, module.device, module.sampling, dm.device_gate)
        try:
            dm.rollout(policy, own, agent, f"{tag}.rank{rank}", 0, samples=rounds, resume=True)
        finally:
            policy.close()
        done.touch()
    trainer.strategy.barrier()
    rows = []
    for r in range(world):
        path = directory / f"{tag}.rank{r}.jsonl"
        rows += read_trajectories(path) if path.exists() else []
    return rows


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Trajectory rows of a JSONL file written by the agent (eval.py, a sampling stage)."""
    from src.agent import read_trajectories

    path = Path(path).expanduser()
    if not path.is_file():
        raise InitError(f"trajectory file {path} does not exist")
    rows = [r for r in read_trajectories(path) if r.get("token_ids")]
    if not rows:
        raise InitError(f"trajectory file {path} holds no token-level rows (text-only policies cannot train)")
    return rows


def validation_temperature(sampling: dict[str, Any], val_samples: int) -> Optional[float]:
    """The temperature held-out episodes sample at (None: the rollouts'). Greedy (0) decoding
    takes one path per task, so a validation judges the actor without sampling noise: the same
    actor judged twice writes the same replies until a tool output's measured times differ
    (on the family: 0.026 apart in reward mean against 0.50 sampled, docs/family.md), and a
    before/after difference is the policy's change, not a re-roll. More than one greedy
    episode per task would nearly repeat it, and is refused."""
    temperature = sampling.get(VAL_TEMPERATURE)
    if temperature is None:
        return None
    if float(temperature) < 0:
        raise ValueError(f"sampling.{VAL_TEMPERATURE}={temperature}: expected >= 0 (0: greedy) or null")
    if float(temperature) == 0 and val_samples > 1:
        raise ValueError(f"sampling.{VAL_TEMPERATURE}=0 (greedy) with data.val_samples_per_task={val_samples}: "
                         "greedy episodes of one task repeat each other; use 1")
    return float(temperature)


def heldout_metrics(module: Any, tasks: list, policy: Any, resume: bool = False) -> dict[str, float]:
    """Episodes on held-out tasks with the current actor; their rollout metrics as val/*.
    ``resume``: the episodes of this validation that a stopped run finished are taken, not run
    again (RolloutDataModule.rollout)."""
    dm = module.trainer.datamodule
    temperature = validation_temperature(module.sampling, dm.val_samples)
    with policy.sampling_at(temperature):
        result = dm.rollout(policy, tasks, module.agent, "val", int(module.global_step), samples=dm.val_samples,
                            resume=resume)
    return {k.replace("rollout/", "val/"): v for k, v in result.metrics.items() if k.startswith("rollout/")}


def validate_with_episodes(module: Any, tasks: list, policy: Any) -> None:
    """Lightning's validation step: held-out metrics, averaged over ranks by Lightning."""
    module.log_dict(heldout_metrics(module, tasks, policy), batch_size=len(tasks), sync_dist=True)


# The step the held-out metrics of the starting actor are logged at.
BEFORE_TRAINING_STEP = -1
# Where a stage's checkpoint records the training step whose validation last finished.
VALIDATED_STEP = "validated_step"


def validate_before_training(module: Any, policy: Any) -> Optional[dict[str, float]]:
    """Held-out episodes with the actor the stage starts from, logged as val/* at step -1 (a
    validation logged at step k follows update k, counted from 0; -1: before any): the "before"
    point of a held-out comparison, judged in the same run, with the same tasks and sandbox as
    the points after training (Lightning validates only after training steps).
    Each rank runs its share of the held-out tasks (padded as Lightning's distributed sampler
    pads, so every rank has some); the metrics are the mean over ranks, as at a validation step.
    Returns them, or None when validation is off (no held-out task, ``limit_val_batches=0``)."""
    metrics = validate_outside_loop(module, policy, BEFORE_TRAINING_STEP)
    if metrics is not None:
        module.print("held-out before training: " + headline(metrics))
    return metrics


def validation_owed(trainer: Any, validated_step: Optional[int]) -> bool:
    """Whether a resumed run starts at a validation point whose validation did not finish: its
    checkpoint is the step's own, written before the validation, and Lightning, resuming from
    it, goes on to the next step without validating (measured with lightning 2.6:
    tests/train/test_resume.py). ``validated_step``: the step of the last validation
    that finished, as the checkpoint recorded it (None: a checkpoint from before this was
    recorded, taken as validated)."""
    step, every = int(trainer.global_step), trainer.val_check_batch
    if step == 0 or validated_step is None or validated_step >= step:
        return False
    if not trainer.limit_val_batches or every in (None, float("inf")):
        return False
    if not getattr(trainer.datamodule, "val_tasks", None):
        return False
    return step % int(every) == 0


def validate_owed(module: Any, policy: Any) -> Optional[dict[str, float]]:
    """The validation a resumed run's checkpoint step owes (``validation_owed``), logged where
    Lightning logs it (step k - 1 after update k - 1, counted from 0). Returns the metrics."""
    metrics = validate_outside_loop(module, policy, int(module.global_step) - 1)
    if metrics is not None:
        module.print(f"held-out at step {module.global_step} (owed by the checkpoint resumed from; replies "
                     f"generated on {getattr(policy, 'device', 'the policy')}): " + headline(metrics))
    return metrics


def validate_outside_loop(module: Any, policy: Any, step: int) -> Optional[dict[str, float]]:
    """Held-out episodes run outside Lightning's validation loop, logged as val/* at ``step`` and
    on disk at once, whatever the logger's flush rule (a stage stopped right after keeps them:
    scripts/family_pipeline.py banks a start validation). Each rank runs its share of the
    held-out tasks; the metrics are the mean over ranks. None when validation is off.
    Both such validations come first in a (re)started run and judge the weights it starts from,
    those a stopped run's validation of the same step judged: its finished episodes are taken."""
    trainer = module.trainer
    dm = trainer.datamodule
    if not dm.val_tasks or not trainer.limit_val_batches:
        return None
    tasks = rank_share(dm.val_tasks, trainer.global_rank, trainer.world_size)
    metrics = mean_over_ranks(heldout_metrics(module, tasks, policy, resume=True), trainer.world_size)
    for logger in module.loggers:
        logger.log_metrics(metrics, step=step)
        logger.save()
    return metrics


def headline(metrics: dict[str, float]) -> str:
    """The held-out numbers a log line shows."""
    return ", ".join(f"{k} {v:.3f}" for k, v in sorted(metrics.items())
                     if k in ("val/reward_mean", "val/pass_rate", "val/faster_than_compile"))


def rank_share(items: list, rank: int, world: int) -> list:
    """This rank's items, every ``world``-th from ``rank``, the list wrapped round so that every
    rank gets ceil(n / world) (the padding of torch's DistributedSampler without shuffling)."""
    per_rank = -(-len(items) // world)
    return [items[i % len(items)] for i in range(rank, per_rank * world, world)]


def mean_over_ranks(metrics: dict[str, float], world: int) -> dict[str, float]:
    """Each metric's mean over the ranks that have it (ranks may differ in keys: a metric of
    passing episodes only exists where one passed)."""
    if world == 1:
        return metrics
    import torch.distributed as dist

    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, metrics)
    keys = sorted({k for m in gathered for k in m})
    return {k: sum(m[k] for m in gathered if k in m) / sum(1 for m in gathered if k in m) for k in keys}
