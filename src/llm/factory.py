"""Build a chat model from a config mapping (a Hydra node or a plain dict)."""
from __future__ import annotations

from typing import Any, Mapping

from .base import ChatModel, LLMError

# Keys each backend takes; anything else in the mapping is a typo worth reporting.
OPENAI_KEYS = {"base_url", "model", "api_key", "api_key_env", "timeout_s", "max_retries", "backoff_s",
               "default_params"}
HF_KEYS = {"model_name_or_path", "device", "dtype", "max_new_tokens", "default_params"}


def build_chat_model(cfg: Mapping[str, Any]) -> ChatModel:
    """``cfg["backend"]`` is "openai" (any OpenAI-compatible endpoint) or "hf" (local model)."""
    values = {k: v for k, v in dict(cfg).items() if k != "backend"}
    backend = cfg.get("backend", "openai")
    if backend == "openai":
        from .openai_client import OpenAIChatClient

        return OpenAIChatClient(**_known(values, OPENAI_KEYS, backend))
    if backend == "hf":
        from .hf_local import HFChatModel

        return HFChatModel(**_known(values, HF_KEYS, backend))
    raise LLMError(f"unknown LLM backend {backend!r} (use 'openai' or 'hf')")


def _known(values: dict[str, Any], allowed: set[str], backend: str) -> dict[str, Any]:
    unknown = set(values) - allowed
    if unknown:
        raise LLMError(f"unknown keys for the {backend} LLM backend: {sorted(unknown)} (allowed: {sorted(allowed)})")
    if isinstance(values.get("default_params"), Mapping):
        values["default_params"] = dict(values["default_params"])
    return values
