"""The paper's pipeline on the task family, from a behaviour-cloned actor
(scripts/make_family_actor.py): single-turn warm-up PPO -> RFT -> value pretraining -> agentic
PPO, each stage one ``train.py`` run whose ``init_from`` is the previous stage's output, for
every seed, reward (graduated / binary / continuous) and ablation:

    full      warm-up -> RFT -> value pretraining (on RFT's sampled trajectories) -> PPO
    no_rft    warm-up -> value pretraining (trajectories sampled by the warm-up actor) -> PPO
    no_value  warm-up -> RFT -> PPO with a fresh critic (the RFT actor alone: actor_only.ckpt)

Stages that runs share are run once (no_value reuses full's warm-up and RFT; with
--reward-stages agentic, every reward's PPO starts from one graduated-reward warm-up, RFT and
value pretraining). Every PPO stage's held-out points include the actor it starts from, judged
before its first update, once per seed and starting actor (the others name the stage that did
in start_validation.json; scripts/plot_family.py reads it). A stage whose
directory holds pipeline_done.json is skipped; one with a checkpoint but no marker (killed) is
resumed (ckpt_path=last); so a killed command, rerun, continues where it stopped. With
--time-budget-s no stage starts after the budget and a running one is stopped at it (exit 3:
rerun to continue). On another machine, finished stages continue from the small files and the
weights the last one exported (--export-weights / --import-weights: scripts/family_state.py).

Launch lines (from the repository root; the tasks are the CPU family, so the sandbox is the CPU
one; the model trains on --trainer's device):
    # CPU, a toy run (one seed, graduated reward, the full pipeline, a few steps per stage):
    python scripts/family_pipeline.py --actor outputs/family/actor --out outputs/family/runs \\
        --seeds 0 --rewards graduated --ablations full --steps 2,2,2,3 --tasks-per-step 2
    # One GPU, the 3-seed curves and the ablations (rerun until it exits 0; each call <= 10 min):
    python scripts/family_pipeline.py --actor outputs/family/actor --out outputs/family/runs \\
        --trainer gpu --seeds 0,1,2 --rewards graduated,binary,continuous --ablations full,no_rft,no_value \\
        --time-budget-s 540
    # ... the same with the seeds' chains at once (the host's cores judge every chain's episodes;
    # unpinned lanes, so the pools do not all land on the same cores; timing stays exclusive):
    #   --jobs 3 --set sandbox.lane_cpus=0 --set sandbox.lane_slots=4
    python scripts/plot_family.py --runs outputs/family/runs --out docs/figures

Layout: <out>/<reward>/seed<k>/{warmup, rft, rft_actor_only, value, value_no_rft,
agentic_full, agentic_no_rft, agentic_no_value; with --judge-starts, judge_rft, judge_warmup}/
(each a train.py output_dir: metrics.csv, checkpoints/, rollouts/), and <out>/pipeline.jsonl (one
line per stage run: command, status, seconds, the host it ran on).
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

import family_state
import plot_family

ROOT = Path(__file__).resolve().parent.parent
REWARDS = ("graduated", "binary", "continuous")
ABLATIONS = ("full", "no_rft", "no_value")
DONE = "pipeline_done.json"
# Exit status when the time budget ran out before every stage was done (rerun to continue).
INCOMPLETE = 3
# pipeline.jsonl is appended to by every chain running at once (--jobs).
LOG_LOCK = threading.Lock()


@dataclass(frozen=True)
class Stage:
    """One train.py run: its directory name, the train.py stage, and where it starts from."""

    name: str
    stage: str
    # The stage directory whose checkpoint is init_from ("": the BC actor as configured).
    init: str = ""
    # value stages: the stage directory whose sampled trajectories are fitted ("": sample).
    trajectories: str = ""
    # Judges its start actor on the held-out tasks and stops (stage.module.judge_only): the
    # before point of PPO stages whose after point another kind of host judged.
    judge: bool = False


# Every stage any ablation needs; an ablation needs its agentic stage and what that starts from.
STAGES = {s.name: s for s in (
    Stage("warmup", "warmup"),
    Stage("rft", "rft", init="warmup"),
    Stage("value", "value_pretrain", init="rft", trajectories="rft"),
    Stage("value_no_rft", "value_pretrain", init="warmup"),
    Stage("agentic_full", "agentic_rl", init="value"),
    Stage("agentic_no_rft", "agentic_rl", init="value_no_rft"),
    Stage("agentic_no_value", "agentic_rl", init="rft_actor_only"),
    Stage(plot_family.JUDGE["full"], "agentic_rl", init="value", judge=True),
    Stage(plot_family.JUDGE["no_rft"], "agentic_rl", init="value_no_rft", judge=True),
)}
# The reward of the stages before agentic PPO when they are shared (--reward-stages agentic).
SHARED_REWARD = "graduated"
# A pseudo-stage: the RFT checkpoint with the critic's tensors removed (a fresh critic next).
ACTOR_ONLY = "rft_actor_only"
# In a PPO stage that does not validate the actor it starts from itself: which stage did
# (another PPO stage of the same seed starting from the same actor), relative to --out.
START_VALIDATION = "start_validation.json"
# Beside a PPO stage: the start validation of an earlier start of it that was discarded.
BANKED_START = ".start"


def stages_for(ablations: Sequence[str], judge_starts: bool = False) -> list[Stage]:
    """The stages the ablations need, each once, every stage after the ones it starts from; with
    ``judge_starts``, then the stages that judge their PPO stages' start actors again."""
    order: list[Stage] = []

    def need(stage: Stage) -> None:
        for before in (stage.init, stage.trajectories):
            if before:
                need(STAGES["rft" if before == ACTOR_ONLY else before])
        if stage not in order:
            order.append(stage)

    for ablation in ablations:
        need(STAGES[f"agentic_{ablation}"])
    for ablation in ablations if judge_starts else ():
        judge = STAGES[plot_family.JUDGE[ablation]]
        if judge.init == "value" and STAGES["value"] not in order:
            # A plan without value pretraining (no_value alone): the same actor, RFT's, starts
            # the judge; value pretraining would run only to hand it over.
            judge = replace(judge, init=ACTOR_ONLY)
        need(judge)
    return order


