"""The interface every backend implements, and the one error type callers catch."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

# A chat message as OpenAI's API takes it: {"role": "system" | "user" | "assistant", "content": str}.
Message = dict[str, str]
ROLES = ("system", "user", "assistant", "tool")


class LLMError(RuntimeError):
    """An LLM call failed for good (after retries): the message says why in one line."""


@dataclass
class ChatResponse:
    """One completion: ``text`` is the assistant message; ``raw`` what the backend returned."""

    text: str
    # The endpoint's JSON body (OpenAI backend) or generation details (local backend).
    raw: dict[str, Any] = field(default_factory=dict)
    # Model name as the backend reports it.
    model: str = ""
    # Token counts when the backend reports them ({"prompt_tokens": .., "completion_tokens": ..}).
    usage: Optional[dict[str, int]] = None
    # Why generation stopped ("stop", "length", ...), when known.
    finish_reason: Optional[str] = None


class ChatModel(Protocol):
    """Anything that answers a list of chat messages with one completion."""

    def chat(self, messages: list[Message], **sampling: Any) -> ChatResponse: ...


def check_messages(messages: list[Message]) -> list[Message]:
    """Fail early, naming the bad entry, instead of sending a request the server rejects."""
    if not isinstance(messages, list) or not messages:
        raise LLMError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ROLES or not isinstance(msg.get("content"), str):
            raise LLMError(f"messages[{i}] must be a dict with role in {ROLES} and string content, got {msg!r:.200}")
    return messages
