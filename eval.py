r"""Benchmark evaluation: judge a policy's solutions to KernelBench-format problems with the
sandbox, and report the CUDA Agent paper's metrics (pass rate, faster-than-eager and
faster-than-compile rates, geometric-mean speedups) and KernelBench's fast_p, per level.

Run from the repository root. CPU (no GPU): this project's sample benchmark with its CPU replay
solutions, a mix of correct kernels, wrong ones and hacks the guards catch:

    python eval.py sandbox=cpu policy.solutions=examples/kernelbench_sample_solutions/cpu

One GPU: the sample benchmark with its CUDA solutions, or KernelBench from a checkout you
provide, with solutions replayed from a directory laid out like it (level{L}/{id}_*.py files or
level{L}/{id}/ workspaces) or from a JSONL file with level_id, task_id and code fields:

    python eval.py policy.solutions=examples/kernelbench_sample_solutions/cuda
    python eval.py benchmark=kernelbench benchmark.root=/path/to/KernelBench \
        policy.solutions=/path/to/solutions

N GPUs of one host: the sandbox pool times on every visible GPU (one timing lane each) and
overlaps builds with them; `workers` sets the evaluations in flight (default: the pool's own,
sandbox.pool_workers):

    CUDA_VISIBLE_DEVICES=0,1,2,3 python eval.py benchmark=kernelbench \
        benchmark.root=/path/to/KernelBench policy.solutions=/path/to/solutions workers=24

Generating policies run the agent loop (conf/agent: multi_turn, or single_turn for the ablation)
on every problem, keep trajectories.jsonl and transcripts/, and judge each episode's best correct
solution (the paper's rule; none: a failure):

    python eval.py policy=hf policy.model_name_or_path=Qwen/Qwen2.5-Coder-7B-Instruct agent=multi_turn
    python eval.py policy=api policy.base_url=https://api.openai.com/v1 policy.model=gpt-4o \
        agent.max_turns=200 episodes_in_flight=8        # key from $OPENAI_API_KEY

Writes results.jsonl (one row per task), summary.json, summary.md, fast_p.png and speedups.png
into output_dir (default outputs/eval/<benchmark>-<policy>-<backend>); running the same command
again resumes: tasks already in results.jsonl are skipped. Per-task timeouts are the sandbox's
(sandbox.compile_timeout_s, sandbox.run_timeout_s, sandbox.reference_timeout_s). Metric
definitions: docs/evaluation.md. Exit status 2 with one line on stderr for unusable input.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from src.entry import register_resolvers
from src.evaluation.kernelbench import BenchmarkError, Problem, load_problems, resolve_root
from src.evaluation.replay import ReplayError, replay_solutions
from src.evaluation.runner import RunMismatchError, pin_run, run_identity

log = logging.getLogger("eval")
USAGE_ERROR = 2
register_resolvers()  # --help from this docstring; sandbox.backend's default: this machine's


class UsageError(ValueError):
    """A configuration value eval.py cannot use."""


def sandbox_config(cfg: DictConfig):
    from sandbox.config import SandboxConfig

    try:
        return SandboxConfig.from_dict(OmegaConf.to_container(cfg.sandbox, resolve=True))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"sandbox config: {exc}") from None


def problem_selection(cfg: DictConfig) -> list[Problem]:
    bench = cfg.benchmark
    ids = None if bench.problem_ids is None else list(bench.problem_ids)
    return load_problems(bench.root, list(bench.levels), ids)


GENERATING_POLICIES = ("hf", "api")


def solution_paths(cfg: DictConfig, problems: list[Problem], out_dir: Path, sandbox) -> dict:
    """Problem key -> solution path (None: no solution): replayed files, or the best correct
    solution of an agent episode per problem (policy=hf|api; trajectories kept in out_dir)."""
    if cfg.policy.name == "replay":
        return replay_solutions(cfg.policy.solutions, problems, out_dir / "replay_solutions")
    if cfg.policy.name not in GENERATING_POLICIES:
        raise UsageError(f"unknown policy {cfg.policy.name!r}; use replay, hf or api")
    from src.agent.policies import PolicyError
    from src.evaluation.agent_runs import run_agent

    try:
        # throw_on_missing: an unset endpoint or model is one clear line, not a failed episode per task.
        return run_agent(problems, OmegaConf.to_container(cfg.policy, resolve=True, throw_on_missing=True),
                         OmegaConf.to_container(cfg.agent, resolve=True, throw_on_missing=True), sandbox,
                         out_dir, cfg.workers, cfg.episodes_in_flight, cfg.reward.name)
    except (PolicyError, ValueError) as exc:
        raise UsageError(f"policy {cfg.policy.name}: {exc}") from None


def solutions_identity(cfg: DictConfig) -> str:
    """What run.json pins as the source of the solutions."""
    if cfg.policy.name == "replay":
        return str(Path(cfg.policy.solutions).expanduser().resolve())
    model = cfg.policy.get("model_name_or_path") or cfg.policy.get("model")
    return f"policy={cfg.policy.name} model={model} agent={cfg.agent.mode}"


def evaluate(cfg: DictConfig) -> dict:
    from sandbox.backend import require_backend
    from src.evaluation import report
    from src.evaluation.runner import run_problems

    sandbox = sandbox_config(cfg)
    require_backend(sandbox.backend, "sandbox=cpu")  # one clear line now, not a task error per problem
    problems = problem_selection(cfg)
    out_dir = Path(cfg.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    root = resolve_root(cfg.benchmark.root, cfg.benchmark.levels).resolve()
    pin_run(out_dir, run_identity(root, solutions_identity(cfg), sandbox, cfg.reward.name))
    solutions = solution_paths(cfg, problems, out_dir, sandbox)
    rows = run_problems(problems, solutions, sandbox, out_dir / report.RESULTS_FILE,
                        cfg.reward.name, cfg.workers, cfg.progress)
    context = {"benchmark": cfg.benchmark.name, "benchmark_root": str(root),
               "levels": list(cfg.benchmark.levels), "policy": cfg.policy.name,
               "solutions": solutions_identity(cfg), "backend": sandbox.backend,
               "tolerance": sandbox.tolerance, "guards": sandbox.guards, "reward": cfg.reward.name}
    summary = report.write_summary(rows, out_dir, context)
    if cfg.plots:
        report.write_plots(rows, out_dir)
    print(report.markdown_summary(summary["levels"]))
    log.info("results, summary and plots in %s", out_dir)
    return summary


@hydra.main(version_base="1.3", config_path="conf", config_name="eval")
def main(cfg: DictConfig) -> None:
    from sandbox.errors import TaskError
    from src.evaluation.report import ResultsFileError

    try:
        evaluate(cfg)
    except MissingMandatoryValue as exc:
        print(f"error: {exc.full_key} must be set, e.g. {exc.full_key}=PATH on the command line", file=sys.stderr)
        sys.exit(USAGE_ERROR)
    except (BenchmarkError, ReplayError, ResultsFileError, RunMismatchError, TaskError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(USAGE_ERROR)


if __name__ == "__main__":
    main()