@dataclass
class Settings:
    """What every stage run gets: the actor, the devices, sizes and learning rates."""

    actor: str
    trainer: str = "cpu"
    logger: str = "csv"
    # Steps of warm-up, RFT, value pretraining and agentic PPO.
    steps: tuple[int, int, int, int] = (8, 16, 16, 24)
    # Validation (held-out tasks) every this many agentic PPO steps.
    val_every: int = 6
    tasks_per_step: int = 8
    samples_per_task: int = 4
    max_tasks: int = 0
    val_tasks: int = 16
    # Episodes per held-out task in each validation.
    val_samples: int = 1
    # Temperature of held-out episodes (None: the rollouts'; 0: greedy, the measure without
    # sampling noise: one episode per task; the same actor's replies part only where measured
    # times in the tool outputs differ).
    val_temperature: Optional[float] = None
    max_turns: int = 10
    max_new_tokens: int = 2048
    actor_lr: float = 2e-5
    sft_lr: float = 1e-4
    critic_lr: float = 1e-4
    # Which stages train on the run's reward: "all", or "agentic" (warm-up, RFT and value
    # pretraining on the graduated reward, shared by every reward's PPO: a cheaper comparison).
    reward_stages: str = "all"
    # Extra Hydra overrides: "key=value" for every stage, "stage_name:key=value" for one.
    extra: list[str] = field(default_factory=list)
    # Also judge each PPO stage's start actor again, in a stage of its own after the PPO stages
    # (plot_family.JUDGE): where a stage's after point was judged on another kind of host than
    # its start, plot_family takes the judge run on the after point's host as the before point.
    judge_starts: bool = False


