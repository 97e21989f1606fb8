"""Replay: solutions written earlier, by any system, mapped onto benchmark problems.

Two sources are read:
- a directory laid out like the benchmark: ``level{L}/{id}_*.py`` (or ``{id}.py``) single-file
  solutions, or ``level{L}/{id}/`` (or ``{id}_*/``) workspace directories;
- a JSONL file with one solution per line: ``{"level_id": L, "task_id": id, "code": "..."}``
  (the shape in which some public systems release their kernels); each ``code`` is written to
  ``WORKDIR/level{L}/{id}.py``, a directory private to this run.

A problem without a solution maps to None: the runner records it as a failure (as fast_p does).
"""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Iterable, Optional

from .kernelbench import Problem

log = logging.getLogger(__name__)

# "3_Row_Softmax.py", "3.py", "3_Row_Softmax/", "3/" -> problem id 3.
SOLUTION_NAME = re.compile(r"^(\d+)(?:_[^/]*)?(?:\.py)?$")
REQUIRED_JSONL_FIELDS = ("level_id", "task_id", "code")

Key = tuple[int, int]


class ReplayError(ValueError):
    """The solutions source is unusable; the message names the file (and line) at fault."""


def replay_solutions(source: str | Path, problems: Iterable[Problem],
                     workdir: Path) -> dict[Key, Optional[Path]]:
    """Map every problem's key to its solution path, or None where there is none."""
    source = Path(source).expanduser()
    if source.is_dir():
        found = solutions_from_dir(source)
    elif source.is_file():
        found = solutions_from_jsonl(source, workdir)
    else:
        raise ReplayError(f"replay solutions {source} not found (expected a directory laid out like the "
                          "benchmark, or a JSONL file with level_id, task_id and code fields)")
    problems = list(problems)
    unused = set(found) - {p.key for p in problems}
    if unused:
        log.info("replay: %d solutions match no selected problem (e.g. level %d problem %d); ignored",
                 len(unused), *min(unused))
    return {p.key: found.get(p.key) for p in problems}


def solutions_from_dir(root: Path) -> dict[Key, Path]:
    """``level{L}/`` folders holding ``{id}[_name].py`` files or ``{id}[_name]/`` workspaces."""
    found: dict[Key, Path] = {}
    level_dirs = [d for d in sorted(root.iterdir()) if d.is_dir() and re.fullmatch(r"level\d+", d.name)]
    if not level_dirs:
        raise ReplayError(f"replay directory {root} has no level{{L}}/ folders (expected "
                          f"{root}/level1/{{id}}_{{name}}.py files or {root}/level1/{{id}}/ workspaces)")
    for level_dir in level_dirs:
        level = int(level_dir.name[len("level"):])
        for entry in sorted(level_dir.iterdir()):
            problem_id = _solution_id(entry)
            if problem_id is None:
                continue
            if (level, problem_id) in found:
                raise ReplayError(f"{level_dir} has two solutions for problem {problem_id}: "
                                  f"{found[level, problem_id].name} and {entry.name}")
            found[level, problem_id] = entry.resolve()
    return found


def _solution_id(entry: Path) -> Optional[int]:
    """The problem id a directory entry is a solution for; None for anything else."""
    if entry.name.startswith(".") or (entry.is_file() and entry.suffix != ".py"):
        return None
    if entry.is_dir() and entry.name.endswith(".py"):
        return None
    match = SOLUTION_NAME.match(entry.name)
    return int(match.group(1)) if match else None


def solutions_from_jsonl(path: Path, workdir: Path) -> dict[Key, Path]:
    """One ``{level_id, task_id, code}`` object per line; each code becomes a single-file solution."""
    found: dict[Key, Path] = {}
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            key, code = _parse_jsonl_line(line, f"{path}:{number}")
            if key in found:
                raise ReplayError(f"{path}:{number}: a second solution for level {key[0]} task {key[1]} "
                                  "(replay takes one solution per task)")
            found[key] = _write_solution(workdir, key, code)
    if not found:
        raise ReplayError(f"{path} holds no solutions")
    return found


def _parse_jsonl_line(line: str, where: str) -> tuple[Key, str]:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise ReplayError(f"{where}: not a JSON object ({exc})") from None
    if not isinstance(record, dict):
        raise ReplayError(f"{where}: not a JSON object")
    missing = [f for f in REQUIRED_JSONL_FIELDS if f not in record]
    if missing:
        raise ReplayError(f"{where}: missing field(s) {', '.join(missing)} "
                          f"(each line needs {', '.join(REQUIRED_JSONL_FIELDS)})")
    try:
        key = (int(record["level_id"]), int(record["task_id"]))
    except (TypeError, ValueError):
        raise ReplayError(f"{where}: level_id and task_id must be integers, got "
                          f"{record['level_id']!r} and {record['task_id']!r}") from None
    if not isinstance(record["code"], str):
        raise ReplayError(f"{where}: code must be a string")
    return key, record["code"]


def _write_solution(workdir: Path, key: Key, code: str) -> Path:
    """Write one replayed solution where the sandbox can read it (and a person can inspect it)."""
    path = workdir / f"level{key[0]}" / f"{key[1]}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(code, encoding="utf-8")
    return path.resolve()
