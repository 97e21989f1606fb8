"""The trajectory record: one append-only JSONL row per episode, and the token bookkeeping that
keeps its ids exactly the ones the policy sampled (token-in / token-out).

Token layout of one row (T = len(token_ids)):
    token_ids  [T] int    the prompt (system + task, rendered with the generation prompt), then per
                          turn: the sampled ids as they are, then the continuation rendered by the
                          chat template (the turn's closing, the tool messages, the next generation
                          prompt); after the last reply only its closing
    loss_mask  [T] 0/1    1 exactly on the sampled ids (a stop id the policy sampled included)
    logprobs   [T] float  the rollout policy's log-prob of each sampled id (sampling.py: under the
                          distribution it was drawn from); 0.0 where mask 0 (and everywhere when
                          ``has_logprobs`` is false: scripted or API policies)
    turns[i].gen_span = [start, end) of turn i's sampled ids; obs_span the continuation after them

Why no re-rendering of the history: a re-render gives back the sampled ids only when the sampled
text tokenises canonically and the template renders past replies verbatim; a model may sample a
non-canonical split, and templates such as Qwen3's drop earlier turns' reasoning. Instead every
continuation is the template's rendering of the new messages alone, taken as a difference of two
renderings of a fixed stub history (ChatRenderer.continuation); the tokens after a reply never
depend on what the reply said. ``template_drift`` is left for templates that defeat the stub (the
difference cannot be isolated): the check runs at episode start, before any tokens are spent.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional


class TemplateDrift(ValueError):
    """The chat template cannot render a continuation on its own (see ChatRenderer)."""


def render_ids(tokenizer: Any, messages: list[dict], tools: Optional[list[dict]],
               add_generation_prompt: bool) -> list[int]:
    """Token ids of ``messages`` under the tokenizer's chat template (HF or compatible)."""
    out = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                        tokenize=True, return_dict=False)
    if hasattr(out, "keys"):  # some transformers versions return a BatchEncoding regardless
        out = out["input_ids"]
    if hasattr(out, "tolist"):
        out = out.tolist()
    if out and isinstance(out[0], list):
        out = out[0]
    return [int(i) for i in out]


@dataclass
class TokenLedger:
    """token_ids / loss_mask / logprobs, grown only by appending."""

    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    def extend(self, ids: list[int], generated: bool, logprobs: Optional[list[float]] = None) -> tuple[int, int]:
        start = len(self.token_ids)
        self.token_ids.extend(int(i) for i in ids)
        self.loss_mask.extend([1 if generated else 0] * len(ids))
        lp = list(logprobs) if (generated and logprobs is not None) else [0.0] * len(ids)
        if len(lp) != len(ids):
            raise ValueError(f"{len(lp)} log-probs for {len(ids)} generated tokens")
        self.logprobs.extend(float(x) for x in lp)
        return start, len(self.token_ids)

    def __len__(self) -> int:
        return len(self.token_ids)