def stage_overrides(stage: Stage, run_dir: Path, reward: str, seed: int, s: Settings,
                    source_dir: Optional[Path] = None, validate_at_start: bool = True) -> list[str]:
    """train.py's command-line overrides for one stage of one (reward, seed) run; the stages it
    starts from are in ``source_dir`` (default: ``run_dir``). ``validate_at_start``: a PPO stage
    validates the actor it starts from (False where another stage of the seed does:
    ``start_validators``)."""
    source_dir = source_dir or run_dir
    warm, rft, value, ppo = s.steps
    steps = {"warmup": warm, "rft": rft, "value_pretrain": value, "agentic_rl": ppo}[stage.stage]
    out = [f"stage={stage.stage}", "data=family", "sandbox=cpu", f"reward={reward}", f"seed={seed}",
           f"trainer={s.trainer}", f"logger={s.logger}", f"output_dir={run_dir / stage.name}",
           f"model.actor.name_or_path={s.actor}", f"trainer.max_steps={steps}",
           f"data.tasks_per_step={s.tasks_per_step}", f"data.samples_per_task={s.samples_per_task}",
           f"data.max_tasks={s.max_tasks}", f"data.val_max_tasks={s.val_tasks}",
           f"data.val_samples_per_task={s.val_samples}",
           *([] if s.val_temperature is None else [f"sampling.val_temperature={s.val_temperature}"]),
           f"agent.max_new_tokens_per_turn={s.max_new_tokens}",
           f"actor_optimizer.lr={s.sft_lr if stage.stage == 'rft' else s.actor_lr}", f"critic_optimizer.lr={s.critic_lr}"]
    if stage.stage != "warmup":
        out.append(f"agent.max_turns={s.max_turns}")
    if stage.stage == "agentic_rl":
        # The curves' held-out points: the actor PPO starts from (RFT's, or the warm-up's without
        # RFT), judged in this run, then every val_every steps, the last at the final step.
        out += [f"stage.module.validate_at_start={str(validate_at_start).lower()}",
                f"trainer.val_check_interval={min(s.val_every, steps)}"]
        if stage.judge:
            out.append("stage.module.judge_only=true")
    elif stage.stage == "warmup":  # held-out metrics once, after the stage (single-turn)
        out.append(f"trainer.val_check_interval={steps}")
    elif stage.stage == "rft":  # its actor is validated at the start of each PPO stage it starts
        out.append("trainer.limit_val_batches=0")
    if stage.stage in ("rft", "value_pretrain"):
        out.append("stage.module.sample_rounds=1")
    if stage.stage == "rft":
        # One episode per training task may keep none (seed 1 on 2026-12-05: 0 of 24): another
        # batch of as many, at most 3; a seed whose first batch keeps one is as without the rule.
        out += ["stage.module.min_kept=1", "stage.module.max_sample_batches=3"]
    if stage.init:
        init = source_dir / stage.init
        out.append(f"init_from={init / 'actor_only.ckpt' if stage.init == ACTOR_ONLY else init}")
    if stage.trajectories:
        out.append(f"stage.module.trajectories={source_dir / stage.trajectories / 'rollouts' / 'sample.rank0.jsonl'}")
    if s.logger == "wandb":
        out += [f"logger.wandb.group={reward}-{stage.name}", f"logger.wandb.name={reward}-seed{seed}-{stage.name}"]
    for item in s.extra:
        name, sep, override = item.partition(":")
        if sep and "=" not in name:
            out += [override] if name == stage.name else []
        else:
            out.append(item)
    return out


def write_actor_only(source_dir: Path) -> Path:
    """The actor tensors alone of RFT's checkpoint, or of another stage whose actor is RFT's
    (family_state.actor_only_source: value pretraining's): ``init_from`` of the no-value
    ablation, whose agentic stage then builds a fresh critic instead of loading the one RFT
    carried from the warm-up or the one value pretraining trained."""
    import torch

    target = source_dir.parent / ACTOR_ONLY / "actor_only.ckpt"
    if target.exists():
        return target
    state = torch.load(source_dir / family_state.CHECKPOINT, map_location="cpu", weights_only=False)["state_dict"]
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    torch.save({"state_dict": {k: v for k, v in state.items() if k.startswith("actor.")}}, partial)
    os.replace(partial, target)
    return target


def run_stage(stage_dir: Path, overrides: list[str], deadline: Optional[float], log: Path) -> str:
    """Run one stage (or resume or skip it); returns done, skipped, stopped or failed."""
    if (stage_dir / DONE).exists():
        return "skipped"
    held = None
    if (stage_dir / "checkpoints" / "last.ckpt").exists():
        overrides = overrides + ["ckpt_path=last"]
    elif stage_dir.exists():  # a start stopped before its first checkpoint: its log and samples to keep
        import shutil

        keep_log(stage_dir)
        held = hold_rollouts(stage_dir)
        shutil.rmtree(stage_dir)
    stage_dir.mkdir(parents=True, exist_ok=True)
    if held is not None:
        os.replace(held, stage_dir / "rollouts")
    command = [sys.executable, "train.py", *overrides]
    started = time.monotonic()
    status = launch(command, stage_dir / "pipeline.log", None if deadline is None else deadline - time.monotonic())
    seconds = round(time.monotonic() - started, 1)
    if status == "done":
        (stage_dir / DONE).write_text(json.dumps({"seconds": seconds, "command": command}) + "\n")
    with LOG_LOCK, log.open("a") as f:
        f.write(json.dumps({"stage": str(stage_dir), "status": status, "seconds": seconds, "host": host_name(),
                            "command": command}) + "\n")
    return status


@functools.lru_cache(maxsize=None)
def host_name() -> str:
    """The machine a stage ran on, as the sandbox's baseline cache names it (CPU model and core
    count; the GPU's name where one is visible): the family's CPU sandbox judges with the host's
    timing, so a PPO stage's points before and after must come from one kind of host, and the
    journal says which ran each part (plot_family.judging_hosts)."""
    import torch

    from sandbox.worker_common import device_name

    parts = [device_name(torch.device("cpu"))]
    if torch.cuda.is_available():
        parts.append("gpu:" + torch.cuda.get_device_name(0))
    return ", ".join(parts)


