"""``python -m sandbox evaluate-batch``: a manifest of requests in, one result line per request out.

The manifest is checked whole before anything runs (a bad line is reported with its number and
nothing is judged). Results are appended and flushed one by one, so an interrupted batch loses
nothing and a rerun skips every id already in the output.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .config import SandboxConfig
from .errors import TaskError
from .judge import STAGES
from .pool import EvalRequest, EvalResult, make_pool
from .reward import result_record

REQUIRED_FIELDS = ("id", "task", "solution")


def read_manifest(path: Path) -> list[EvalRequest]:
    """Every request of a JSONL manifest; TaskError naming the first bad line."""
    if not path.is_file():
        raise TaskError(f"manifest not found: {path}")
    requests, seen = [], set()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as exc:
            raise TaskError(f"{path}:{number}: not JSON ({exc})") from None
        missing = [f for f in REQUIRED_FIELDS if not isinstance(entry, dict) or f not in entry]
        if missing:
            raise TaskError(f"{path}:{number}: missing field(s) {', '.join(missing)}")
        request_id = str(entry["id"])
        if request_id in seen:
            raise TaskError(f"{path}:{number}: duplicate id {request_id!r}")
        seen.add(request_id)
        task, solution = (_resolve(path.parent, entry[k]) for k in ("task", "solution"))
        for what, p in (("task", task), ("solution", solution)):
            if not p.exists():
                raise TaskError(f"{path}:{number}: {what} not found: {p}")
        stop_after = str(entry.get("stop_after", "timing"))
        if stop_after not in STAGES:
            raise TaskError(f"{path}:{number}: stop_after must be one of {', '.join(STAGES)}")
        requests.append(EvalRequest(request_id, task, solution, stop_after))
    return requests


def _resolve(base: Path, value: str) -> Path:
    p = Path(str(value)).expanduser()
    return p if p.is_absolute() else (base / p).resolve()


def finished_ids(out: Path) -> set[str]:
    """Ids that already have a result line (a torn last line from a crash does not count)."""
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            try:
                done.add(str(json.loads(line)["id"]))
            except (ValueError, KeyError, TypeError):
                continue
    return done


def record_of(result: EvalResult, reward_name: str) -> dict:
    if result.task_error is not None:
        return {"id": result.id, "task_error": result.task_error, "reward": None, "reward_name": reward_name}
    return {"id": result.id, **result_record(result.measurement, reward_name)}


def run_batch(args: argparse.Namespace, cfg: SandboxConfig) -> int:
    from tqdm import tqdm

    requests = read_manifest(Path(args.manifest))
    out = Path(args.out)
    done = finished_ids(out)
    todo = [r for r in requests if r.id not in done]
    print(f"{len(requests)} requests, {len(requests) - len(todo)} already in {out}, {len(todo)} to judge",
          file=sys.stderr)
    if not todo:
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with make_pool(cfg, workers=args.workers) as pool, open(out, "a") as sink, \
            tqdm(total=len(todo), unit="eval", file=sys.stderr) as bar:
        for result in pool.map(todo):
            sink.write(json.dumps(record_of(result, args.reward)) + "\n")
            sink.flush()
            bar.update(1)
    return 0
