"""The task set a training run draws from, and its train / validation split (by task).

Sources: a parquet dataset of ours or the released Ops-6K layout (``code`` column; the embedded
default is ``data/ops_h200/tasks.parquet``), or a directory of KernelBench-format ``.py``
programs (searched recursively, e.g. ``examples/kernelbench_sample``). Every task becomes a file
under the run's directory, because the agent and the sandbox take task paths.

The split is by task: a hash of each task's id (``split_tasks``), or, for a parquet that carries
its own split (the task family's ``split`` column, by chain signature: data_gen/family.py), that
column (``split_by_column``).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

MODEL_CLASS = re.compile(r"^class\s+Model\s*\(", re.MULTILINE)
# The split column's value of a training task; any other value is held out.
TRAIN_SIDE = "train"


class TaskSetError(ValueError):
    """A task source that yields no usable task; the message says what was found."""


@dataclass  # not frozen: Lightning rebuilds dataclasses in a batch when it moves it to a device
class Task:
    id: str
    path: Path
    # The task's side in its dataset's own split column ("" when the split is by hash).
    split: str = ""


@dataclass(frozen=True)
class TaskSplit:
    train: list[Task]
    val: list[Task]


def load_task_set(source: str | Path, out_dir: Path, limit: int = 0, split_column: str = "") -> list[Task]:
    """Every usable task of ``source`` as a file in ``out_dir`` (ids stable across runs), at
    most ``limit`` (0: all; with ``split_column``, at most ``limit`` training tasks, the
    held-out ones untouched). ``split_column`` names the parquet column each task's side is read from."""
    source = Path(source).expanduser()
    if not source.exists():
        raise TaskSetError(f"task source {source} does not exist (a .parquet dataset or a directory of task .py files)")
    if split_column and source.suffix != ".parquet":
        raise TaskSetError(f"split_column={split_column!r} needs a .parquet task source, got the directory {source}")
    programs = _parquet_programs(source, split_column) if source.suffix == ".parquet" else _directory_programs(source)
    usable = [p for p in programs if MODEL_CLASS.search(p[1]) and "def get_inputs" in p[1]]
    if limit > 0 and split_column:
        kept = {p[0] for p in [p for p in usable if p[2] == TRAIN_SIDE][:limit]}
        usable = [p for p in usable if p[2] != TRAIN_SIDE or p[0] in kept]
    elif limit > 0:
        usable = usable[:limit]
    if not usable:
        raise TaskSetError(f"task source {source} has no usable task ({len(programs)} programs read; a task "
                           "defines class Model(nn.Module), get_inputs() and get_init_inputs())")
    out_dir.mkdir(parents=True, exist_ok=True)
    tasks = []
    for task_id, code, side in usable:
        path = out_dir / f"{task_id}.py"
        if not path.exists() or path.read_text(encoding="utf-8") != code:
            path.write_text(code, encoding="utf-8")
        tasks.append(Task(task_id, path, side))
    return tasks


def _parquet_programs(path: Path, split_column: str = "") -> list[tuple[str, str, str]]:
    from data_gen.dataset import load_tasks

    try:
        rows = load_tasks(path)
    except Exception as exc:  # pyarrow raises many kinds for a file that is not a dataset
        raise TaskSetError(f"cannot read task dataset {path}: {type(exc).__name__}: {exc}") from None
    if split_column and rows and split_column not in rows[0]:
        raise TaskSetError(f"task dataset {path} has no {split_column!r} column to split by "
                           f"(columns: {', '.join(sorted(rows[0]))}); set data.split_column='' for a hash split")
    programs = []
    for i, row in enumerate(rows):
        code = row.get("code") or ""
        task_id = _safe_id(str(row.get("id") or f"row{i:05d}"))
        programs.append((task_id, code, str(row.get(split_column) or "") if split_column else ""))
    return programs


def _directory_programs(root: Path) -> list[tuple[str, str, str]]:
    programs = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        programs.append((_safe_id("-".join(rel.parts)), path.read_text(encoding="utf-8", errors="replace"), ""))
    return programs


def _safe_id(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:120]


def split_tasks(tasks: list[Task], val_fraction: float, val_max: int, seed: int) -> TaskSplit:
    """A deterministic split by task (never by sample): a task is held out when the hash of its
    id and ``seed`` falls under ``val_fraction``, at most ``val_max`` of them; a set too small to
    hold any out keeps every task for training (and validation is then empty)."""
    def score(task: Task) -> float:
        digest = hashlib.sha256(f"{seed}:{task.id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2 ** 64

    ranked = sorted(tasks, key=score)
    n_val = min(int(len(tasks) * val_fraction), val_max if val_max > 0 else len(tasks), len(tasks) - 1)
    n_val = max(n_val, 0)
    held = {t.id for t in ranked[:n_val]}
    return TaskSplit([t for t in tasks if t.id not in held], [t for t in tasks if t.id in held])


def split_by_column(tasks: list[Task], val_max: int) -> TaskSplit:
    """The dataset's own split: ``train`` tasks train, every other side (the family's
    ``heldout``) validates, the first ``val_max`` of them (0: all)."""
    held = [t for t in tasks if t.split != TRAIN_SIDE]
    return TaskSplit([t for t in tasks if t.split == TRAIN_SIDE], held[:val_max] if val_max > 0 else held)