# A sampling stage's files (src/stages/common.collect_trajectories): each batch's episodes, what a
# resume of a cut-off batch dropped from it, and the marker of a finished batch.
SAMPLING = ("sample*.rank*.jsonl", "sample*.rank*.jsonl.orig*", "sample*.rank*.done")
# A PPO stage's rollouts files, one per tag that every step's batch appends to
# (src/data/rollout.SHARED_TAGS): a restarted or resumed stage takes from them the episodes of the
# step, or of the validation, that was cut off (its first), and what such a resume dropped.
SHARED_ROLLOUTS = ("train.jsonl", "val.jsonl")


def hold_rollouts(stage_dir: Path) -> Optional[Path]:
    """A discarded start's episodes were all drawn from the stage's init actor, which the restart
    starts from again (a step's batch is drawn after the checkpoint of the step before, so a start
    without one drew only step 0's): they are moved aside (returned: a directory to put back as
    the restart's ``rollouts``). RFT and value pretraining's sampling batches
    (src/stages/common.collect_trajectories: ``rollouts/sample*.rank<r>.jsonl``, finished where a
    ``.done`` is beside): the restart reads a finished batch instead of sampling it again, samples
    only the episodes a cut-off batch lacks (minutes of device time: a value stage's 48 episodes
    outlast a 10-minute call), and RFT's rule for further batches (``min_kept``) counts the batches
    already drawn rather than drawing the first one anew. A PPO stage's ``val.jsonl`` and
    ``train.jsonl`` (SHARED_ROLLOUTS): the restart's start validation (38 held-out episodes, about
    as long as a call on the family's warm-up actor) and first step take the episodes finished."""
    rollouts = stage_dir / "rollouts"
    patterns = SAMPLING + tuple(p for name in SHARED_ROLLOUTS for p in (name, name + ".orig*"))
    files = sorted({f for pattern in patterns for f in rollouts.glob(pattern)})
    batches = [f for f in files if f.suffix == ".jsonl" and f.name not in SHARED_ROLLOUTS]
    shared = [f.name for f in files if f.name in SHARED_ROLLOUTS]
    if not batches and not shared:
        return None
    held = stage_dir.with_name(stage_dir.name + ".samples")
    held.mkdir(exist_ok=True)
    for f in files:
        os.replace(f, held / f.name)
    finished = sum(f.suffix == ".done" for f in files)
    print(f"family_pipeline: {stage_dir}: {finished} finished sampling batches and {len(batches) - finished} "
          f"cut off{''.join(', ' + name for name in shared)} kept for the restart", file=sys.stderr)
    return held


def keep_log(stage_dir: Path) -> None:
    """Append the log of a start that is about to be discarded to ``<stage>.killed.log`` beside
    the stage (what it did before it was stopped: set-up, baselines, its first step's progress)."""
    log = stage_dir / "pipeline.log"
    if log.exists():
        with (stage_dir.parent / f"{stage_dir.name}.killed.log").open("a") as kept:
            kept.write(log.read_text(errors="replace"))


def launch(command: list[str], log_path: Path, timeout: Optional[float]) -> str:
    """train.py in its own process group (stopping it stops its sandbox workers too)."""
    with log_path.open("a") as log:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return "done" if proc.wait(timeout=timeout) == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return "stopped"


@dataclass(frozen=True)
class StageRun:
    """One stage of the plan: where it runs, and the (reward, seed) run it belongs to."""

    stage: Stage
    stage_dir: Path
    reward: str
    seed: int
    source: Path


def plan_chains(out: Path, seeds: Sequence[int], rewards: Sequence[str], ablations: Sequence[str],
                settings: Settings) -> list[list[StageRun]]:
    """The stage runs as independent chains, each in the order it must run: one chain per seed
    when the stages before PPO are shared by every reward (--reward-stages agentic), else one per
    (reward, seed). A shared stage appears once, in its seed's chain."""
    shared_prefix = settings.reward_stages == "agentic"
    chains: dict[tuple, list[StageRun]] = {}
    seen: set[Path] = set()
    for reward in rewards:
        prefix_reward = SHARED_REWARD if shared_prefix else reward
        for seed in seeds:
            chain = chains.setdefault((seed,) if shared_prefix else (reward, seed), [])
            for stage in stages_for(ablations, settings.judge_starts):
                stage_reward = prefix_reward if stage.stage != "agentic_rl" else reward
                stage_dir = out / stage_reward / f"seed{seed}" / stage.name
                if stage_dir in seen:
                    continue  # a shared stage, already planned for an earlier reward
                seen.add(stage_dir)
                chain.append(StageRun(stage, stage_dir, stage_reward, seed, out / prefix_reward / f"seed{seed}"))
    return list(chains.values())


