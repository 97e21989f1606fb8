"""The dataset on disk: parquet with the released set's columns plus our provenance.

Columns shared with CUDA-Agent-Ops-6K: ``code`` (the task program), ``ops`` (operator names),
``data_source`` ("torch#2", "transformers#1"). Ours add where each row came from and how it
fared in the filter, so a training run can be traced back to a synthesis run.

    from data_gen.dataset import load_tasks
    rows = load_tasks()                         # the embedded set, data/ops_h200/tasks.parquet
    rows = load_tasks("outputs/data_gen/tasks.parquet")  # a run of ours, or the released set
    rows[0]["code"], rows[0]["ops"], rows[0]["data_source"]
"""
from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from .decontaminate import strip_docstrings

REQUIRED_COLUMNS = ("code", "ops", "data_source")
# The embedded default training set: 851 tasks synthesized and filtered on an H200 with the
# offline composer and the gpu profile, decontaminated against KernelBench (data/ops_h200/README.md).
DEFAULT_TASKS = Path(__file__).resolve().parent.parent / "data" / "ops_h200" / "tasks.parquet"

SCHEMA = pa.schema([
    ("code", pa.string()),
    ("ops", pa.list_(pa.string())),
    ("data_source", pa.string()),
    # Provenance.
    ("id", pa.string()),
    ("composer", pa.string()),
    ("seed", pa.int64()),
    ("index", pa.int64()),
    ("code_sha256", pa.string()),
    ("target_ms", pa.float64()),
    ("estimated_ms", pa.float64()),
    ("eager_ms", pa.float64()),
    ("compile_ms", pa.float64()),
    ("device", pa.string()),
    # JSON object: rubric -> {"passed": bool, "reason": str}.
    ("verdicts", pa.string()),
    ("decontam_similarity", pa.float64()),
    ("decontam_closest", pa.string()),
])


def normalized_hash(code: str) -> str:
    """Hash of the program's structure: docstrings, comments and formatting do not count, so
    two composers writing the same task differently only in prose are duplicates."""
    try:
        # unparse, not ast.dump: the dump's fields change between Python versions (3.12 added
        # type_params), so the same program hashed differently on 3.11 and 3.12.
        key = ast.unparse(strip_docstrings(ast.parse(code)))
    except SyntaxError:
        key = code
    return hashlib.sha256(key.encode()).hexdigest()


def dedupe(rows: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Keep the first row of each normalized program; return (rows, number dropped)."""
    seen, kept, dropped = set(), [], 0
    for row in rows:
        digest = normalized_hash(row["code"])
        if digest in seen:
            dropped += 1
            continue
        seen.add(digest)
        kept.append({**row, "code_sha256": digest})
    return kept, dropped


def write_dataset(rows: list[dict[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = {f.name: [encode(f.name, row.get(f.name)) for row in rows] for f in SCHEMA}
    pq.write_table(pa.table(columns, schema=SCHEMA), path)
    return path


def encode(name: str, value: Any) -> Any:
    if name == "verdicts" and value is not None and not isinstance(value, str):
        return json.dumps(value, sort_keys=True)
    return value


def load_tasks(path: str | Path = DEFAULT_TASKS) -> list[dict[str, Any]]:
    """Rows of our parquet files or of the released CUDA-Agent-Ops-6K (file or directory of
    parquet files); by default the embedded set. Every row has code (str), ops (list of str)
    and data_source (str)."""
    path = Path(path)
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    if not files or not files[0].exists():
        raise FileNotFoundError(f"no parquet dataset at {path}")
    rows: list[dict[str, Any]] = []
    for file in files:
        table = pq.read_table(file)
        missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
        if missing:
            raise ValueError(f"{file} lacks column(s) {missing}; a task dataset needs {list(REQUIRED_COLUMNS)}")
        rows += [normalize_row(row) for row in table.to_pylist()]
    return rows


def normalize_row(row: dict[str, Any]) -> dict[str, Any]:
    ops = row.get("ops")
    if isinstance(ops, str):  # a list written as text in some exports
        try:
            ops = ast.literal_eval(ops)
        except (ValueError, SyntaxError):
            ops = [ops]
    row["ops"] = [str(op) for op in (ops or [])]
    if isinstance(row.get("verdicts"), str):
        row["verdicts"] = json.loads(row["verdicts"])
    return row
