"""Tool calls out of a policy's text: the ``<tool_call>{json}</tool_call>`` form that Qwen,
Hermes and most open chat templates use, and plain JSON (the whole reply, or a fenced block).

A model in training writes broken calls; each is turned into an error message for the agent
(and counted by the episode) rather than an exception.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

TAG_OPEN, TAG_CLOSE = "<tool_call>", "</tool_call>"
TAGGED = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)
FENCED = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL)


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass
class ParsedReply:
    """The calls found in one reply, and one line per call that could not be used."""

    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def parse_tool_calls(text: str) -> ParsedReply:
    """Tagged calls when the reply has a tag; else plain JSON; else no call at all."""
    if TAG_OPEN in text:
        return _parse_tagged(text)
    parsed = ParsedReply()
    for candidate in _json_candidates(text):
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        for item in value if isinstance(value, list) else [value]:
            _add(parsed, item)
        return parsed
    return parsed


def _parse_tagged(text: str) -> ParsedReply:
    parsed = ParsedReply()
    for body, close in TAGGED.findall(text):
        if not close:
            parsed.errors.append("a <tool_call> was not closed with </tool_call>")
            continue
        try:
            value, end = json.JSONDecoder().raw_decode(body.strip())
        except ValueError as exc:
            parsed.errors.append(f"tool call is not valid JSON ({exc.msg} at position {exc.pos}): {body.strip()[:200]!r}")
            continue
        if body.strip()[end:].strip():
            parsed.errors.append(f"unexpected text after the JSON of a tool call: {body.strip()[end:][:100]!r}")
            continue
        _add(parsed, value)
    return parsed


def _json_candidates(text: str) -> list[str]:
    """The whole reply, then each fenced block: plain JSON is only taken when it is all there is."""
    stripped = text.strip()
    candidates = [stripped] if stripped.startswith(("{", "[")) else []
    return candidates + [m.strip() for m in FENCED.findall(text) if m.strip().startswith(("{", "["))]


def _add(parsed: ParsedReply, value: Any) -> None:
    call = as_tool_call(value)
    if isinstance(call, str):
        parsed.errors.append(call)
    else:
        parsed.calls.append(call)


def as_tool_call(value: Any) -> ToolCall | str:
    """A ToolCall from {"name": ..., "arguments": {...}} (or "parameters", or OpenAI's nested
    {"function": {"name", "arguments": "<json string>"}}); else a one-line reason."""
    if isinstance(value, dict) and isinstance(value.get("function"), dict):
        value = value["function"]
    if not isinstance(value, dict):
        return f"a tool call must be a JSON object with name and arguments, got {type(value).__name__}"
    name = value.get("name")
    if not isinstance(name, str) or not name:
        return "a tool call needs a string 'name'"
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # OpenAI sends arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return f"arguments of {name} are a string that is not JSON"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return f"arguments of {name} must be a JSON object"
    return ToolCall(name, arguments)


def format_tool_call(call: ToolCall) -> str:
    """The tagged form, as a policy is asked to write it (used to render native API calls)."""
    return f"{TAG_OPEN}\n{json.dumps({'name': call.name, 'arguments': call.arguments})}\n{TAG_CLOSE}"