def start_actor(run: StageRun) -> tuple[Path, str]:
    """Which actor a PPO stage starts from: its prefix's RFT actor (full, no_value: value
    pretraining does not change the actor) or warm-up actor (no_rft)."""
    return run.source, "warmup" if run.stage.init == "value_no_rft" else "rft"


def start_validators(chain: Sequence[StageRun]) -> dict[Path, Path]:
    """For each PPO stage of a chain, the stage that validates the actor it starts from: the
    first planned of those that start from the same actor (each of a seed's 9 PPO stages with
    every reward and ablation starts from one of 2 actors: 2 validations instead of 9)."""
    first: dict[tuple[Path, str], Path] = {}
    out = {}
    for run in chain:
        if run.stage.stage == "agentic_rl" and not run.stage.judge:
            out[run.stage_dir] = first.setdefault(start_actor(run), run.stage_dir)
    return out


def banked_start(stage_dir: Path) -> Path:
    """Where a PPO stage's start validation is kept when its start is discarded."""
    return stage_dir.with_name(stage_dir.name + BANKED_START)


def has_start_validation(stage_dir: Path) -> bool:
    """Whether ``stage_dir``'s metrics.csv holds a held-out validation before the first update."""
    return has_validation(stage_dir, 0)


def has_validation(stage_dir: Path, step: int) -> bool:
    """Whether ``stage_dir``'s metrics.csv holds the held-out validation of the actor after ``step``
    updates, logged at step - 1 (the start's at -1: src/stages/common.validate_outside_loop)."""
    metrics = stage_dir / "metrics.csv"
    if not metrics.is_file():
        return False
    series = plot_family.read_metrics(metrics)
    return any(s == step - 1 for key in plot_family.HELDOUT_KEYS for s, _ in series.get(key, []))


def bank_start_validation(stage_dir: Path) -> bool:
    """A PPO stage stopped before its first checkpoint starts again from nothing (run_stage), but
    its start validation, if it finished, is on disk (the stage writes it as soon as it is judged)
    and judged the same actor the restart starts from: kept as ``<stage>.start/metrics.csv`` (and
    its episodes, ``rollouts/val.jsonl``, for per-task comparisons with the points after), so
    that the restart does not judge it again (minutes of device time for 38 held-out episodes).
    Remove ``<stage>.start`` to have it judged again (e.g. after changing the held-out tasks).
    Returns whether a kept start validation is there (kept now or by an earlier restart)."""
    import shutil

    kept = banked_start(stage_dir)
    if has_start_validation(kept):
        return True
    if (stage_dir / DONE).exists() or (stage_dir / "checkpoints" / "last.ckpt").exists():
        return False
    if has_start_validation(stage_dir):
        kept.mkdir(exist_ok=True)
        episodes = stage_dir / "rollouts" / "val.jsonl"
        if episodes.is_file():
            (kept / "rollouts").mkdir(exist_ok=True)
            shutil.copy2(episodes, kept / "rollouts" / "val.jsonl")
        shutil.copy2(stage_dir / "metrics.csv", kept / "metrics.csv")  # last: what marks the bank whole
        return True
    return False


def start_validator(run: StageRun, validators: dict[Path, Path]) -> Path:
    """The stage whose start validation stands for ``run``'s: another PPO stage of the seed
    (start_validators), an earlier start of its own that was discarded (bank_start_validation),
    or ``run`` itself (it validates at its start)."""
    validator = validators.get(run.stage_dir, run.stage_dir)
    if validator == run.stage_dir and run.stage.stage == "agentic_rl" and bank_start_validation(run.stage_dir):
        print(f"family_pipeline: {run.stage_dir} starts from the actor {banked_start(run.stage_dir)} validated "
              f"(an earlier start's validation): not judged again", file=sys.stderr)
        return banked_start(run.stage_dir)
    return validator


