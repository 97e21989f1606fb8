"""The trajectory record: one append-only JSONL row per episode, and the token bookkeeping that
keeps its ids identical to what the policy's chat template renders for the message history.

Token layout of one row (T = len(token_ids)):
    token_ids  [T] int    prompt, then per turn: generated tokens, then the tool output rendered
                          by the chat template (role headers included), then the template's tail
    loss_mask  [T] 0/1    1 exactly on tokens the policy generated
    logprobs   [T] float  the rollout policy's log-prob of each generated token; 0.0 where mask 0
                          (and everywhere when ``has_logprobs`` is false: scripted or API policies)
    turns[i].gen_span = [start, end) of turn i's generated tokens; obs_span the tool output after it

Why a prefix check instead of re-tokenising: training must see the tokens that were sampled (their
log-probs belong to them). After each turn the template renders the whole history; the ids so far
must be a prefix of it, and only the new tail (tool output) is appended. If the template would
render the generated text differently (non-canonical tokenisation, stripped reasoning), the
episode stops with ``template_drift`` instead of letting mismatched ids reach training.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional


class TemplateDrift(RuntimeError):
    """The chat template renders the history differently from the tokens already recorded."""


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
    """Renders message histories with one tokenizer and tool list, appending only new tails."""

    def __init__(self, tokenizer: Any, tools: Optional[list[dict]]):
        self.tokenizer, self.tools = tokenizer, tools

    def render(self, messages: list[dict], add_generation_prompt: bool) -> list[int]:
        return render_ids(self.tokenizer, messages, self.tools, add_generation_prompt)

    def tail(self, ledger: TokenLedger, messages: list[dict], add_generation_prompt: bool) -> list[int]:
        """Ids the template adds after the recorded ones; TemplateDrift if they are not a prefix."""
        full = self.render(messages, add_generation_prompt)
        n = len(ledger.token_ids)
        if full[:n] != ledger.token_ids:
            first = next((i for i, (a, b) in enumerate(zip(full, ledger.token_ids)) if a != b), min(n, len(full)))
            raise TemplateDrift(f"chat template renders the history differently from the recorded tokens "
                                f"(first difference at token {first} of {n})")
        return full[n:]


@dataclass
class ToolRecord:
    name: str
    arguments: dict[str, Any]
    result: str
    ok: bool


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
    """Appends one JSON line per episode and flushes it, so a crash loses no finished episode."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, trajectory: Trajectory) -> None:
        line = json.dumps(trajectory.to_row(), ensure_ascii=False)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


def read_trajectories(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


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
