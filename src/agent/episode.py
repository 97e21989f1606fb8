"""The ReAct loop: the policy replies, its tool calls run against the workspace and the sandbox,
the observations go back, until it finishes, hits a limit or fails for good.

    traj = await run_episode(task_path, policy, pool, AgentConfig(), backend="cpu")

Stop reasons (``Trajectory.stop_reason``): finish, max_turns, context_limit, invalid_calls (too
many replies in a row without one usable call), single_turn (the one reply of single-turn mode),
template_drift (a chat template the token bookkeeping cannot use, see trajectory.py; checked at
episode start), policy_error, fatal_error.

Outcome: every distinct workspace state the agent judged, plus the final one, has a verdict,
scored with the reward its caller names (``reward=``: the ``reward`` config group's, the one
setting for both the best-state choice and training). Training uses the final workspace's reward
(``outcome: final``) or the best one (``best``); evaluation reports the best correct solution in
the trajectory (the paper's rule) either way.
"""
from __future__ import annotations

import asyncio
import dataclasses
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from sandbox.measurement import Measurement
from sandbox.pool import PoolClient
from sandbox.reward import passed, reward_fn

from .policies import PolicyError, ScriptedPolicy
from .toolcall import parse_tool_calls
from .tools import SANDBOX_TOOLS, SandboxJudge, Toolbox, Verdict, clip, content_key, tool_schemas
from .trajectory import (ChatRenderer, TemplateDrift, TokenLedger, ToolRecord, Trajectory, TrajectoryWriter,
                         TurnRecord)
from .workspace import SOLUTION_FILE, Workspace

ALL_TOOLS = ("list_files", "read_file", "write_file", "edit_file", "compile", "verify", "profile", "finish")
PYTHON_BLOCK = re.compile(r"```python\s*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class AgentConfig:
    """Mirrors conf/agent/*.yaml (each field is commented there)."""

    mode: str = "multi_turn"
    max_turns: int = 150
    max_context_tokens: int = 131_072
    max_new_tokens_per_turn: int = 8192
    max_observation_chars: int = 8000
    max_consecutive_invalid: int = 8
    tools: tuple[str, ...] = ALL_TOOLS
    outcome: str = "final"
    workspace_dir: str = ""
    keep_workspace: bool = False

    def __post_init__(self) -> None:
        if self.mode not in ("multi_turn", "single_turn"):
            raise ValueError(f"agent mode must be multi_turn or single_turn, got {self.mode!r}")
        if self.outcome not in ("final", "best"):
            raise ValueError(f"agent outcome must be final or best, got {self.outcome!r}")
        if min(self.max_turns, self.max_context_tokens, self.max_new_tokens_per_turn) < 1:
            raise ValueError("max_turns, max_context_tokens and max_new_tokens_per_turn must be >= 1")
        tool_schemas(list(self.tools))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "AgentConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown agent config keys: {sorted(unknown)}")
        kwargs = dict(values)
        if "tools" in kwargs:
            kwargs["tools"] = tuple(kwargs["tools"])
        return cls(**kwargs)