def run_chain(chain: Sequence[StageRun], settings: Settings, deadline: Optional[float], log: Path,
              statuses: dict[str, str], on_done: Optional[Callable[[], None]] = None) -> None:
    """The chain's stages in order; a failed stage ends its chain (what follows starts from it).
    ``on_done`` is called after each stage that finishes here (not one skipped as finished)."""
    validators = start_validators(chain)
    for run in chain:
        key = str(run.stage_dir)
        if deadline is not None and time.monotonic() >= deadline:
            statuses[key] = "not_started"
            continue
        if run.stage.init == ACTOR_ONLY and not (run.stage_dir / family_state.CHECKPOINT).exists():
            # Not for a resume, which reads its own checkpoint.
            write_actor_only(family_state.actor_only_source(run.source, DONE))
        validator = run.stage_dir if run.stage.judge else start_validator(run, validators)
        overrides = stage_overrides(run.stage, run.stage_dir.parent, run.reward, run.seed, settings, run.source,
                                    validate_at_start=validator == run.stage_dir)
        statuses[key] = run_stage(run.stage_dir, overrides, deadline, log)
        if statuses[key] == "done" and on_done is not None:
            on_done()
        if validator != run.stage_dir:  # after run_stage, which may have cleared the directory
            out = run.source.parent.parent
            (run.stage_dir / START_VALIDATION).write_text(
                json.dumps({"stage": validator.relative_to(out).as_posix()}) + "\n")
        if statuses[key] == "failed":
            print(f"family_pipeline: {key} failed; its log: {key}/pipeline.log", file=sys.stderr)
            return


def run_pipeline(out: Path, seeds: Sequence[int], rewards: Sequence[str], ablations: Sequence[str],
                 settings: Settings, time_budget_s: float = 0.0, jobs: int = 1,
                 before_ppo: bool = False, on_done: Optional[Callable[[], None]] = None) -> dict[str, str]:
    """Every stage of every (reward, seed) run; ``jobs`` independent chains at once (each its own
    train.py processes: they share the machine's sandbox gate, so timing stays exclusive). With
    ``before_ppo``, only the stages before agentic PPO. ``on_done``: called after each stage that
    finishes (from the chain's thread). Returns each stage directory's status."""
    from concurrent.futures import ThreadPoolExecutor

    deadline = time.monotonic() + time_budget_s if time_budget_s > 0 else None
    out.mkdir(parents=True, exist_ok=True)
    statuses: dict[str, str] = {}
    chains = plan_chains(out, seeds, rewards, ablations, settings)
    if before_ppo:
        chains = [[run for run in chain if run.stage.stage != "agentic_rl"] for chain in chains]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for future in [pool.submit(run_chain, c, settings, deadline, out / "pipeline.jsonl", statuses, on_done)
                       for c in chains]:
            future.result()
    return statuses


def parse_list(text: str, allowed: Sequence[str], what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in items if x not in allowed]
    if unknown or not items:
        usage_error(f"{what} must be a comma-separated subset of "
                         f"{', '.join(allowed)}, got {text!r}")
    return items


