"""Train one stage of the CUDA Agent recipe: single-turn warm-up PPO, rejection fine-tuning,
critic value pretraining, or agentic (multi-turn) PPO, over episodes that the actor being
trained runs through the kernel sandbox (the reward). Each stage writes Lightning checkpoints
the next one starts from with init_from=.

Run from the repository root. CPU, the embedded defaults (a tiny behaviour-cloned actor, this
repository's sample tasks, the CPU sandbox), a few real steps in a few minutes, no download:

    python train.py stage=agentic_rl reward=graduated

The four stages in order, each from the previous one's checkpoint (on one GPU, the embedded
H200 task set):

    python train.py stage=warmup trainer=gpu data=ops_h200 output_dir=runs/warmup
    python train.py stage=rft trainer=gpu data=ops_h200 init_from=runs/warmup output_dir=runs/rft
    python train.py stage=value_pretrain trainer=gpu data=ops_h200 init_from=runs/rft \\
        stage.module.trajectories=runs/rft/rollouts/sample.rank0.jsonl output_dir=runs/value
    python train.py stage=agentic_rl trainer=gpu data=ops_h200 init_from=runs/value output_dir=runs/agentic

Any Hugging Face causal LM (hub id or local path), or LoRA on it:

    python train.py model=hf model.actor.name_or_path=Qwen/Qwen2.5-Coder-7B-Instruct trainer=gpu
    python train.py model=lora model.actor.name_or_path=/models/qwen trainer=gpu

N GPUs of one host (DDP; every rank shares rank 0's sandbox pool; list the GPUs that time
kernels in sandbox.devices to keep them apart from the training GPUs):

    CUDA_VISIBLE_DEVICES=0,1,2,3 python train.py trainer=ddp trainer.devices=4 data=ops_h200
    python train.py trainer=ddp trainer.accelerator=cpu trainer.devices=2     # 2 CPU processes (gloo)

Resume a killed run from its last checkpoint (same step count and optimiser state):

    python train.py stage=agentic_rl output_dir=runs/agentic ckpt_path=last

The paper's recipe (conf/experiment/paper.yaml) or an ablation, all four stages in one command,
each in pipeline_dir/<stage> from the previous one's checkpoint; a rerun skips finished stages
and resumes a killed one (src/pipeline.py). A sweep runs one job per value (src/sweeps.py), its
W&B runs in one group; src/compare.py draws their curves (docs/training.md, "Recipe and sweeps"):

    python train.py experiment=paper pipeline=true trainer=gpu model=hf model.actor.name_or_path=MODEL
    python train.py -m experiment=paper,no_rft,no_value_pretrain pipeline=true logger=wandb
    python -m src.compare outputs/sweeps/SWEEP

Writes into output_dir: checkpoints/*.ckpt (last.ckpt for resume and init_from), metrics.csv
(logger=csv) or a W&B run (logger=wandb; offline without credentials), rollouts/*.jsonl (every
episode's trajectory row), tasks/ (the task files), actor/ (the trained actor as an HF
directory, for eval.py policy=hf). stdout is one line: the stage, its steps, the last rollout
reward and pass rate, and where the checkpoint is. Metric names: docs/training.md ("Metrics"). Exit status 2 with one
line on stderr for unusable input (a missing init_from, a model that cannot be loaded, a task
set without tasks, an unknown stage, trainer=gpu without a GPU).
"""
from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

ROOT = Path(__file__).resolve().parent
USAGE_ERROR = 2
if __name__ == "__main__":
    # Modules that import train (src/pipeline.py) get this running module, not a second copy
    # whose UsageError the except clauses of main() would not catch.
    sys.modules.setdefault("train", sys.modules[__name__])
log = logging.getLogger("train")


