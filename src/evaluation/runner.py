"""Judge every (problem, solution) pair through the sandbox pool, resumably.

Each finished task is appended to results.jsonl at once, so an interrupted run loses at most
the evaluations in flight; a re-run with the same output directory skips every task already
there. run.json pins what the rows were measured against (benchmark, solutions, sandbox
verdict settings, reward): resuming with different ones is refused rather than mixed.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from tqdm import tqdm

from sandbox.config import SandboxConfig
from sandbox.errors import TASK_ERROR
from sandbox.measurement import Measurement
from sandbox.pool import EvalRequest, evaluate_many
from sandbox.reward import reward_fn

from .kernelbench import Problem
from .metrics import row_passed
from .report import RESULTS_FILE, append_result, read_results

log = logging.getLogger(__name__)

# Error kind of a task that has no solution at all (counted as a failure, as fast_p does).
MISSING_SOLUTION = "missing_solution"
RUN_FILE = "run.json"
# Sandbox settings that define what a verdict means; rows measured under different values must
# not be mixed in one summary. The rest (timeouts, workers, devices, cache) may change when a run
# is resumed, e.g. a longer timeout for the tasks still to do.
VERDICT_SANDBOX_KEYS = ("backend", "tolerance", "num_correct_trials", "post_timing_trials", "guards",
                        "allowed_libraries", "compile_baseline", "timing", "cuda_arch", "nvcc_flags",
                        "cxx_flags")


class RunMismatchError(ValueError):
    """The output directory holds results of a different run."""


def run_identity(benchmark_root: Path, solutions: str, sandbox: SandboxConfig,
                 reward_name: str) -> dict[str, Any]:
    """What the rows of one output directory must all have been measured against."""
    settings = {k: v for k, v in sandbox.to_dict().items() if k in VERDICT_SANDBOX_KEYS}
    return {"benchmark_root": str(benchmark_root), "solutions": solutions,
            "sandbox": json.loads(json.dumps(settings)), "reward": reward_name}


def pin_run(out_dir: Path, identity: Mapping[str, Any]) -> None:
    """Write run.json, or check that an existing one matches when there are results to resume
    (a run that stopped before judging anything may be started again with other settings)."""
    path = out_dir / RUN_FILE
    results = out_dir / RESULTS_FILE
    if path.exists() and results.exists() and results.stat().st_size > 0:
        pinned = json.loads(path.read_text())
        changed = sorted(_differences(pinned, dict(identity)))
        if changed:
            raise RunMismatchError(f"{out_dir} holds results of a different run ({', '.join(changed)} "
                                   "changed); choose another output_dir or delete that one")
        return
    path.write_text(json.dumps(identity, indent=2) + "\n")


def _differences(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    found = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            found += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            found.append(f"{prefix}{key}")
    return found


def result_row(problem: Problem, solution: Optional[Path], m: Measurement, reward_name: str,
               task_error: Optional[str] = None) -> dict[str, Any]:
    """One results.jsonl line: the problem, every Measurement field, the reward."""
    return {"level": problem.level, "problem_id": problem.problem_id, "name": problem.name,
            "task": str(problem.path), "solution": None if solution is None else str(solution),
            **m.to_dict(), "reward": reward_fn(reward_name)(m), "reward_name": reward_name,
            "task_error": task_error}


def failed_measurement(cfg: SandboxConfig, kind: str, detail: str) -> Measurement:
    """A verdict for a task that was never judged (no solution, or the task itself failed)."""
    return Measurement(backend=cfg.backend, tolerance=cfg.tolerance).fail(kind, detail)


def run_problems(problems: Sequence[Problem], solutions: Mapping[tuple[int, int], Optional[Path]],
                 cfg: SandboxConfig, results_path: Path, reward_name: str = "graduated",
                 workers: Optional[int] = None, progress: bool = True) -> list[dict[str, Any]]:
    """Judge the problems not yet in results_path; return one row per problem, in order."""
    done = {(r["level"], r["problem_id"]): r for r in read_results(results_path)}
    todo = [p for p in problems if p.key not in done]
    log.info("%d tasks: %d already in %s, %d to evaluate", len(problems), len(problems) - len(todo),
             results_path, len(todo))
    passed = sum(row_passed(done[p.key]) for p in problems if p.key in done)
    with open(results_path, "a", encoding="utf-8") as out, \
            tqdm(total=len(problems), initial=len(problems) - len(todo), desc="eval", unit="task",
                 disable=not progress, dynamic_ncols=True) as bar:

        def record(row: dict[str, Any]) -> None:
            nonlocal passed
            append_result(out, row)
            done[row["level"], row["problem_id"]] = row
            passed += row_passed(row)
            bar.update()
            bar.set_postfix(passed=passed, refresh=False)

        for problem in todo:
            if solutions.get(problem.key) is None:
                m = failed_measurement(cfg, MISSING_SOLUTION, f"no solution for level {problem.level} "
                                                              f"problem {problem.problem_id}")
                record(result_row(problem, None, m, reward_name))
        judged = {p.id: p for p in todo if solutions.get(p.key) is not None}
        requests = [EvalRequest(p.id, p.path, solutions[p.key]) for p in judged.values()]
        for result in evaluate_many(requests, cfg, workers):
            if getattr(result, "cancelled", False):
                continue  # never judged: left out of the results, so a resumed run judges it
            problem = judged[result.id]
            m = result.measurement or failed_measurement(cfg, TASK_ERROR, result.task_error or "task error")
            record(result_row(problem, solutions[problem.key], m, reward_name, result.task_error))
    unjudged = [p.id for p in problems if p.key not in done]
    if unjudged:
        # A summary over fewer tasks than selected would overstate every rate.
        raise RuntimeError(f"{len(unjudged)} tasks were cancelled before a verdict (e.g. {unjudged[0]}); "
                           "run again with the same output_dir to judge them")
    return [done[p.key] for p in problems]
