"""Client for any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, SGLang, TGI, ...).

Plain ``urllib``: no SDK dependency, and the request is exactly what the server sees. The API key
comes from the constructor or an environment variable; it is sent in the Authorization header and
nowhere else: not in errors, logs, ``repr`` or returned responses.
"""
from __future__ import annotations

import json
import os
import random
import socket
import time
import urllib.error
import urllib.request
from typing import Any, Optional

from .base import ChatResponse, LLMError, Message, check_messages

# Statuses worth another try: the server is busy or briefly broken; anything else 4xx is our fault.
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
# Longest wait between two tries, whatever Retry-After or the backoff says.
MAX_BACKOFF_S = 60.0
# Characters of a server's error body quoted in an LLMError.
ERROR_BODY_CHARS = 500


class OpenAIChatClient:
    """``chat(messages, **sampling)`` against ``{base_url}/chat/completions``."""

    def __init__(self, base_url: str, model: str, api_key: Optional[str] = None,
                 api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 120.0, max_retries: int = 3,
                 backoff_s: float = 1.0, default_params: Optional[dict[str, Any]] = None):
        if not base_url or not base_url.startswith(("http://", "https://")):
            raise LLMError(f"base_url must be an http(s) URL such as http://localhost:8000/v1, got {base_url!r}")
        if not model:
            raise LLMError("model must name the served model (the endpoint's 'model' field)")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        # Kept private and out of repr; an empty key means "send no Authorization header" (local servers).
        self._api_key = api_key or (os.environ.get(api_key_env, "") if api_key_env else "")
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.default_params = dict(default_params or {})

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"OpenAIChatClient(url={self.url!r}, model={self.model!r}, api_key={key})"

    def chat(self, messages: list[Message], **sampling: Any) -> ChatResponse:
        body = {"model": self.model, "messages": check_messages(messages), **self.default_params, **sampling}
        raw = self._post_with_retries(json.dumps(body).encode())
        return parse_completion(raw, self.url)

    def _post_with_retries(self, payload: bytes) -> dict[str, Any]:
        for attempt in range(self.max_retries + 1):
            try:
                return self._post(payload)
            except _Retryable as exc:
                last = exc
            if attempt < self.max_retries:
                time.sleep(self._backoff(attempt, last.retry_after))
        raise LLMError(f"LLM request to {self.url} failed after {self.max_retries + 1} attempts: {last}")

    def _backoff(self, attempt: int, retry_after: Optional[float]) -> float:
        """Exponential with jitter (many workers must not retry in lockstep); Retry-After wins."""
        wait = retry_after if retry_after is not None else self.backoff_s * 2 ** attempt * (0.5 + random.random())
        return min(max(wait, 0.0), MAX_BACKOFF_S)

    def _post(self, payload: bytes) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self.url, data=payload, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                text = resp.read().decode("utf-8", errors="replace")
        except urllib.error.HTTPError as exc:
            raise http_failure(exc, self.url) from None
        except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise _Retryable(f"cannot reach {self.url}: {reason} (is the server up and the base_url right?)") from None
        try:
            return json.loads(text)
        except ValueError:
            raise _Retryable(f"{self.url} answered with non-JSON: {text[:ERROR_BODY_CHARS]!r}") from None


class _Retryable(Exception):
    def __init__(self, message: str, retry_after: Optional[float] = None):
        super().__init__(message)
        self.retry_after = retry_after


def http_failure(exc: urllib.error.HTTPError, url: str) -> Exception:
    """A retryable error for busy/broken servers, an LLMError (no retry) for requests it refuses."""
    try:
        body = exc.read().decode("utf-8", errors="replace")[:ERROR_BODY_CHARS]
    except Exception:
        body = ""
    message = f"{url} answered HTTP {exc.code} {exc.reason}: {body}".strip()
    if exc.code in RETRY_STATUSES:
        retry_after = exc.headers.get("Retry-After") if exc.headers else None
        try:
            hint = float(retry_after) if retry_after is not None else None
        except ValueError:
            hint = None
        return _Retryable(message, hint)
    if exc.code in (401, 403):
        message += " (check the API key: config api_key or the api_key_env variable)"
    return LLMError(message)


def parse_completion(raw: Any, url: str) -> ChatResponse:
    """The first choice's message; a body without one is a clear error, not a KeyError."""
    try:
        choice = raw["choices"][0]
        text = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise LLMError(f"{url} returned no choices[0].message.content: {json.dumps(raw)[:ERROR_BODY_CHARS]}") from None
    if text is None:  # some servers send null content with only tool calls or a refusal
        text = ""
    return ChatResponse(text=text, raw=raw, model=str(raw.get("model", "")), usage=raw.get("usage"),
                        finish_reason=choice.get("finish_reason"))
