"""Decontamination: drop tasks whose ``Model`` class is too similar to an evaluation program's.

The similarity measure (docs/data_gen.md has the rationale):
1. Take the ``class Model`` node of each program (the whole module when it has none).
2. Normalise it: docstrings removed; every node becomes a token of its AST type, except that
   API names are kept (``Attr:relu``, ``Attr:Conv2d``, ``Name:torch``), while what a writer
   freely chooses is abstracted: local names and arguments (``Name``), ``self.<attr>`` names
   (``SelfAttr``) and literal values (``Const``); keyword-vs-positional arguments and Load/Store
   contexts leave no token.
3. similarity(a, b) = difflib's ratio 2*M / (|a| + |b|) of the two token sequences, where M is
   the number of tokens in matching blocks (Ratcliff/Obershelp). 1.0 means the same structure
   calling the same APIs in the same order; renaming variables or changing sizes does not lower it.
A candidate is dropped when its maximum similarity over the benchmark exceeds the threshold
(0.9, the paper's). quick_ratio() bounds ratio() from above and prunes most pairs cheaply.

A dataset made without a benchmark at hand (the embedded one was) is decontaminated later with:

    python -m data_gen.decontaminate data/ops_h200/tasks.parquet --benchmark-dir KernelBench/KernelBench \
        --summary data/ops_h200/decontamination.json
"""
from __future__ import annotations

import argparse
import ast
import difflib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

# Module aliases whose names carry meaning (they say which API is called).
API_ROOTS = frozenset({"torch", "nn", "F", "math", "functional"})


@dataclass
class Match:
    similarity: float
    # Benchmark file the candidate is closest to ("" when the benchmark is empty).
    closest: str


class _Tokens(ast.NodeVisitor):
    def __init__(self) -> None:
        self.out: list[str] = []

    def generic_visit(self, node: ast.AST) -> None:
        # Load/Store contexts carry no information; keyword vs positional is the writer's choice.
        if not isinstance(node, (ast.expr_context, ast.keyword)):
            self.out.append(token(node))
        super().generic_visit(node)


def token(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            return "SelfAttr"
        return f"Attr:{node.attr}"
    if isinstance(node, ast.Name):
        return f"Name:{node.id}" if node.id in API_ROOTS else "Name"
    if isinstance(node, ast.Constant):
        return "Const"
    return type(node).__name__


def strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def model_tokens(source: str) -> list[str]:
    """Normalised token sequence of the program's Model class (raises SyntaxError if unparsable)."""
    tree = strip_docstrings(ast.parse(source))
    target = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), tree)
    visitor = _Tokens()
    # The class's own name and bases are the same in every task: start from its body.
    for stmt in getattr(target, "body", []):
        visitor.visit(stmt)
    return visitor.out


def similarity(a: list[str], b: list[str]) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


class Benchmark:
    """Token sequences of every program in a benchmark directory (searched recursively)."""

    def __init__(self, programs: dict[str, list[str]]):
        self.programs = programs

    @classmethod
    def from_dir(cls, root: str | Path, pattern: str = "*.py") -> "Benchmark":
        root = Path(root)
        if not root.is_dir():
            raise FileNotFoundError(f"benchmark directory not found: {root}")
        programs = {}
        for path in sorted(root.rglob(pattern)):
            try:
                source = path.read_text(encoding="utf-8", errors="replace")
                if "class Model" in source:
                    programs[str(path.relative_to(root))] = model_tokens(source)
            except (SyntaxError, ValueError):
                continue  # a benchmark file we cannot parse cannot be compared against
        return cls(programs)

    def __len__(self) -> int:
        return len(self.programs)

    def closest(self, source: str, threshold: Optional[float] = None) -> Match:
        """Highest similarity to any benchmark program. With ``threshold``, stops at the first
        program above it (enough to decide a drop) and skips pairs whose upper bound is below
        the best so far."""
        tokens = model_tokens(source)
        best = Match(0.0, "")
        for name, other in self.programs.items():
            matcher = difflib.SequenceMatcher(None, tokens, other, autojunk=False)
            if matcher.real_quick_ratio() <= best.similarity or matcher.quick_ratio() <= best.similarity:
                continue
            score = matcher.ratio()
            if score > best.similarity:
                best = Match(score, name)
                if threshold is not None and score > threshold:
                    break
        return best


def contaminated(sources: Iterable[str], benchmark: Benchmark, threshold: float = 0.9) -> list[Match]:
    """One Match per source; a source is contaminated when ``match.similarity > threshold``."""
    return [benchmark.closest(source, threshold) for source in sources]


def decontaminate_rows(rows: list[dict], benchmark_dir: str | Path, threshold: float = 0.9,
                       pattern: str = "*.py", progress: bool = True) -> tuple[list[dict], list[dict], dict]:
    """(kept, dropped, summary): rows whose code is more similar than ``threshold`` to a program
    under ``benchmark_dir`` are dropped; every row gets decontam_similarity / decontam_closest."""
    from tqdm import tqdm

    benchmark = Benchmark.from_dir(benchmark_dir, pattern)
    if not len(benchmark):
        raise ValueError(f"no programs with a Model class under benchmark_dir {benchmark_dir}")
    kept, dropped = [], []
    for row in tqdm(rows, desc="decontaminate", unit="task", disable=not progress):
        match = benchmark.closest(row["code"], threshold)
        row["decontam_similarity"], row["decontam_closest"] = round(match.similarity, 4), match.closest
        (dropped if match.similarity > threshold else kept).append(row)
    summary = {"benchmark_dir": str(benchmark_dir), "benchmark_programs": len(benchmark), "threshold": threshold,
               "checked": len(rows), "dropped": len(dropped),
               "dropped_examples": [(r["id"], r["decontam_closest"], r["decontam_similarity"]) for r in dropped[:10]]}
    return kept, dropped, summary


def decontaminate_dataset(dataset: str | Path, benchmark_dir: str | Path, threshold: float = 0.9,
                          out: str | Path | None = None, pattern: str = "*.py") -> dict:
    """Decontaminate a parquet dataset of ours already written: writes the kept rows to ``out``
    (default: in place) and returns the summary with every dropped row's id, closest program and
    score."""
    from .dataset import load_tasks, write_dataset

    kept, dropped, summary = decontaminate_rows(load_tasks(dataset), benchmark_dir, threshold, pattern)
    write_dataset(kept, out or dataset)
    del summary["dropped_examples"]  # all of them follow
    return {**summary, "kept": len(kept), "max_similarity_kept": max((r["decontam_similarity"] for r in kept), default=0.0),
            "dropped_rows": [{"id": r.get("id"), "closest": r["decontam_closest"], "similarity": r["decontam_similarity"]}
                             for r in dropped]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m data_gen.decontaminate", description=__doc__.split("\n")[0])
    parser.add_argument("dataset", help="parquet file written by data_gen")
    parser.add_argument("--benchmark-dir", required=True, help="directory searched recursively, e.g. KernelBench/KernelBench")
    parser.add_argument("--threshold", type=float, default=0.9, help="drop above this similarity")
    parser.add_argument("--out", help="where to write the kept rows (default: the dataset, in place)")
    parser.add_argument("--summary", help="also write the summary as JSON here")
    args = parser.parse_args(argv)
    try:
        summary = decontaminate_dataset(args.dataset, args.benchmark_dir, args.threshold, args.out)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(summary, indent=1)
    if args.summary:
        Path(args.summary).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