class StopEpisode(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(detail or reason)
        self.reason, self.detail = reason, detail


# ---------------------------------------------------------------------- prompts

def system_prompt(workspace: Workspace, cfg: AgentConfig) -> str:
    skill = (workspace.root / "SKILL.md").read_text()
    lines = ["## Tools", "Call a tool by writing, anywhere in your reply:", "<tool_call>",
             '{"name": "<tool>", "arguments": {...}}', "</tool_call>",
             "Several calls per reply are allowed; their results come back in the next message. Tools:"]
    for schema in tool_schemas(list(cfg.tools)):
        fn = schema["function"]
        args = ", ".join(fn["parameters"]["properties"])
        lines.append(f"- {fn['name']}({args}): {fn['description']}")
    return skill + "\n" + "\n".join(lines) + "\n"


def task_prompt(task_source: str, cfg: AgentConfig) -> str:
    head = f"The task (model.py):\n```python\n{task_source.rstrip()}\n```\n"
    if cfg.mode == "single_turn":
        return head + ("Answer in this one reply: write model_new.py and your kernels with write_file calls. "
                       "There is no feedback; the files as written are judged.")
    return head + ("Write ModelNew with your own kernels, then compile, verify and profile it, improve it, "
                   "and call finish when the workspace holds your best solution.")


def opening_messages(system: str, task_source: str, cfg: AgentConfig) -> list[dict]:
    """An episode's first two messages: the system prompt and the task."""
    return [{"role": "system", "content": system}, {"role": "user", "content": task_prompt(task_source, cfg)}]


class SingleReplyTokens:
    """(token_ids, loss_mask) of a single-turn episode whose one reply is given, exactly as
    ``Episode`` records them (the prompt, the reply as the policy's tokenizer encodes it, the
    template's closing), without a workspace or a sandbox: demonstrations in bulk. The system
    prompt and the renderer are built once."""

    def __init__(self, tokenizer: Any, cfg: AgentConfig, backend: str):
        if cfg.mode != "single_turn":
            raise ValueError(f"SingleReplyTokens records single-turn episodes, not {cfg.mode!r}")
        self.tokenizer, self.cfg = tokenizer, cfg
        workspace = Workspace.create("", backend)
        try:
            self.system = system_prompt(workspace, cfg)
        finally:
            workspace.cleanup()
        self.renderer = ChatRenderer(tokenizer, tool_schemas(list(cfg.tools)))

    def tokens(self, task_source: str, reply: str) -> tuple[list[int], list[int]]:
        messages = opening_messages(self.system, task_source, self.cfg)
        ledger = TokenLedger()
        ledger.extend(self.renderer.render(messages, True), generated=False)
        gen = ScriptedPolicy([reply], tokenizer=self.tokenizer).generate(messages, ledger.token_ids,
                                                                         self.cfg.max_new_tokens_per_turn)
        ledger.extend(gen.token_ids, True)
        ledger.extend(self.renderer.continuation(gen.token_ids, gen.finish_reason == "stop", []), False)
        return ledger.token_ids, ledger.loss_mask


# ---------------------------------------------------------------------- the loop

class Episode:
    """One episode's state; ``run`` drives it and always returns a Trajectory."""

    def __init__(self, task: Path, policy: Any, pool: PoolClient, cfg: AgentConfig, backend: str,
                 reward: str, episode_id: str = ""):
        self.task, self.policy, self.cfg = Path(task), policy, cfg
        self.task_source = self.task.read_text(encoding="utf-8")
        self.workspace = Workspace.create(self.task_source, backend, cfg.workspace_dir or None)
        self.judge = SandboxJudge(pool, self.task, self.workspace.root / ".judged", reward)
        self.toolbox = Toolbox(self.workspace, self.judge, list(cfg.tools))
        self.tools = tool_schemas(list(cfg.tools))
        self.renderer: Optional[ChatRenderer] = None  # built in run(): a template that fails is a stop reason
        sampling = getattr(policy, "sampling", None)
        self.traj = Trajectory(episode_id or uuid.uuid4().hex[:12], self.task.name, policy.name, cfg.mode,
                               has_logprobs=bool(policy.reports_logprobs), reward_name=reward,
                               sampling=dict(sampling) if sampling else None)
        # The last reply's ids and whether it stopped on a stop id, until its continuation is appended.
        self.open_reply: Optional[tuple[list[int], bool]] = None
        self.context_tokens = 0
        self.seconds = {"generate_s": 0.0, "tools_s": 0.0}
        # Sandbox seconds per stage over every evaluation run (sandbox_build_s, ...); summed as
        # they happen: the judge's cache keeps only the deepest verdict per content.
        self.stage_seconds: dict[str, float] = {}

    async def run(self) -> Trajectory:
        start = time.monotonic()
        try:
            self.traj.messages = opening_messages(system_prompt(self.workspace, self.cfg), self.task_source, self.cfg)
            if self.policy.tokenizer is not None:
                self.renderer = ChatRenderer(self.policy.tokenizer, self.tools)
                self.traj.ledger.extend(self.renderer.render(self.traj.messages, True), generated=False)
            await self.loop()
        except StopEpisode as stop:
            self.stop(stop.reason, stop.detail)
        except TemplateDrift as exc:
            self.stop("template_drift", str(exc))
        except PolicyError as exc:
            self.stop("policy_error", str(exc))
        except Exception as exc:  # a bug or a broken component still yields a recorded episode
            self.stop("fatal_error", f"{type(exc).__name__}: {exc}")
        try:
            self.close_tokens()
            await self.record_outcome()
        finally:
            if not self.cfg.keep_workspace:
                self.workspace.cleanup()
        self.traj.timings.update(self.seconds, episode_s=time.monotonic() - start)
        return self.traj

    def stop(self, reason: str, detail: str = "") -> None:
        if not self.traj.stop_reason:
            self.traj.stop_reason, self.traj.stop_detail = reason, detail

    async def loop(self) -> None:
        invalid_in_a_row = 0
        for index in range(self.cfg.max_turns):
            turn = await self.generate(index)
            finished, usable = await self.act(turn)
            invalid_in_a_row = 0 if usable else invalid_in_a_row + 1
            if finished:
                raise StopEpisode("finish")
            if self.cfg.mode == "single_turn":
                raise StopEpisode("single_turn")
            if invalid_in_a_row >= self.cfg.max_consecutive_invalid:
                raise StopEpisode("invalid_calls", f"{invalid_in_a_row} replies in a row without a usable tool call")
            if index + 1 == self.cfg.max_turns:
                raise StopEpisode("max_turns", f"{self.cfg.max_turns} turns")
            self.observe(turn)
        raise StopEpisode("max_turns", f"{self.cfg.max_turns} turns")

    async def generate(self, index: int) -> TurnRecord:
        room = self.cfg.max_context_tokens - self.context_used()
        if room <= 0:
            raise StopEpisode("context_limit", f"{self.context_used()} of {self.cfg.max_context_tokens} tokens used")
        prompt_ids = list(self.traj.ledger.token_ids) if self.renderer else None
        started = time.monotonic()
        gen = await asyncio.to_thread(self.policy.generate, self.traj.messages, prompt_ids,
                                      min(self.cfg.max_new_tokens_per_turn, room))
        turn = TurnRecord(index, gen.text, gen.finish_reason, generate_s=time.monotonic() - started)
        self.seconds["generate_s"] += turn.generate_s
        if self.renderer:
            if gen.token_ids is None:
                raise PolicyError(f"{self.policy.name} returned no token ids although it has a tokenizer")
            turn.gen_span = list(self.traj.ledger.extend(gen.token_ids, True, gen.logprobs))
            self.open_reply = (list(gen.token_ids), gen.finish_reason == "stop")
        self.record_version(turn, gen.policy_version)
        if gen.context_tokens:
            self.context_tokens = gen.context_tokens
        self.traj.messages.append({"role": "assistant", "content": gen.text})
        self.traj.turns.append(turn)
        return turn

    async def act(self, turn: TurnRecord) -> tuple[bool, bool]:
        """Run the turn's calls; returns (finished, whether any call was usable)."""
        started = time.monotonic()
        parsed = parse_tool_calls(turn.text)
        hint = " (your reply hit the per-turn token limit)" if turn.finish_reason == "length" else ""
        turn.parse_errors = [e + hint for e in parsed.errors]
        self.traj.invalid_tool_calls += len(parsed.errors)
        if not parsed.calls and not parsed.errors and self.cfg.mode == "single_turn":
            return False, self.single_file_answer(turn)
        if not parsed.calls and not parsed.errors:
            self.traj.invalid_tool_calls += 1
            turn.parse_errors.append("no tool call found" + hint)
        finished = usable = False
        for call in parsed.calls:
            evaluations = self.judge.evaluations
            result = await self.toolbox.call(call.name, call.arguments)
            self.count_stages(evaluations, result.measurement)
            turn.tool_calls.append(self.tool_record(call.name, call.arguments, result,
                                                    cached=self.judge.evaluations == evaluations))
            self.traj.invalid_tool_calls += 0 if result.ok else 1
            usable |= result.ok
            if result.finished:
                finished = True
                break
        turn.tools_s = time.monotonic() - started
        self.seconds["tools_s"] += turn.tools_s
        return finished, usable

    def tool_record(self, name: str, arguments: dict, result: Any, cached: bool) -> ToolRecord:
        """The call, its observation, the content it left (or judged) and, for sandbox tools,
        the verdict in brief (what RFT's loop filters read: filters.py)."""
        verdict = result.verdict
        key = verdict.key if verdict is not None else content_key(self.workspace.solution_files())
        brief = None
        if verdict is not None and name in SANDBOX_TOOLS:
            m = verdict.measurement
            brief = {"status": m.error or "ok", "stopped_after": m.stopped_after, "reward": verdict.reward,
                     "cached": cached}
        return ToolRecord(name, arguments, clip(result.text, self.cfg.max_observation_chars), result.ok,
                          content_key=key, verdict=brief)

    def record_version(self, turn: TurnRecord, version: Optional[int]) -> None:
        turn.policy_version = version
        if version is not None:
            first = self.traj.policy_version[0] if self.traj.policy_version else version
            self.traj.policy_version = [first, version]

    def single_file_answer(self, turn: TurnRecord) -> bool:
        """Single-turn fallback: a KernelBench-style reply (one python block with ModelNew)."""
        blocks = [b for b in PYTHON_BLOCK.findall(turn.text) if "class ModelNew" in b]
        if not blocks:
            turn.parse_errors.append("no tool call and no python block defining ModelNew")
            self.traj.invalid_tool_calls += 1
            return False
        (self.workspace.root / SOLUTION_FILE).write_text(blocks[-1], encoding="utf-8")
        return True

    def observe(self, turn: TurnRecord) -> None:
        """Tool results (and parse errors) become tool messages; their tokens are masked out."""
        texts = [f"error: invalid tool call: {e}. Write calls as <tool_call>{{\"name\": ..., \"arguments\": {{...}}}}"
                 f"</tool_call>." for e in turn.parse_errors]
        texts += [f"[{c.name}] {c.result}" for c in turn.tool_calls]
        new = [{"role": "tool", "content": clip(text, self.cfg.max_observation_chars)} for text in texts]
        self.traj.messages.extend(new)
        if self.renderer and self.open_reply is not None:
            ids = self.renderer.continuation(*self.open_reply, new)
            turn.obs_span = list(self.traj.ledger.extend(ids, generated=False))
            self.open_reply = None
        if self.context_used() >= self.cfg.max_context_tokens:
            raise StopEpisode("context_limit", f"{self.context_used()} of {self.cfg.max_context_tokens} tokens used")

    def context_used(self) -> int:
        if self.renderer:
            return len(self.traj.ledger)
        # Text-level policies: the backend's own count after the last reply, plus ~4 chars a token since.
        return max(self.context_tokens, sum(len(m["content"]) for m in self.traj.messages) // 4)

    def close_tokens(self) -> None:
        """Close the last reply with the template's closing (mask 0), when no continuation
        followed it (the episode ended on that reply)."""
        if not self.renderer or self.open_reply is None:
            return
        try:
            self.traj.ledger.extend(self.renderer.continuation(*self.open_reply, []), False)
            self.open_reply = None
        except TemplateDrift as exc:
            # Drift outranks how the episode ended (finish, a limit): the ids are unusable for
            # training, and consumers filter on stop_reason.
            ended = f" (the episode had ended: {self.traj.stop_reason})" if self.traj.stop_reason else ""
            self.traj.stop_reason, self.traj.stop_detail = "template_drift", f"{exc}{ended}"

    async def record_outcome(self) -> None:
        evaluations = self.judge.evaluations
        try:
            final = await self.judge.judge(self.workspace)
        except Exception as exc:
            self.stop("fatal_error", f"final evaluation failed: {type(exc).__name__}: {exc}")
            return
        self.count_stages(evaluations, final.measurement)
        best = best_verdict(self.judge.verdicts.values())
        t = self.traj
        t.final_measurement, t.final_reward = final.measurement.to_dict(), final.reward
        if best is not None:
            t.best_measurement, t.best_reward = best.measurement.to_dict(), best.reward
            t.best_solution = snapshot_files(best.snapshot)
        use_best = self.cfg.outcome == "best" and best is not None
        t.reward, t.reward_source = (best.reward, "best") if use_best else (final.reward, "final")
        t.timings.update(sandbox_evaluations=float(self.judge.evaluations), sandbox_s=self.judge.seconds,
                         **self.stage_seconds)

    def count_stages(self, evaluations_before: int, measurement: Optional[Measurement]) -> None:
        """Add the stage seconds of an evaluation that just ran; a cached verdict adds nothing."""
        if measurement is None or self.judge.evaluations == evaluations_before:
            return
        for stage, seconds in measurement.stage_seconds.items():
            key = f"sandbox_{stage}_s"
            self.stage_seconds[key] = self.stage_seconds.get(key, 0.0) + seconds


def best_verdict(verdicts: Iterable[Verdict]) -> Optional[Verdict]:
    """The correct verdict with the highest reward, then the lowest runtime (None: none correct)."""
    correct = [v for v in verdicts if passed(v.measurement)]
    if not correct:
        return None
    return max(correct, key=lambda v: (v.reward, -(v.measurement.runtime_us or float("inf"))))


def snapshot_files(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8", errors="replace")
            for p in sorted(root.rglob("*")) if p.is_file() and "build" not in p.relative_to(root).parts}


async def run_episode(task: str | Path, policy: Any, pool: PoolClient, cfg: AgentConfig, backend: str,
                      *, reward: str, episode_id: str = "") -> Trajectory:
    """One episode; ``reward`` names the reward function (the caller's ``reward`` config group)."""
    reward_fn(reward)  # an unknown name is a clear error now, not a failed verdict later
    return await Episode(Path(task), policy, pool, cfg, backend, reward, episode_id).run()


async def run_episodes(tasks: Iterable[str | Path], policy: Any, pool: PoolClient, cfg: AgentConfig,
                       backend: str, *, reward: str, writer: Optional[TrajectoryWriter] = None,
                       concurrency: int = 4, episode_ids: Optional[list[str]] = None) -> list[Trajectory]:
    """Episodes in parallel (generation of one overlaps the sandbox work of others); each row is
    appended to ``writer`` as soon as its episode ends. ``episode_ids`` (one per task) default to
    the task's position and name. A chat template the token bookkeeping cannot use is one
    TemplateDrift here, before any episode starts."""
    if policy.tokenizer is not None:
        ChatRenderer(policy.tokenizer, tool_schemas(list(cfg.tools)))
    reward_fn(reward)
    tasks = list(tasks)
    ids = episode_ids or [f"{i:05d}-{Path(t).stem}" for i, t in enumerate(tasks)]
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(i: int, task: str | Path) -> Trajectory:
        async with gate:
            traj = await run_episode(task, policy, pool, cfg, backend, reward=reward, episode_id=ids[i])
        if writer is not None:
            writer.append(traj)
        return traj

    return list(await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks))))
