"""The episode workspace: a private directory laid out like the paper's (task, fixed binding
files, SKILL.md, the agent's kernels and model_new.py), and the one place that decides which
paths the agent may read or write.

Confinement is by path resolution, not by trust in the model: a path is refused when it is
absolute, climbs out with ``..``, passes through any symbolic link, or (for writes) names a file
outside the agent's own ones (``model_new.py`` and ``kernels/*`` sources).
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Optional

from sandbox.solution import FIXED_FILES, KERNEL_SUFFIXES, TEMPLATE_DIR

SKILL_TEMPLATE = Path(__file__).resolve().parent / "SKILL.md"
TASK_FILE = "model.py"
SOLUTION_FILE = "model_new.py"
KERNEL_DIR = "kernels"
# Files the agent reads but never writes: the task, the fixed binding files and the instructions.
READ_ONLY = frozenset({TASK_FILE, "SKILL.md", *FIXED_FILES})

BACKEND_NOTES = {
    "cuda": ("Target: an NVIDIA GPU. Kernels are CUDA (`.cu`), built with nvcc `-O3 --use_fast_math` "
             "for the GPU's own architecture; launchers take device pointers and launch on the "
             "current stream."),
    "cpu": ("Target: the CPU backend (no GPU here). Kernels are C++ (`.cpp`), built with `-O3 -fopenmp`; "
            "use OpenMP loops and SIMD where they help. Launchers take host pointers. Timing runs on a "
            "fixed number of threads."),
}
KERNEL_SUFFIX = {"cuda": ".cu", "cpu": ".cpp"}


class WorkspaceError(ValueError):
    """A file operation the workspace refuses; the message is shown to the agent as is."""


def skill_text(backend: str) -> str:
    """SKILL.md for one backend (the rules are the same; the kernel language differs)."""
    if backend not in BACKEND_NOTES:
        raise ValueError(f"backend must be one of {sorted(BACKEND_NOTES)}, got {backend!r}")
    return SKILL_TEMPLATE.read_text().format(backend_notes=BACKEND_NOTES[backend],
                                             kernel_suffix=KERNEL_SUFFIX[backend])


@dataclass
class Workspace:
    """One episode's directory. ``create`` builds it; ``cleanup`` removes it (unless kept)."""

    root: Path
    backend: str
    owned: bool = True

    @classmethod
    def create(cls, task_source: str, backend: str, parent: Optional[str | Path] = None) -> "Workspace":
        if parent is not None:
            Path(parent).mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="episode-", dir=parent)).resolve()
        (root / TASK_FILE).write_text(task_source, encoding="utf-8")
        (root / "SKILL.md").write_text(skill_text(backend), encoding="utf-8")
        for name in FIXED_FILES:
            shutil.copyfile(TEMPLATE_DIR / name, root / name)
        (root / KERNEL_DIR).mkdir()
        return cls(root, backend)

    def cleanup(self) -> None:
        if self.owned:
            shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ path policy

    def resolve(self, relative: str) -> Path:
        """The real path of ``relative`` inside the workspace, or WorkspaceError."""
        if not isinstance(relative, str) or not relative.strip():
            raise WorkspaceError("path must be a non-empty string relative to the workspace")
        if "\0" in relative:
            raise WorkspaceError("path contains a NUL byte")
        parts = PurePosixPath(relative.strip()).parts
        if parts and parts[0] == "/":
            raise WorkspaceError(f"{relative}: absolute paths are refused; use a path relative to the workspace")
        if ".." in parts:
            raise WorkspaceError(f"{relative}: '..' is refused; paths stay inside the workspace")
        path = self.root
        for part in parts:
            if part == ".":
                continue
            path = path / part
            # Any link on the way could point anywhere: refuse it rather than follow it.
            if path.is_symlink():
                raise WorkspaceError(f"{relative}: symbolic links are refused")
        return path

    def writable(self, relative: str) -> Path:
        """``resolve`` plus the write policy: model_new.py or a source file directly in kernels/."""
        path = self.resolve(relative)
        rel = path.relative_to(self.root).as_posix()
        if rel in READ_ONLY or (rel.startswith(KERNEL_DIR + "/") and path.name in FIXED_FILES):
            raise WorkspaceError(f"{rel} is fixed: the judge uses its own copy, so it cannot be edited")
        if rel == SOLUTION_FILE:
            return path
        in_kernels = rel.startswith(KERNEL_DIR + "/") and rel.count("/") == 1
        if not (in_kernels and path.name.endswith(KERNEL_SUFFIXES)):
            raise WorkspaceError(f"{rel}: only {SOLUTION_FILE} and kernels/<name> with a suffix in "
                                 f"{', '.join(KERNEL_SUFFIXES)} may be written")
        return path

    # ------------------------------------------------------------------ solution snapshots

    def solution_files(self) -> dict[str, bytes]:
        """The agent's files as they are now (what the judge would read)."""
        files: dict[str, bytes] = {}
        model_new = self.root / SOLUTION_FILE
        if model_new.is_file() and not model_new.is_symlink():
            files[SOLUTION_FILE] = model_new.read_bytes()
        kdir = self.root / KERNEL_DIR
        if kdir.is_dir() and not kdir.is_symlink():
            for entry in sorted(kdir.iterdir()):
                if entry.is_file() and not entry.is_symlink() and entry.name.endswith(KERNEL_SUFFIXES):
                    files[f"{KERNEL_DIR}/{entry.name}"] = entry.read_bytes()
        return files

    def snapshot(self, dest: Path) -> Path:
        """Copy the agent's files into ``dest`` (a solution directory the pool can judge while the
        agent keeps editing)."""
        dest.mkdir(parents=True, exist_ok=True)
        for rel, data in self.solution_files().items():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return dest

    def listing(self, relative: str = ".") -> list[str]:
        """Entries under a directory (recursive, relative paths, directories end with '/')."""
        base = self.resolve(relative)
        if not base.is_dir():
            raise WorkspaceError(f"{relative}: not a directory")
        out = []
        for path in sorted(base.rglob("*")):
            rel = path.relative_to(self.root)
            if any(p.startswith(".") for p in rel.parts) or "build" in rel.parts:
                continue
            out.append(rel.as_posix() + ("/" if path.is_dir() else ""))
        return out
