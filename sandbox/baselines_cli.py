"""``python -m sandbox baselines``: eager and torch.compile times of every task of a benchmark,
into the shared baseline cache and one JSON line per task.

Tasks are the ``*.py`` files under ``--benchmark-root`` (a KernelBench tree: those of its
level1/, level2/, level3/ folders), in path order; each line is ``{"id": relative path, "eager_us", "compile_us", "compile_error",
"cached", "seconds"}`` or ``{"id", "task_error"}``. Lines are appended and flushed one by one, so
an interrupted run resumes where it stopped (ids already in OUT are skipped); timings already
in the cache cost nothing. Tasks are timed one at a time, each by a fresh reference worker, so
that nothing else runs on the device while one is timed.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .batch import finished_ids
from .config import SandboxConfig
from .errors import TaskError


def task_files(root: Path) -> list[Path]:
    if not root.is_dir():
        raise TaskError(f"--benchmark-root {root}: not a directory")
    # A KernelBench tree: only its level folders hold problems; anything else: every .py file.
    levels = sorted(p for p in root.glob("level*") if p.is_dir())
    files = sorted(p for base in levels or [root] for p in base.rglob("*.py")
                   if p.is_file() and not p.name.startswith("_"))
    if not files:
        raise TaskError(f"--benchmark-root {root}: no task files (*.py) under it")
    return files


def baseline_record(task: Path, task_id: str, cfg: SandboxConfig) -> dict:
    from .judge import evaluate_baselines

    start = time.monotonic()
    try:
        m = evaluate_baselines(task, cfg)
    except TaskError as exc:
        return {"id": task_id, "task_error": str(exc), "seconds": time.monotonic() - start}
    compile_error = None if m.compile_us is not None or not cfg.compile_baseline else "not timed"
    return {"id": task_id, "eager_us": m.eager_us, "compile_us": m.compile_us, "compile_error": compile_error,
            "cached": m.baseline_cached, "device": m.device, "seconds": time.monotonic() - start}


def run_baselines(args: argparse.Namespace, cfg: SandboxConfig) -> int:
    from tqdm import tqdm

    root, out = Path(args.benchmark_root), Path(args.out)
    files = task_files(root)
    done = finished_ids(out)
    todo = [(p, str(p.relative_to(root))) for p in files if str(p.relative_to(root)) not in done]
    print(f"{len(files)} tasks, {len(files) - len(todo)} already in {out}, {len(todo)} to time", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a") as sink, tqdm(total=len(todo), unit="task", file=sys.stderr) as bar:
        for task, task_id in todo:
            bar.set_postfix_str(task_id)
            sink.write(json.dumps(baseline_record(task, task_id, cfg)) + "\n")
            sink.flush()
            bar.update(1)
    return 0