def usage_error(message: str) -> None:
    """Unusable input: one line on stderr, exit status 2."""
    print(f"family_pipeline: error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    d = Settings(actor="")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--actor", default="", help="the behaviour-cloned actor (make_family_actor.py --out); required")
    p.add_argument("--out", default=str(ROOT / "outputs" / "family" / "runs"))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--rewards", default="graduated", help=f"comma-separated: {', '.join(REWARDS)}")
    p.add_argument("--ablations", default="full", help=f"comma-separated: {', '.join(ABLATIONS)}")
    p.add_argument("--trainer", default=d.trainer, help="train.py trainer group: cpu, gpu")
    p.add_argument("--logger", default=d.logger, help="csv, or wandb (offline runs, metrics.csv beside them)")
    p.add_argument("--steps", default=",".join(map(str, d.steps)), help="warm-up,RFT,value,PPO steps")
    p.add_argument("--val-every", type=int, default=d.val_every, help="held-out validation every N PPO steps")
    p.add_argument("--tasks-per-step", type=int, default=d.tasks_per_step)
    p.add_argument("--samples-per-task", type=int, default=d.samples_per_task)
    p.add_argument("--max-tasks", type=int, default=d.max_tasks, help="training tasks used (0: all 145)")
    p.add_argument("--val-tasks", type=int, default=d.val_tasks, help="held-out tasks per validation (0: all 38)")
    p.add_argument("--val-samples", type=int, default=d.val_samples, help="episodes per held-out task per validation")
    p.add_argument("--val-temperature", type=float, default=d.val_temperature,
                   help="temperature of held-out episodes (default: the rollouts'; 0: greedy, one episode per task "
                        "without sampling noise: before/after differences are the policy's, not a re-roll's)")
    p.add_argument("--max-turns", type=int, default=d.max_turns)
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, help="per reply")
    p.add_argument("--actor-lr", type=float, default=d.actor_lr, help="PPO actor learning rate")
    p.add_argument("--sft-lr", type=float, default=d.sft_lr, help="RFT learning rate")
    p.add_argument("--critic-lr", type=float, default=d.critic_lr)
    p.add_argument("--set", dest="extra", action="append", default=[],
                   help="extra train.py override: key=value (every stage) or STAGE:key=value (one stage, "
                        "e.g. rft:stage.module.min_reward=-2); repeatable")
    p.add_argument("--reward-stages", choices=("all", "agentic"), default="all",
                   help="all: every stage trains on the run's reward; agentic: only PPO does (the stages "
                        "before it run once, on the graduated reward, and every reward's PPO starts from them)")
    p.add_argument("--judge-starts", action="store_true",
                   help="after the PPO stages, judge the actors they start from again on the held-out tasks "
                        "(judge_rft, judge_warmup): the before point where a PPO stage's start and end were "
                        "judged on different kinds of host (remove a judge stage to judge it again elsewhere)")
    p.add_argument("--time-budget-s", type=float, default=0.0, help="start no stage after this (0: no limit)")
    p.add_argument("--jobs", type=int, default=1,
                   help="independent chains at once (seeds; with --reward-stages all, (reward, seed) pairs)")
    p.add_argument("--before-ppo", action="store_true",
                   help="run only the stages before agentic PPO (e.g. on one machine, exporting their weights "
                        "for the PPO stages on another: --export-weights)")
    p.add_argument("--import-weights", default="",
                   help="a folder of weights another machine exported (scripts/family_state.py): joined into the "
                        "finished stages' checkpoints under --out before the run, and the checkpoints of stages it "
                        "stopped midway (they resume)")
    p.add_argument("--export-weights", default="",
                   help="after each stage that finishes and after the run, write into this folder, in parts that "
                        "travel (scripts/family_state.py), the checkpoints of stages stopped midway and the weights "
                        "of the finished stages that a stage not yet started starts from")
    p.add_argument("--export-max-mb", type=float, default=0.0,
                   help="at most this many MB of exported weights (0: no limit); the stages furthest along the "
                        "pipeline go first, the rest run again on the next machine")
    p.add_argument("--export-dtype", choices=family_state.CARRY_DTYPES, default="float32",
                   help="what the exported weights travel as: float16 halves them (a one-time rounding of the "
                        "next stage's start; imported back as float32)")
    p.add_argument("--export-moments", choices=family_state.CARRY_MOMENTS, default="bfloat16",
                   help="what a stopped stage's optimizer moments travel as: bfloat16 (the family's actor and "
                        "critic: 31.7 MB beside their weights), or drop (Adam starts them anew at the resume, as "
                        "at a stage's first step)")
    return p.parse_args(argv)


def depth(stage: "Stage | str") -> int:
    """How many stages run before this one in its chain (the device time its weights stand for);
    a name is looked up in STAGES (the pseudo-stage rft_actor_only is RFT's)."""
    if isinstance(stage, str):
        stage = STAGES["rft" if stage == ACTOR_ONLY else stage]
    return 1 + max((depth(b) for b in (stage.init, stage.trajectories) if b), default=-1)


def export_rank(chains: list[list[StageRun]]) -> Callable[[Path], int]:
    """Sort key of stage directories for export, furthest along first: a planned stage by the
    plan's own Stage (a judge the plan starts from RFT's actor, not from value pretraining,
    counts as such), any other by its name."""
    planned = {run.stage_dir: run.stage for chain in chains for run in chain}
    return lambda stage_dir: -depth(planned.get(stage_dir, stage_dir.name))


def export(chains: list[list[StageRun]], out: Path, dest: Path, max_bytes: int, dtype: str = "float32",
           moments: str = "bfloat16") -> None:
    """What the stages still to run need on the next machine, while it fits in ``max_bytes``:
    first the checkpoints of stages stopped midway (weights in ``dtype``, optimizer moments as
    ``moments``; they resume there), then the weights that stages not yet started start from
    (in ``dtype``), in each group the stages furthest along first. Says which were left out (the
    next machine runs them again)."""
    rank = export_rank(chains)
    stopped = sorted(family_state.stopped_stages(chains, DONE), key=rank)
    needed = sorted(family_state.starts_needed(chains, DONE, ACTOR_ONLY), key=rank)
    manifest = family_state.export_weights(needed, out, dest, max_bytes=max_bytes, dtype=dtype, resumable=stopped,
                                           moments=moments)
    carried = {entry["stage"] for entry in manifest.values()}
    left = [str(d.relative_to(out)) for d in stopped + needed if d.relative_to(out).as_posix() not in carried]
    if left:
        print(f"family_pipeline: weights of {', '.join(left)} left out (over --export-max-mb {max_bytes / 1e6:g}): "
              f"the next machine runs them again", file=sys.stderr)


