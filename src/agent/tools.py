"""The agent's tools: file operations confined to the workspace, the sandbox's verdict
(compile / verify / profile) as short text observations, and finish.

There is no general shell: the sandbox isolates solution code inside its own worker processes,
but a shell in the trainer's process would run model-written commands with the trainer's rights.
What a shell was for in the paper (running utils/compile.py, verify.py, profile.py) is a tool here.

Every compile, verify or profile call is one full sandbox evaluation of a snapshot of the
workspace (the pool has no build-only entry); the three differ in what they show. An unchanged
workspace is judged once and the verdict reused, so compile -> verify -> profile on the same
files costs one evaluation.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from sandbox.judge import STAGES
from sandbox.measurement import Measurement
from sandbox.pool import EvalRequest, PoolClient
from sandbox.reward import reward_fn

from .workspace import Workspace, WorkspaceError

# Longest file read_file shows at once (characters); more is paged with offset.
READ_CHARS = 12_000
# Characters of compiler or runtime detail in one observation.
DETAIL_CHARS = 2_500

TOOL_SPECS: dict[str, dict[str, Any]] = {
    "list_files": {"description": "List the files of the workspace (or of one directory in it).",
                   "parameters": {"type": "object", "properties": {
                       "path": {"type": "string", "description": "directory relative to the workspace; default '.'"}},
                       "required": []}},
    "read_file": {"description": "Read a text file of the workspace.",
                  "parameters": {"type": "object", "properties": {
                      "path": {"type": "string", "description": "file relative to the workspace"},
                      "offset": {"type": "integer", "description": "first character to show; default 0"}},
                      "required": ["path"]}},
    "write_file": {"description": "Create or overwrite model_new.py or a file in kernels/.",
                   "parameters": {"type": "object", "properties": {
                       "path": {"type": "string", "description": "model_new.py or kernels/<name>"},
                       "content": {"type": "string", "description": "the whole new file"}},
                       "required": ["path", "content"]}},
    "edit_file": {"description": "Replace one exact, unique occurrence of old_text with new_text in a file.",
                  "parameters": {"type": "object", "properties": {
                      "path": {"type": "string", "description": "model_new.py or kernels/<name>"},
                      "old_text": {"type": "string", "description": "text that occurs exactly once"},
                      "new_text": {"type": "string", "description": "its replacement"}},
                      "required": ["path", "old_text", "new_text"]}},
    "compile": {"description": "Build the workspace's kernels; shows compiler errors.",
                "parameters": {"type": "object", "properties": {}, "required": []}},
    "verify": {"description": "Build and check ModelNew against Model on fresh random inputs.",
               "parameters": {"type": "object", "properties": {}, "required": []}},
    "profile": {"description": "Build, verify and time ModelNew against eager PyTorch and torch.compile.",
                "parameters": {"type": "object", "properties": {}, "required": []}},
    "finish": {"description": "End the episode: the workspace as it is now is the solution.",
               "parameters": {"type": "object", "properties": {}, "required": []}},
}
# Sandbox tools and how far each asks the sandbox to go: compile feedback needs no GPU lane,
# verification no timing; only profile (and the final verdict) pays for the whole evaluation.
SANDBOX_TOOLS = {"compile": "build", "verify": "verify", "profile": "timing"}
DEPTH = {stage: i for i, stage in enumerate(STAGES)}


def tool_schemas(names: list[str]) -> list[dict[str, Any]]:
    """OpenAI-style function schemas, the form ``apply_chat_template(tools=...)`` takes."""
    unknown = [n for n in names if n not in TOOL_SPECS]
    if unknown:
        raise ValueError(f"unknown tools {unknown}; available: {sorted(TOOL_SPECS)}")
    return [{"type": "function", "function": {"name": n, **TOOL_SPECS[n]}} for n in names]


@dataclass
class ToolResult:
    """What one call returns to the loop: the observation text and what it changes."""

    text: str
    ok: bool = True
    finished: bool = False
    measurement: Optional[Measurement] = None
    # The judge's verdict behind a compile/verify/profile observation.
    verdict: Optional["Verdict"] = None


@dataclass
class Verdict:
    """One sandbox evaluation of one workspace state."""

    key: str
    measurement: Measurement
    reward: float
    snapshot: Path
    seconds: float = 0.0


@dataclass
class SandboxJudge:
    """Judges workspace snapshots through the pool, once per distinct content."""

    pool: PoolClient
    task: Path
    snapshots: Path
    # The reward function's name (sandbox.reward.REWARDS), given by the episode's caller.
    reward_name: str
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    # Sandbox evaluations actually run (cache hits excluded) and their wall time.
    evaluations: int = 0
    seconds: float = 0.0

    async def judge(self, workspace: Workspace, stop_after: str = "timing") -> Verdict:
        """The verdict on the workspace as it is, at least as deep as ``stop_after``: a deeper
        verdict on the same content answers a shallower question (profile's serves verify)."""
        import time

        files = workspace.solution_files()
        key = content_key(files)
        known = self.verdicts.get(key)
        # A failure is final for this content: going deeper would only fail again.
        if known is not None and (known.measurement.error is not None
                                  or DEPTH[known.measurement.stopped_after] >= DEPTH[stop_after]):
            return known
        snapshot = workspace.snapshot(self.snapshots / f"{self.evaluations:03d}-{stop_after}-{key[:10]}")
        start = time.monotonic()
        result = await self.pool.evaluate(EvalRequest(key, self.task, snapshot, stop_after))
        elapsed = time.monotonic() - start
        self.evaluations += 1
        self.seconds += elapsed
        m = result.measurement or Measurement().fail("task_error" if result.task_error else "cancelled",
                                                     result.task_error or "evaluation cancelled")
        verdict = Verdict(key, m, reward_fn(self.reward_name)(m), snapshot, elapsed)
        self.verdicts[key] = verdict
        return verdict


def content_key(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name, data in sorted(files.items()):
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


class Toolbox:
    """Dispatches parsed calls to the workspace and the judge; every failure is an observation."""

    def __init__(self, workspace: Workspace, judge: SandboxJudge, enabled: list[str]):
        tool_schemas(enabled)  # validates the names
        self.workspace, self.judge, self.enabled = workspace, judge, list(enabled)
        self._file_tools: dict[str, Callable[..., str]] = {
            "list_files": self.list_files, "read_file": self.read_file,
            "write_file": self.write_file, "edit_file": self.edit_file}

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if name not in self.enabled:
            return ToolResult(f"error: unknown tool {name!r}; available: {', '.join(self.enabled)}", ok=False)
        if name == "finish":
            return ToolResult("finished: the workspace as it is now will be judged", finished=True)
        if name in SANDBOX_TOOLS:
            verdict = await self.judge.judge(self.workspace, SANDBOX_TOOLS[name])
            return ToolResult(render_verdict(name, verdict.measurement), measurement=verdict.measurement,
                              verdict=verdict)
        try:
            return ToolResult(self._file_tools[name](**arguments))
        except TypeError as exc:
            return ToolResult(f"error: bad arguments for {name}: {exc}", ok=False)
        except (WorkspaceError, OSError, UnicodeError) as exc:
            return ToolResult(f"error: {exc}", ok=False)

    def list_files(self, path: str = ".") -> str:
        entries = self.workspace.listing(path)
        return "\n".join(entries) if entries else "(empty)"

    def read_file(self, path: str, offset: int = 0) -> str:
        target = self.workspace.resolve(path)
        if not target.is_file():
            raise WorkspaceError(f"{path}: no such file")
        text = target.read_text(encoding="utf-8", errors="replace")
        offset = max(0, int(offset))
        chunk = text[offset:offset + READ_CHARS]
        if offset + READ_CHARS < len(text):
            chunk += f"\n[... {len(text) - offset - READ_CHARS} more characters; read again with offset={offset + READ_CHARS}]"
        return chunk

    def write_file(self, path: str, content: str) -> str:
        if not isinstance(content, str):
            raise WorkspaceError("content must be a string")
        target = self.workspace.writable(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return f"wrote {path} ({len(content.splitlines())} lines)"

    def edit_file(self, path: str, old_text: str, new_text: str) -> str:
        target = self.workspace.writable(path)
        if not target.is_file():
            raise WorkspaceError(f"{path}: no such file (use write_file to create it)")
        text = target.read_text(encoding="utf-8")
        count = text.count(old_text) if old_text else 0
        if count != 1:
            raise WorkspaceError(f"{path}: old_text occurs {count} times; it must occur exactly once")
        target.write_text(text.replace(old_text, new_text, 1), encoding="utf-8")
        return f"edited {path}"


# ---------------------------------------------------------------------- observations

def render_verdict(tool: str, m: Measurement) -> str:
    """The numbers the model needs, in a few lines; compile shows the build only."""
    build = m.stage_seconds.get("build")
    if not m.compiled:
        return f"compile failed ({m.error}):\n{failure_detail(m)}"
    built = "compiled OK" + (f" ({build:.1f} s)" if build else " (cached build)")
    if tool == "compile":
        return built
    if not m.correct or m.error:
        return f"{built}\nverify FAILED ({m.error}):\n{failure_detail(m)}"
    checked = f"verify passed: {m.trials_passed}/{m.num_trials} input sets match (max abs diff {fmt(m.max_abs_diff)})"
    if tool == "verify":
        return f"{built}\n{checked}"
    return f"{built}\n{checked}\n{render_timing(m)}"


def render_timing(m: Measurement) -> str:
    lines = [f"runtime: {fmt(m.runtime_us)} us (median)"]
    if m.eager_us is not None:
        lines.append(f"eager PyTorch: {fmt(m.eager_us)} us -> speedup {fmt(m.speedup_vs_eager)}x")
    if m.compile_us is not None:
        lines.append(f"torch.compile: {fmt(m.compile_us)} us -> speedup {fmt(m.speedup_vs_compile)}x")
    lines.append("goal: a runtime more than 5% below both baselines")
    return "\n".join(lines)


def failure_detail(m: Measurement) -> str:
    detail = (m.error_detail or "").strip()
    if m.violations:
        detail = "violations: " + "; ".join(m.violations) + ("\n" + detail if detail else "")
    if m.error in ("compile_error", "compile_timeout") and not detail:
        detail = m.logs.get("build", "")
    return clip(detail or "(no detail)", DETAIL_CHARS)


def clip(text: str, limit: int) -> str:
    """Keep the head and the tail (compiler errors matter at both ends) and say what was cut."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[-tail:]}"


def fmt(value: Optional[float]) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
