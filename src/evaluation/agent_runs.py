"""Solutions from a generating policy: run the agent on every problem, keep its trajectories.

Each episode's row is appended to ``trajectories.jsonl`` as it ends (a re-run skips problems
that already have one), its readable transcript goes to ``transcripts/``, and the solution the
paper's evaluation rule picks, the best correct workspace of the trajectory, is written to
``agent_solutions/level{L}/{id}/`` for the runner to judge like any replayed solution (under the
evaluation's own sandbox settings). An episode that never reached a correct state contributes
no solution: a failure, as in fast_p.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Mapping, Optional

from sandbox.config import SandboxConfig
from sandbox.pool import make_pool

from .kernelbench import Problem

TRAJECTORIES_FILE = "trajectories.jsonl"


def episode_id(problem: Problem) -> str:
    """Stable across runs, so a resumed run knows which problems already have an episode."""
    return f"level{problem.level}-{problem.problem_id}-{problem.name}"


def finished_episodes(path: Path) -> dict[str, dict]:
    """Episode id -> trajectory row, for the rows already written (a torn last line is ignored)."""
    rows = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                rows[row["episode_id"]] = row
            except (ValueError, KeyError, TypeError):
                continue
    return rows


def run_agent(problems: list[Problem], policy_cfg: Mapping[str, Any], agent_cfg: Mapping[str, Any],
              sandbox: SandboxConfig, out_dir: Path, workers: Optional[int], episodes_in_flight: int,
              reward: str) -> dict[tuple[int, int], Optional[Path]]:
    """Problem key -> solution directory written from its episode (None: no solution). ``reward``
    is the ``reward`` group's name: it scores the episodes' verdicts (and picks their best)."""
    from src.agent import AgentConfig, TrajectoryWriter, build_policy, run_episodes

    trajectories = out_dir / TRAJECTORIES_FILE
    done = finished_episodes(trajectories)
    todo = [p for p in problems if episode_id(p) not in done]
    if todo:
        policy = build_policy(dict(policy_cfg))
        config = AgentConfig.from_dict(dict(agent_cfg))
        try:
            with make_pool(sandbox, workers) as pool:
                asyncio.run(run_episodes([p.path for p in todo], policy, pool, config, sandbox.backend,
                                         reward=reward, writer=TrajectoryWriter(trajectories),
                                         concurrency=episodes_in_flight, episode_ids=[episode_id(p) for p in todo]))
        finally:
            getattr(policy, "close", lambda: None)()
        done = finished_episodes(trajectories)
    write_transcripts(done.values(), out_dir / "transcripts")
    return {p.key: write_solution(done.get(episode_id(p)), p, out_dir / "agent_solutions") for p in problems}


def write_solution(row: Optional[dict], problem: Problem, root: Path) -> Optional[Path]:
    files = (row or {}).get("best_solution")
    if not files:
        return None
    target = root / f"level{problem.level}" / str(problem.problem_id)
    for rel, text in files.items():
        path = (target / rel).resolve()
        if not path.is_relative_to(target.resolve()):
            continue  # never write outside the solution directory
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return target


def write_transcripts(rows, directory: Path) -> None:
    from src.agent.trajectory import render_transcript

    directory.mkdir(parents=True, exist_ok=True)
    for row in rows:
        (directory / f"{row['episode_id']}.md").write_text(render_transcript(row), encoding="utf-8")
