"""Benchmark evaluation: judge a policy's solutions to KernelBench-format problems with the
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

from src.evaluation.kernelbench import BenchmarkError, Problem, load_problems, resolve_root
from src.evaluation.replay import ReplayError, replay_solutions
from src.evaluation.runner import RunMismatchError, pin_run, run_identity

log = logging.getLogger("eval")
USAGE_ERROR = 2


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


def solution_paths(cfg: DictConfig, problems: list[Problem], out_dir: Path) -> dict:
    """Problem key -> solution path (None: no solution). Only replay exists so far; a generating
    policy (hf, api, a checkpoint) will fill the same mapping from its agent runs."""
    if cfg.policy.name != "replay":
        raise UsageError(f"policy {cfg.policy.name!r} is not available yet; use policy=replay")
    return replay_solutions(cfg.policy.solutions, problems, out_dir / "replay_solutions")


def evaluate(cfg: DictConfig) -> dict:
    from sandbox.judge import check_backend
    from src.evaluation import report
    from src.evaluation.runner import run_problems

    sandbox = sandbox_config(cfg)
    check_backend(sandbox)  # one clear line now, instead of a task error per problem
    problems = problem_selection(cfg)
    out_dir = Path(cfg.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    solutions = solution_paths(cfg, problems, out_dir)
    root = resolve_root(cfg.benchmark.root, cfg.benchmark.levels).resolve()
    pin_run(out_dir, run_identity(root, str(Path(cfg.policy.solutions).expanduser().resolve()),
                                  sandbox, cfg.reward.name))
    rows = run_problems(problems, solutions, sandbox, out_dir / report.RESULTS_FILE,
                        cfg.reward.name, cfg.workers, cfg.progress)
    context = {"benchmark": cfg.benchmark.name, "benchmark_root": str(root),
               "levels": list(cfg.benchmark.levels), "policy": cfg.policy.name,
               "solutions": str(cfg.policy.solutions), "backend": sandbox.backend,
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