def exporter_for(chains: list[list[StageRun]], out: Path, dest: Path, max_bytes: int,
                 dtype: str, moments: str = "bfloat16") -> Callable[[], None]:
    """``export`` into ``dest``, one at a time: called after every stage that finishes and once
    at the end, so that a run killed from outside (a GPU call's hard limit, which the pipeline's
    own --time-budget-s may not know) has already handed over every stage it finished. Parts of
    stages unchanged since the last export are not written again (family_state.write_parts)."""
    lock = threading.Lock()

    def run() -> None:
        with lock:
            export(chains, out, dest, max_bytes, dtype, moments)
    return run


def planned(args: argparse.Namespace) -> tuple[Path, list[int], list[str], list[str], Settings]:
    """What the arguments plan: --out, seeds, rewards, ablations and the stages' settings (a usage
    error, exit 2, for arguments that plan nothing sensible). The actor is checked by the caller
    that trains from it (main), not by one that only reads the plan (family_carry.py)."""
    try:
        steps = tuple(int(x) for x in args.steps.split(","))
        seeds = [int(x) for x in args.seeds.split(",")]
    except ValueError:
        usage_error(f"--steps and --seeds take integers, got {args.steps!r}, {args.seeds!r}")
    if args.jobs < 1:
        usage_error(f"--jobs must be at least 1, got {args.jobs}")
    if args.val_samples < 1:
        usage_error(f"--val-samples must be at least 1, got {args.val_samples}")
    if args.val_temperature is not None and args.val_temperature < 0:
        usage_error(f"--val-temperature must be >= 0 (0: greedy), got {args.val_temperature}")
    if args.val_temperature == 0 and args.val_samples > 1:
        usage_error(f"--val-temperature 0 (greedy) repeats one episode per task: --val-samples must be 1, "
                    f"got {args.val_samples}")
    if len(steps) != 4 or min(steps) < 1:
        usage_error(f"--steps needs 4 positive counts (warm-up,RFT,value,PPO), got {args.steps!r}")
    settings = Settings(actor=str(Path(args.actor).absolute()) if args.actor else "", trainer=args.trainer,
                        logger=args.logger, steps=steps,
                        val_every=args.val_every, tasks_per_step=args.tasks_per_step,
                        samples_per_task=args.samples_per_task, max_tasks=args.max_tasks, val_tasks=args.val_tasks,
                        val_samples=args.val_samples, val_temperature=args.val_temperature,
                        max_turns=args.max_turns, max_new_tokens=args.max_new_tokens, actor_lr=args.actor_lr,
                        sft_lr=args.sft_lr, critic_lr=args.critic_lr, reward_stages=args.reward_stages,
                        extra=list(args.extra), judge_starts=args.judge_starts)
    rewards, ablations = parse_list(args.rewards, REWARDS, "--rewards"), parse_list(args.ablations, ABLATIONS, "--ablations")
    return Path(args.out).absolute(), seeds, rewards, ablations, settings


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if not args.actor:
        usage_error("--actor is required: the behaviour-cloned actor the warm-up starts from")
    if not Path(args.actor, "config.json").exists():
        usage_error(f"--actor {args.actor} is not a model directory "
                    "(python scripts/make_family_actor.py --out DIR makes one)")
    out, seeds, rewards, ablations, settings = planned(args)
    try:
        if args.import_weights:
            written = family_state.import_weights(Path(args.import_weights), out, DONE)
            print(f"family_pipeline: weights of {len(written)} stages (finished, or stopped to resume) from "
                  f"{args.import_weights}: {', '.join(written) or 'none needed'}", file=sys.stderr)
        chains = plan_chains(out, seeds, rewards, ablations, settings)
        for stage_dir in family_state.reopen_uncarried(chains, DONE, ACTOR_ONLY):
            print(f"family_pipeline: {stage_dir} finished elsewhere but its weights are not here: it runs again "
                  f"(the earlier run is kept in {stage_dir}.uncarried)", file=sys.stderr)
        exporter = None
        if args.export_weights:
            exporter = exporter_for(chains, out, Path(args.export_weights), int(args.export_max_mb * 1e6),
                                    args.export_dtype, args.export_moments)
        try:
            statuses = run_pipeline(out, seeds, rewards, ablations, settings, args.time_budget_s, args.jobs,
                                    args.before_ppo, on_done=exporter)
        finally:
            if exporter is not None:
                exporter()
    except family_state.StateError as exc:
        print(f"family_pipeline: {exc}", file=sys.stderr)
        return 2
    counts = {s: sum(1 for v in statuses.values() if v == s) for s in sorted(set(statuses.values()))}
    print(json.dumps({"out": str(out), "stages": counts}))
    if "failed" in counts:
        return 1
    return INCOMPLETE if {"stopped", "not_started"} & set(counts) else 0


if __name__ == "__main__":
    sys.exit(main())
