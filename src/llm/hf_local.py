"""A local Hugging Face causal LM behind the same ``chat`` call as the OpenAI client.

``transformers`` is imported only when this backend is built, so the rest of the project works
without it. Prompts use the tokenizer's chat template when it has one, else a plain
"role: content" transcript.
"""
from __future__ import annotations

from typing import Any, Optional

from .base import ChatResponse, LLMError, Message, check_messages

# OpenAI-style sampling names mapped to generate() names; others are refused with a clear error.
SAMPLING_KEYS = {"max_tokens": "max_new_tokens", "max_new_tokens": "max_new_tokens",
                 "temperature": "temperature", "top_p": "top_p", "top_k": "top_k"}


class HFChatModel:
    """Generate with a local model: from a name/path, or from an already built model + tokenizer."""

    def __init__(self, model_name_or_path: str = "", model: Any = None, tokenizer: Any = None,
                 device: str = "cpu", dtype: str = "auto", max_new_tokens: int = 512,
                 default_params: Optional[dict[str, Any]] = None):
        if model is None or tokenizer is None:
            model, tokenizer = load_pretrained(model_name_or_path, dtype)
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = device
        self.name = model_name_or_path or type(model).__name__
        self.default_params = {"max_new_tokens": max_new_tokens, **(default_params or {})}

    def chat(self, messages: list[Message], **sampling: Any) -> ChatResponse:
        import torch

        params = self._generate_params({**self.default_params, **sampling})
        seed, stop = params.pop("seed", None), params.pop("stop", None)
        prompt_ids = self._encode(check_messages(messages))
        if seed is not None:
            torch.manual_seed(int(seed))
        with torch.no_grad():
            output = self.model.generate(prompt_ids, attention_mask=torch.ones_like(prompt_ids),
                                         pad_token_id=self._pad_id(), **params)
        new_ids = output[0, prompt_ids.shape[1]:]
        text = self.tokenizer.decode(new_ids, skip_special_tokens=True)
        text, stopped = cut_at_stop(text, stop)
        finish = "stop" if stopped or len(new_ids) < params["max_new_tokens"] else "length"
        usage = {"prompt_tokens": int(prompt_ids.shape[1]), "completion_tokens": int(len(new_ids))}
        raw = {"backend": "hf", "model": self.name, "params": params, "usage": usage, "finish_reason": finish}
        return ChatResponse(text=text, raw=raw, model=self.name, usage=usage, finish_reason=finish)

    def _generate_params(self, given: dict[str, Any]) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for key, value in given.items():
            if key in ("seed", "stop"):
                params[key] = value
            elif key in SAMPLING_KEYS:
                params[SAMPLING_KEYS[key]] = value
            else:
                raise LLMError(f"the local HF backend does not support sampling option {key!r} "
                               f"(supported: {sorted(SAMPLING_KEYS) + ['seed', 'stop']})")
        temperature = params.get("temperature", 0.0)
        params["do_sample"] = bool(temperature and temperature > 0)
        if not params["do_sample"]:  # greedy: generate() warns when sampling knobs come along
            for key in ("temperature", "top_p", "top_k"):
                params.pop(key, None)
        return params

    def _encode(self, messages: list[Message]):
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                          return_dict=False)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        else:
            transcript = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
            ids = tok(transcript, return_tensors="pt")["input_ids"]
        return ids.to(self.device)

    def _pad_id(self) -> Optional[int]:
        tok = self.tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id


def load_pretrained(name_or_path: str, dtype: str):
    if not name_or_path:
        raise LLMError("the hf backend needs model_name_or_path (a hub name or a local directory)")
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise LLMError(f"the hf backend needs the transformers package ({exc}); pip install transformers") from None
    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch_dtype)
    except (OSError, ValueError) as exc:
        raise LLMError(f"cannot load HF model {name_or_path!r}: {exc}") from None
    return model, tokenizer


def cut_at_stop(text: str, stop: Any) -> tuple[str, bool]:
    """Truncate at the first stop string (OpenAI's ``stop`` semantics: the stop is not included)."""
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    cuts = [text.find(s) for s in stops if s and s in text]
    return (text[:min(cuts)], True) if cuts else (text, False)
