"""Benchmark problems in KernelBench's layout: ``ROOT/level{L}/{id}_{name}.py``.

The root is a KernelBench checkout's problem folder (``KernelBench/KernelBench``; the checkout's
top folder is accepted too) or this project's own sample (``examples/kernelbench_sample``).
Only file names are read here; the sandbox checks each problem's contents when it runs it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

# "19_ReLU.py" -> (19, "ReLU"); KernelBench names are "{id}_{Name_With_Underscores}.py".
PROBLEM_FILE = re.compile(r"^(\d+)_(.+)\.py$")


class BenchmarkError(ValueError):
    """The benchmark root or selection is unusable; the message says what was expected."""


@dataclass(frozen=True)
class Problem:
    """One benchmark task: where it lives and how reports name it."""

    level: int
    problem_id: int
    name: str
    path: Path

    @property
    def key(self) -> tuple[int, int]:
        return (self.level, self.problem_id)

    @property
    def id(self) -> str:
        """Request id for the sandbox pool and the results file."""
        return f"level{self.level}/{self.problem_id}"


def resolve_root(root: str | Path, levels: Iterable[int]) -> Path:
    """The directory holding ``level{L}/``; a KernelBench checkout's top folder is accepted."""
    root = Path(root).expanduser().absolute()  # absolute in messages: relative to the launch directory
    if not root.is_dir():
        raise BenchmarkError(f"benchmark root {root} is not a directory (expected a folder holding "
                             "level1/, level2/, ... with {id}_{name}.py problem files)")
    first = f"level{min(levels)}"
    if not (root / first).is_dir() and (root / "KernelBench" / first).is_dir():
        return root / "KernelBench"  # the checkout's top folder: problems live one level down
    return root


def load_problems(root: str | Path, levels: Iterable[int],
                  problem_ids: Optional[Iterable[int]] = None) -> list[Problem]:
    """Every problem of the requested levels (optionally only some ids), sorted by level and id."""
    levels = sorted(set(int(level) for level in levels))
    if not levels:
        raise BenchmarkError("no benchmark levels requested")
    base = resolve_root(root, levels)
    wanted = None if problem_ids is None else {int(i) for i in problem_ids}
    problems: list[Problem] = []
    for level in levels:
        found = level_problems(base, level)
        if wanted is not None:
            found = [p for p in found if p.problem_id in wanted]
        problems += found
    if wanted is not None:
        unknown = wanted - {p.problem_id for p in problems}
        if unknown:
            raise BenchmarkError(f"problem ids {sorted(unknown)} are in none of levels {levels} under {base}")
    return problems


def level_problems(base: Path, level: int) -> list[Problem]:
    """The ``{id}_{name}.py`` files of one level; a missing or empty level is an error."""
    level_dir = base / f"level{level}"
    if not level_dir.is_dir():
        raise BenchmarkError(f"benchmark root {base} has no level{level}/ directory (expected "
                             f"{base}/level{level}/{{id}}_{{name}}.py files)")
    by_id: dict[int, Problem] = {}
    for path in sorted(level_dir.iterdir()):
        match = PROBLEM_FILE.match(path.name)
        if not match or not path.is_file():
            continue
        problem = Problem(level, int(match.group(1)), match.group(2), path.resolve())
        if problem.problem_id in by_id:
            raise BenchmarkError(f"level{level} has two problems with id {problem.problem_id}: "
                                 f"{by_id[problem.problem_id].path.name} and {path.name}")
        by_id[problem.problem_id] = problem
    if not by_id:
        raise BenchmarkError(f"{level_dir} holds no {{id}}_{{name}}.py problem files")
    return [by_id[i] for i in sorted(by_id)]