class ChatRenderer:
    """Renders the prompt, and the continuation after each reply, with one tokenizer and tool list.

    The continuation after a reply, followed by messages ``following``, is what the template puts
    after the reply's content: its closing (e.g. ``<|im_end|>`` and a newline), then ``following``
    and the generation prompt. It is found by rendering a stub history (system, user, an
    assistant reply of one marker character) + ``following`` twice, with two different markers:
    the ids both renderings share at the end are the continuation. Checked on the way: the ids
    between the shared head and the shared tail are exactly each marker's own ids (the template
    keeps the reply's tokens apart from what follows); else TemplateDrift. The constructor runs
    the check once, so a template that cannot work fails at episode start."""

    STUB = ({"role": "system", "content": "s"}, {"role": "user", "content": "u"})
    MARKERS = ("x", "y")

    def __init__(self, tokenizer: Any, tools: Optional[list[dict]]):
        self.tokenizer, self.tools = tokenizer, tools
        self.marker_ids = [list(tokenizer.encode(m, add_special_tokens=False)) for m in self.MARKERS]
        self.closing = self.after_reply([])
        self.after_reply([{"role": "tool", "content": "t"}])  # the shape every turn will use
        if not self.closing:
            raise TemplateDrift("the chat template puts nothing after an assistant reply: turns cannot be told apart")

    def render(self, messages: list[dict], add_generation_prompt: bool) -> list[int]:
        return render_ids(self.tokenizer, messages, self.tools, add_generation_prompt)

    def after_reply(self, following: list[dict]) -> list[int]:
        """Ids after an assistant reply's content when ``following`` comes next (with the
        generation prompt when it is not empty)."""
        a, b = (self.render([*self.STUB, {"role": "assistant", "content": m}, *following], bool(following))
                for m in self.MARKERS)
        head = next((i for i, (p, q) in enumerate(zip(a, b)) if p != q), min(len(a), len(b)))
        tail = next((i for i, (p, q) in enumerate(zip(reversed(a), reversed(b))) if p != q), 0)
        tail = min(tail, len(a) - head, len(b) - head)
        if a[head:len(a) - tail] != self.marker_ids[0] or b[head:len(b) - tail] != self.marker_ids[1]:
            raise TemplateDrift("the chat template does not keep an assistant reply's tokens apart from what "
                                "follows it (a one-character reply is not rendered as its own ids): continuations "
                                "cannot be rendered on their own")
        return a[len(a) - tail:]

    def continuation(self, reply_ids: list[int], stopped: bool, following: list[dict]) -> list[int]:
        """What to append after a reply: ``after_reply(following)``, without its first id when
        the reply already ended with it (the end-of-turn id the policy sampled)."""
        ids = self.after_reply(following) if following else list(self.closing)
        if stopped and reply_ids and ids and reply_ids[-1] == ids[0]:
            return ids[1:]
        return ids


@dataclass
class ToolRecord:
    """One tool call. ``content_key``: the hash of the workspace's solution files after the call
    (for compile/verify/profile: the content judged). ``verdict`` (sandbox tools only): the
    judge's answer in brief: {"status": error kind or "ok", "stopped_after": the deepest stage
    judged, "reward": under the episode's reward, "cached": answered from an earlier verdict}."""

    name: str
    arguments: dict[str, Any]
    result: str
    ok: bool
    content_key: str = ""
    verdict: Optional[dict[str, Any]] = None


@dataclass
class TurnRecord:
    """One policy turn: what it wrote, where its tokens are, what the tools answered."""

    index: int
    text: str
    finish_reason: str
    gen_span: list[int] = field(default_factory=lambda: [0, 0])
    obs_span: list[int] = field(default_factory=lambda: [0, 0])
    tool_calls: list[ToolRecord] = field(default_factory=list)
    parse_errors: list[str] = field(default_factory=list)
    generate_s: float = 0.0
    tools_s: float = 0.0
    # The policy's weights version that generated this reply (None: the policy has none).
    policy_version: Optional[int] = None


@dataclass
class Trajectory:
    """Everything one episode produced; ``to_row`` is the JSONL row."""

    episode_id: str
    task: str
    policy: str
    mode: str
    messages: list[dict] = field(default_factory=list)
    ledger: TokenLedger = field(default_factory=TokenLedger)
    has_logprobs: bool = False
    # The sampling distribution of the log-probs ({temperature, top_p, top_k}; None: not known).
    sampling: Optional[dict[str, float]] = None
    # [first, last] weights version over the turns (per turn: turns[i].policy_version); None: none.
    policy_version: Optional[list[int]] = None
    turns: list[TurnRecord] = field(default_factory=list)
    stop_reason: str = ""
    stop_detail: str = ""
    invalid_tool_calls: int = 0
    # Outcome: the final workspace's verdict, the best correct one, and the reward used.
    final_measurement: Optional[dict] = None
    final_reward: Optional[float] = None
    best_measurement: Optional[dict] = None
    best_reward: Optional[float] = None
    reward: Optional[float] = None
    reward_source: str = "final"
    # The reward function the verdicts were scored with (conf/reward: graduated, binary, ...).
    reward_name: str = ""
    best_solution: Optional[dict[str, str]] = None
    timings: dict[str, float] = field(default_factory=dict)

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        ledger = row.pop("ledger")
        row.update(ledger)
        row["num_turns"] = len(self.turns)
        row["num_tokens"] = len(self.ledger)
        return row