def _register_resolvers() -> None:
    def project(rel: str) -> str:
        return str(ROOT / rel)

    def wandb_offline() -> bool:
        if os.environ.get("WANDB_API_KEY"):
            return False
        netrc = Path.home() / ".netrc"
        return not (netrc.exists() and "api.wandb.ai" in netrc.read_text(errors="replace"))

    from src.entry import register_resolvers
    from src.sweeps import register_resolvers as register_sweep_resolvers

    register_resolvers()  # --help from this docstring; sandbox.backend from the machine
    register_sweep_resolvers()  # a sweep job's directory named from its swept overrides
    for name, fn in (("project", project), ("wandb_offline", wandb_offline)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


_register_resolvers()


class UsageError(ValueError):
    """A configuration train.py cannot use."""


def sandbox_settings(cfg: DictConfig) -> dict[str, Any]:
    """The sandbox config as a dict (its backend defaults to the machine's: src/entry.py); an
    explicit cuda without a GPU is one clear error."""
    from sandbox.backend import require_backend

    settings = OmegaConf.to_container(cfg.sandbox, resolve=True)
    require_backend(settings["backend"], "sandbox=cpu")
    return settings


def check_accelerator(cfg: DictConfig) -> None:
    import torch

    if cfg.trainer.accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise UsageError(f"trainer={cfg.trainer.accelerator} needs a CUDA GPU and none is visible "
                         "(use trainer=cpu, or trainer=default to pick what is there)")


def check_validation_sampling(cfg: DictConfig, val_samples: int) -> None:
    """A held-out sampling setting that cannot work fails before training, not at the first validation."""
    from src.stages.common import validation_temperature

    try:
        validation_temperature(OmegaConf.to_container(cfg.sampling, resolve=True), val_samples)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def cap_cpu_threads(cfg: DictConfig) -> None:
    """Training on the CPU shares the host's cores with the sandbox's build and timing workers:
    ``cpu_threads`` intra-op threads (auto: half the cores this process may use, at least one).
    Oversubscribed, torch's spinning thread pools made each small matmul tens of times slower."""
    import torch

    if cfg.trainer.accelerator in ("gpu", "cuda") or (cfg.trainer.accelerator == "auto" and torch.cuda.is_available()):
        return
    threads = cfg.cpu_threads
    if threads == "auto":
        threads = max(1, len(os.sched_getaffinity(0)) // 2)
    torch.set_num_threads(int(threads))
    log.info("CPU training: %d intra-op thread(s)", int(threads))


def agent_config(cfg: DictConfig, actor: Any):
    """The agent's settings, its context capped at what the model's positions allow."""
    from src.agent import AgentConfig

    agent = AgentConfig.from_dict(OmegaConf.to_container(cfg.agent, resolve=True))
    positions = getattr(actor.model.config, "max_position_embeddings", None)
    if positions and agent.max_context_tokens > positions:
        log.info("agent context capped at the model's %d positions (agent.max_context_tokens was %d)",
                 positions, agent.max_context_tokens)
        from dataclasses import replace

        agent = replace(agent, max_context_tokens=int(positions),
                        max_new_tokens_per_turn=min(agent.max_new_tokens_per_turn, int(positions)))
    return agent


def build(node: Any, **parts: Any) -> Any:
    """``hydra.utils.instantiate``, but an error of ours raised inside the target surfaces as
    itself (Hydra wraps it in an InstantiationException with a multi-line message)."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(node, **parts)
    except InstantiationException as exc:
        if isinstance(exc.__cause__, known_errors()):
            raise exc.__cause__ from None
        raise


def build_module(cfg: DictConfig, actor: Any, critic: Any, agent: Any):
    """The stage's LightningModule with the parts its constructor asks for."""
    from hydra.utils import get_class, instantiate

    module_cls = get_class(cfg.stage.module._target_)
    wanted = inspect.signature(module_cls.__init__).parameters
    parts = {"actor": actor, "critic": critic, "agent": agent,
             "sampling": OmegaConf.to_container(cfg.sampling, resolve=True),
             "actor_optimizer": instantiate(cfg.actor_optimizer),
             "critic_optimizer": instantiate(cfg.critic_optimizer)}
    return build(cfg.stage.module, **{k: v for k, v in parts.items() if k in wanted})


def build_trainer(cfg: DictConfig, out_dir: Path):
    from hydra.utils import instantiate

    from src.stages.checkpoints import AtomicModelCheckpoint

    loggers = [instantiate(node) for node in cfg.logger.values()] if cfg.get("logger") else []
    checkpoint = AtomicModelCheckpoint(dirpath=out_dir / "checkpoints", filename="step{step:06d}",
                                       every_n_train_steps=1, save_last=True, save_top_k=1,
                                       auto_insert_metric_name=False)
    return instantiate(cfg.trainer, logger=loggers or False, callbacks=[checkpoint], default_root_dir=str(out_dir))


def resolve_ckpt(cfg: DictConfig, out_dir: Path) -> str | None:
    """``ckpt_path=last`` means this run's own last checkpoint; none yet starts afresh."""
    if cfg.ckpt_path in (None, ""):
        return None
    if cfg.ckpt_path == "last":
        last = out_dir / "checkpoints" / "last.ckpt"
        if not last.exists():
            log.warning("ckpt_path=last but %s has no checkpoint yet: starting afresh", out_dir)
            return None
        return str(last)
    path = Path(cfg.ckpt_path).expanduser()
    if not path.is_file():
        raise UsageError(f"ckpt_path {path}: no such checkpoint")
    return str(path)


def train(cfg: DictConfig) -> dict[str, float]:
    """Run the configured stage; returns the last logged metrics."""
    import lightning.pytorch as pl

    from src.data.rollout import RolloutDataModule, share_pool_env
    from src.stages.checkpoints import export_actor
    from src.stages.common import load_init
    from src.stages.loggers import finish_runs, log_run_config

    check_accelerator(cfg)
    cap_cpu_threads(cfg)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    out_dir = Path(cfg.output_dir).expanduser().absolute()
    ckpt = resolve_ckpt(cfg, out_dir)
    if ckpt is None and (out_dir / "checkpoints" / "last.ckpt").exists():
        raise UsageError(f"{out_dir} already holds a run (checkpoints/last.ckpt): resume it with ckpt_path=last, "
                         "or give another output_dir")
    sandbox = sandbox_settings(cfg)
    actor = build(cfg.model.actor)
    critic = build(cfg.model.critic, actor=actor) if _wants(cfg, "critic") else None
    agent = agent_config(cfg, actor)
    data = OmegaConf.to_container(cfg.data, resolve=True)
    dm = RolloutDataModule(output_dir=str(out_dir), sandbox=sandbox, reward=cfg.reward.name,
                           device_gate=cfg.device_gate, task_order_seed=cfg.seed, **data)
    dm.prepare()  # a task set without tasks fails here, before anything is written
    check_validation_sampling(cfg, dm.val_samples)
    module = build_module(cfg, actor, critic, agent)
    if cfg.init_from and ckpt is not None and not getattr(module, "needs_init_on_resume", False):
        # The checkpoint resumed from holds every trained weight: the starting point is not read,
        # so a run carried to another machine mid-stage needs only its own checkpoint there.
        log.info("resuming from %s: init_from %s not read", ckpt, cfg.init_from)
    elif cfg.init_from:
        loaded = load_init(module, cfg.init_from, tuple(cfg.stage.init_requires), tuple(cfg.init_fresh))
        log.info("init_from %s: %s", cfg.init_from, loaded)
    elif cfg.stage.init_requires:
        log.warning("stage %s usually starts from an earlier stage's checkpoint (init_from=...); "
                    "starting from the model as configured", cfg.stage.name)
    if hasattr(module, "freeze_reference"):
        module.freeze_reference()  # the starting actor, before a resume's checkpoint replaces it
    trainer = build_trainer(cfg, out_dir)
    log_run_config(trainer.loggers, cfg)
    share_pool_env(out_dir)
    try:
        trainer.fit(module, datamodule=dm, ckpt_path=ckpt)
    finally:
        finish_runs(trainer.loggers)
    if cfg.export_actor and trainer.is_global_zero:
        export_actor(actor, out_dir / "actor")
    return {**{k: float(v) for k, v in trainer.callback_metrics.items()}, "global_step": float(trainer.global_step)}


def summary_line(cfg: DictConfig, metrics: dict[str, float]) -> str:
    """The one line train.py prints on stdout when a stage finishes."""
    out_dir = Path(cfg.output_dir).expanduser()
    shown = [f"{name.split('/')[-1]} {metrics[name]:.3f}" for name in ("rollout/reward_mean", "rollout/pass_rate")
             if name in metrics]
    steps = int(metrics.get("global_step", 0))
    return f"{cfg.stage.name}: {steps} steps; {', '.join(shown) or 'no rollout metrics'}; " \
           f"checkpoint {out_dir / 'checkpoints' / 'last.ckpt'}"


def _wants(cfg: DictConfig, part: str) -> bool:
    from hydra.utils import get_class

    return part in inspect.signature(get_class(cfg.stage.module._target_).__init__).parameters


def known_errors() -> tuple[type, ...]:
    from sandbox.errors import TaskError
    from src.data.tasks import TaskSetError
    from src.models import ModelLoadError
    from src.stages.common import InitError

    return (UsageError, TaskError, TaskSetError, ModelLoadError, InitError)


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from src.pipeline import apply_settings, run_pipeline
    from src.sweeps import job_settings

    try:
        settings = job_settings(cfg)  # a sweep job: its own directory, W&B group and name
        # Progress bars and Lightning's banners go to stderr, so stdout is the summary alone.
        with contextlib.redirect_stdout(sys.stderr):
            if cfg.pipeline:
                stages = run_pipeline(HydraConfig.get().overrides.task, settings)
            else:
                job = apply_settings(cfg, settings)
                metrics = train(job)
        if cfg.pipeline:
            print(f"pipeline: {', '.join(stages)} done in {cfg.pipeline_dir}")
        else:
            print(summary_line(job, metrics))
    except MissingMandatoryValue as exc:
        print(f"error: {exc.full_key} must be set, e.g. {exc.full_key}=VALUE on the command line", file=sys.stderr)
        sys.exit(USAGE_ERROR)
    except known_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(USAGE_ERROR)


def check_group_choices(argv: list[str], conf_dir: Path = ROOT / "conf") -> str:
    """Empty, or one line naming a config group option given on the command line that does not
    exist (Hydra's own message is several lines and exits 1). Hydra's own groups (hydra/launcher:
    plugins add options) are left to Hydra."""
    for arg in argv:
        key, sep, value = arg.lstrip("+~").partition("=")
        group = conf_dir / key.replace(".", "/")
        if not sep or not group.is_dir() or "," in value or value in ("null", "") or key.startswith("hydra"):
            continue
        options = sorted(p.stem for p in group.glob("*.yaml"))
        if value not in options:
            return f"error: {key}={value} is not a {key} config; choose one of: {', '.join(options)}"
    return ""


if __name__ == "__main__":
    problem = check_group_choices(sys.argv[1:])
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(USAGE_ERROR)
    main()
