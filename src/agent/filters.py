"""Which trajectory rows rejection fine-tuning keeps: the paper keeps trajectories with reward > 0
"without redundant loops or invalid tool calls". A pure rule over trajectory rows (the JSONL
dicts of trajectory.py, or Trajectory objects), each reason with a name and a threshold:

- ``stop_reason``: the episode ended in one of ``unusable_stop_reasons`` (its tokens or outcome
  cannot be trusted: template_drift, policy_error, fatal_error).
- ``reward``: reward <= ``min_reward`` (the paper's reward > 0; None: not applied).
- ``invalid_tool_calls``: more than ``max_invalid_tool_calls`` invalid calls (malformed calls,
  replies without one, unknown tools, bad arguments, refused file operations: the row's count).
- ``rejudged_content``: more than ``max_rejudged`` sandbox calls (compile, verify, profile) on
  content an earlier call already judged at the same or a deeper stage (compile < verify <
  profile), or judged failing (a failure is final for that content): questions whose answer the
  agent already had. Content is the solution files' hash at the call (ToolRecord.content_key),
  so an edit that changes nothing does not make the content new.
- ``repeated_failing_call``: a run of more than ``max_failing_repeats`` identical failing calls in
  a row (same tool, same arguments; failing: the tool refused it, or its sandbox verdict is not
  "ok"). Runs are counted over the tool calls in order, across turns.

``exclusion_reasons(row)`` lists a row's reasons (empty: kept); ``filter_rows(rows)`` returns the
kept rows and how many rows each reason excluded (a row may count under several).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from .tools import DEPTH, SANDBOX_TOOLS

REASONS = ("stop_reason", "reward", "invalid_tool_calls", "rejudged_content", "repeated_failing_call")


@dataclass(frozen=True)
class FilterRules:
    """Thresholds of the exclusion reasons (module docstring); the defaults are the paper's rule."""

    unusable_stop_reasons: tuple[str, ...] = ("template_drift", "policy_error", "fatal_error")
    min_reward: Optional[float] = 0.0
    max_invalid_tool_calls: int = 0
    max_rejudged: int = 0
    max_failing_repeats: int = 1


def _as_row(row: Any) -> Mapping[str, Any]:
    return row.to_row() if hasattr(row, "to_row") else row


def _calls(row: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [call for turn in row.get("turns", []) for call in turn.get("tool_calls", [])]


def failed(call: Mapping[str, Any]) -> bool:
    """The tool refused the call, or the sandbox judged its content failing."""
    verdict = call.get("verdict")
    return not call.get("ok", True) or (verdict is not None and verdict.get("status") != "ok")


def rejudged_calls(row: Any) -> int:
    """Sandbox calls on content already judged at the same or a deeper stage, or judged failing."""
    deepest: dict[str, int] = {}
    failing: set[str] = set()
    count = 0
    for call in _calls(_as_row(row)):
        key, name = call.get("content_key"), call.get("name")
        if name not in SANDBOX_TOOLS or not key:
            continue
        depth = DEPTH[SANDBOX_TOOLS[name]]
        if key in failing or deepest.get(key, -1) >= depth:
            count += 1
        deepest[key] = max(depth, deepest.get(key, -1))
        if failed(call):
            failing.add(key)
    return count


def longest_failing_repeat(row: Any) -> int:
    """The longest run of identical (tool, arguments) calls in a row that all failed."""
    longest, run, previous = 0, 0, None
    for call in _calls(_as_row(row)):
        identity = (call.get("name"), json.dumps(call.get("arguments", {}), sort_keys=True))
        if not failed(call):
            run, previous = 0, None
            continue
        run = run + 1 if identity == previous else 1
        previous, longest = identity, max(longest, run)
    return longest


def exclusion_reasons(row: Any, rules: FilterRules = FilterRules()) -> list[str]:
    """The reasons (REASONS order) this row is excluded from RFT; empty: it is kept."""
    row = _as_row(row)
    reward = row.get("reward")
    checks = {
        "stop_reason": row.get("stop_reason") in rules.unusable_stop_reasons,
        "reward": rules.min_reward is not None and (reward is None or reward <= rules.min_reward),
        "invalid_tool_calls": row.get("invalid_tool_calls", 0) > rules.max_invalid_tool_calls,
        "rejudged_content": rejudged_calls(row) > rules.max_rejudged,
        "repeated_failing_call": longest_failing_repeat(row) > rules.max_failing_repeats,
    }
    return [reason for reason in REASONS if checks[reason]]


def filter_rows(rows: Iterable[Any], rules: FilterRules = FilterRules()) -> tuple[list[Any], dict[str, Any]]:
    """(kept rows, {"rows": n, "kept": k, "excluded": {reason: rows it excluded}})."""
    kept, excluded, n = [], {reason: 0 for reason in REASONS}, 0
    for row in rows:
        n += 1
        reasons = exclusion_reasons(row, rules)
        for reason in reasons:
            excluded[reason] += 1
        if not reasons:
            kept.append(row)
    return kept, {"rows": n, "kept": len(kept), "excluded": excluded}