class TrajectoryWriter:
    """Appends one JSON line per episode and flushes it, so a crash loses no finished episode.
    ``extra`` fields are added to every row (training adds its step)."""

    def __init__(self, path: str | Path, extra: Optional[dict[str, Any]] = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.extra = dict(extra or {})

    def append(self, trajectory: Trajectory) -> None:
        line = json.dumps({**trajectory.to_row(), **self.extra}, ensure_ascii=False)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


def read_trajectories(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def trajectory_lines(path: str | Path) -> list[tuple[str, Optional[dict[str, Any]]]]:
    """Each non-blank line of a TrajectoryWriter file, as written, with its row: None for a line
    cut off mid-write (no newline: a run stopped while appending) or one that is not JSON."""
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    out = []
    for line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line) if line.endswith("\n") else None
        except json.JSONDecodeError:
            row = None
        out.append((line, row if isinstance(row, dict) else None))
    return out


def resume_trajectories(path: str | Path, episode_ids: list[str], shared: bool = False,
                        tidy: bool = True) -> dict[str, dict[str, Any]]:
    """The episodes of ``episode_ids`` that ``path`` (a TrajectoryWriter file of a batch that was
    cut off) already holds, by id, so that a rerun samples only the rest. The file is left holding
    exactly those rows, whole lines only, for the rerun's appends: a line cut off mid-write, a
    repeated id and a row of another batch are dropped from it, and then the file as it was is
    kept beside as ``<name>.orig`` (``.orig2``... after later reruns; nothing is lost, and nothing foreign is trained on).
    ``shared``: the file is one that every batch of a run appends to (a PPO stage's ``train.jsonl``,
    ``val.jsonl``): the other batches' rows stay in it, only cut-off lines and repeats of a wanted id
    go. ``tidy=False`` reads without rewriting (a rank whose shared file rank 0 tidies)."""
    path = Path(path)
    if not path.exists():
        return {}
    wanted, found, kept = set(episode_ids), {}, []
    lines = trajectory_lines(path)
    for line, row in lines:
        eid = row.get("episode_id") if row is not None else None
        if eid in wanted and eid not in found:
            found[eid] = row
            kept.append(line)
        elif shared and eid is not None and eid not in wanted:
            kept.append(line)  # another batch's row, in the file they share
    if tidy and len(kept) < len(lines):
        n = 1 + sum(1 for _ in path.parent.glob(path.name + ".orig*"))  # an earlier rerun's stays
        os.replace(path, path.with_name(path.name + (".orig" if n == 1 else f".orig{n}")))
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(kept)
    return found


def render_transcript(row: dict[str, Any], observation_chars: int = 1500) -> str:
    """A readable Markdown transcript of one trajectory row."""
    lines = [f"# Episode {row['episode_id']}: {row['task']}",
             f"policy {row['policy']} · mode {row['mode']} · {row['num_turns']} turns · "
             f"{row['num_tokens']} tokens · stop: {row['stop_reason']} {row.get('stop_detail') or ''}".rstrip(),
             f"reward {row['reward']} ({row['reward_source']}); final {row['final_reward']}, best {row['best_reward']}; "
             f"invalid tool calls {row['invalid_tool_calls']}", ""]
    for turn in row["turns"]:
        lines += [f"## Turn {turn['index']} ({turn['finish_reason']}, {turn['generate_s']:.1f} s + tools "
                  f"{turn['tools_s']:.1f} s)", "", turn["text"].strip(), ""]
        for call in turn["tool_calls"]:
            result = call["result"]
            if len(result) > observation_chars:
                result = result[:observation_chars] + " [...]"
            lines += [f"**{call['name']}** {json.dumps(call['arguments'])[:200]} ->", "```", result, "```", ""]
        for err in turn["parse_errors"]:
            lines.append(f"*invalid tool call:* {err}")
    return "\n".join(lines) + "\n"
