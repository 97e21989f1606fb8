"""Policies behind one interface: given the message history (and, for token-level policies, the
exact prompt token ids), produce the next assistant reply.

- ``HFPolicy``: a Hugging Face causal LM (hub id or local path, optional peft LoRA adapter),
  generating from the recorded token ids with the KV cache; reports per-token log-probs.
- ``APIPolicy``: any OpenAI-compatible endpoint through ``src.llm`` (frontier models in the same
  loop); text only, so its trajectories carry no token ids.
- ``ScriptedPolicy``: replays given replies (tests, demonstrations); with a tokenizer it is
  token-level like the HF policy, so trajectories and templates can be tested without a model.
"""
from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, Sequence

from src.llm import LLMError, build_chat_model

from .toolcall import as_tool_call, format_tool_call


class PolicyError(RuntimeError):
    """The policy cannot produce a reply (script exhausted, endpoint down, ...): ends the episode."""


@dataclass
class Generation:
    """One reply. ``token_ids`` (token-level policies) include the end-of-turn token when the
    policy stopped on it; ``text`` is the reply without it."""

    text: str
    token_ids: Optional[list[int]] = None
    logprobs: Optional[list[float]] = None
    # "stop" (ended its turn) or "length" (ran into max_new_tokens).
    finish_reason: str = "stop"
    # Tokens of prompt + reply as the backend counted them (text-level policies), for context limits.
    context_tokens: Optional[int] = None


class Policy(Protocol):
    name: str
    # The tokenizer whose chat template renders the history; None for text-level policies.
    tokenizer: Any
    # Whether ``logprobs`` are the sampling policy's own (usable as rollout log-probs in PPO).
    reports_logprobs: bool

    def generate(self, messages: list[dict], prompt_ids: Optional[list[int]],
                 max_new_tokens: int) -> Generation: ...


def end_of_turn_ids(tokenizer: Any, model: Any = None) -> list[int]:
    """Ids that end an assistant turn: the generation config's eos ids and the tokenizer's eos."""
    ids: list[int] = []
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (config_eos, getattr(tokenizer, "eos_token_id", None)):
        for i in (value if isinstance(value, (list, tuple)) else [value]):
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    if not ids:
        raise PolicyError("the tokenizer has no eos_token_id: cannot tell where a turn ends")
    return ids


def split_reply(tokenizer: Any, ids: list[int], stop_ids: Sequence[int]) -> tuple[list[int], str, str]:
    """Cut after the first end-of-turn id; return (ids kept, text without the stop, finish reason)."""
    for pos, token in enumerate(ids):
        if token in stop_ids:
            kept = ids[:pos + 1]
            return kept, tokenizer.decode(kept[:-1], skip_special_tokens=False), "stop"
    return ids, tokenizer.decode(ids, skip_special_tokens=False), "length"


class ScriptedPolicy:
    """Replays ``replies`` in order; an exhausted script is a PolicyError."""

    reports_logprobs = False

    def __init__(self, replies: Sequence[str], tokenizer: Any = None, name: str = "scripted"):
        self.replies, self.tokenizer, self.name = list(replies), tokenizer, name
        self.calls = 0
        self._stop = end_of_turn_ids(tokenizer) if tokenizer is not None else []

    def generate(self, messages: list[dict], prompt_ids: Optional[list[int]], max_new_tokens: int) -> Generation:
        if self.calls >= len(self.replies):
            raise PolicyError(f"scripted policy has no reply left (it had {len(self.replies)})")
        text = self.replies[self.calls]
        self.calls += 1
        if self.tokenizer is None:
            return Generation(text)
        ids = list(self.tokenizer.encode(text, add_special_tokens=False)) + [self._stop[0]]
        ids, text, finish = split_reply(self.tokenizer, ids[:max_new_tokens], self._stop)
        return Generation(text, ids, [0.0] * len(ids), finish)


@dataclass
class _Pending:
    """One episode's generate call waiting for a batch."""

    prompt_ids: list[int]
    max_new_tokens: int
    done: threading.Event = field(default_factory=threading.Event)
    result: Optional[Generation] = None
    error: Optional[BaseException] = None


class HFPolicy:
    """A local causal LM; generation continues exactly from ``prompt_ids`` (no re-tokenising).

    With ``max_batch`` > 1, concurrent episodes' calls are gathered (for up to ``batch_wait_ms``
    after the first) and generated as one left-padded batch with a KV cache: one forward per
    token for the whole batch instead of one per episode."""

    reports_logprobs = True

    def __init__(self, model_name_or_path: str = "", model: Any = None, tokenizer: Any = None,
                 device: str = "cpu", dtype: str = "auto", lora_path: str = "", temperature: float = 1.0,
                 top_p: float = 1.0, seed: Optional[int] = None, max_batch: int = 1, batch_wait_ms: float = 5.0):
        if model is None or tokenizer is None:
            from src.llm.hf_local import load_pretrained

            model, tokenizer = load_pretrained(model_name_or_path, dtype)
        if lora_path:
            model = load_lora(model, lora_path)
        self.model = model.to(device).eval()
        self.tokenizer, self.device = tokenizer, device
        self.name = model_name_or_path or type(model).__name__
        self.temperature, self.top_p = temperature, top_p
        self.stop_ids = end_of_turn_ids(tokenizer, model)
        self._lock = threading.Lock()  # one generate at a time on a shared model
        self.max_batch, self.batch_wait_s = max(1, int(max_batch)), batch_wait_ms / 1e3
        self._pending: "queue.Queue[_Pending]" = queue.Queue()
        self._batcher: Optional[threading.Thread] = None
        # Sizes of the batches generated so far (how much batching the episodes' timing allowed).
        self.batch_sizes: list[int] = []
        if seed is not None:
            import torch

            torch.manual_seed(seed)

    def generate(self, messages: list[dict], prompt_ids: Optional[list[int]], max_new_tokens: int) -> Generation:
        if not prompt_ids:
            raise PolicyError("HFPolicy needs the prompt token ids")
        if self.max_batch == 1:
            with self._lock:
                return self.generate_batch([(list(prompt_ids), max_new_tokens)])[0]
        request = _Pending(list(prompt_ids), max_new_tokens)
        with self._lock:
            if self._batcher is None:
                self._batcher = threading.Thread(target=self._serve_batches, name="hf-batcher", daemon=True)
                self._batcher.start()
        self._pending.put(request)
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.result

    def _serve_batches(self) -> None:
        """Gather calls into batches of up to ``max_batch`` and generate them, forever."""
        while True:
            batch = [self._pending.get()]
            deadline = time.monotonic() + self.batch_wait_s
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._pending.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            try:
                for request, result in zip(batch, self.generate_batch([(r.prompt_ids, r.max_new_tokens)
                                                                       for r in batch])):
                    request.result = result
            except BaseException as exc:  # every waiting episode hears about it
                for request in batch:
                    request.error = exc
            finally:
                for request in batch:
                    request.done.set()

    def generate_batch(self, prompts: list[tuple[list[int], int]]) -> list[Generation]:
        """One generate over left-padded prompts; each reply is cut at its own stop or length."""
        import torch

        width, pad = max(len(ids) for ids, _ in prompts), self._pad_id()
        inputs = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, (ids, _) in enumerate(prompts):
            inputs[row, width - len(ids):] = torch.tensor(ids)
            mask[row, width - len(ids):] = 1
        sample = self.temperature > 0
        params = dict(do_sample=sample, max_new_tokens=max(n for _, n in prompts), eos_token_id=self.stop_ids,
                      pad_token_id=pad, return_dict_in_generate=True, output_logits=True, use_cache=True)
        if sample:
            params.update(temperature=self.temperature, top_p=self.top_p, top_k=0)
        with torch.no_grad():
            out = self.model.generate(inputs.to(self.device), attention_mask=mask.to(self.device), **params)
        self.batch_sizes.append(len(prompts))
        replies = []
        for row, (_, max_new) in enumerate(prompts):
            new_ids = out.sequences[row, width:].tolist()[:max_new]
            ids, text, finish = split_reply(self.tokenizer, new_ids, self.stop_ids)
            replies.append(Generation(text, ids, self._logprobs(out.logits, ids, row), finish))
        return replies

    def _logprobs(self, logits: Sequence[Any], ids: list[int], row: int = 0) -> list[float]:
        """log p(token) under the sampling distribution before top-p: softmax(logits / T)."""
        import torch

        steps = torch.stack([step[row] for step in logits[:len(ids)]]).float()
        scale = self.temperature if self.temperature > 0 else 1.0
        logp = torch.log_softmax(steps / scale, dim=-1)
        return logp.gather(1, torch.tensor(ids, device=logp.device)[:, None])[:, 0].tolist()

    def _pad_id(self) -> int:
        tok = self.tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else self.stop_ids[0]


def load_lora(model: Any, lora_path: str) -> Any:
    try:
        from peft import PeftModel
    except ImportError as exc:
        raise PolicyError(f"LoRA adapters need the peft package ({exc}); pip install peft") from None
    return PeftModel.from_pretrained(model, lora_path)


class APIPolicy:
    """An OpenAI-compatible chat endpoint. Tool results go back as user messages and calls are
    read from the reply text (the system prompt describes the format), so any chat endpoint works;
    calls the server returns natively (``tool_calls``) are rendered into the same text form."""

    tokenizer = None
    reports_logprobs = False

    def __init__(self, llm: Any = None, name: str = "", sampling: Optional[dict[str, Any]] = None, **llm_cfg: Any):
        self.llm = llm if llm is not None else build_chat_model({"backend": "openai", **llm_cfg})
        self.name = name or getattr(self.llm, "model", "api")
        self.sampling = dict(sampling or {})

    def generate(self, messages: list[dict], prompt_ids: Optional[list[int]], max_new_tokens: int) -> Generation:
        try:
            reply = self.llm.chat(api_messages(messages), max_tokens=max_new_tokens, **self.sampling)
        except LLMError as exc:
            raise PolicyError(str(exc)) from None
        text = reply.text + native_calls_as_text(reply.raw)
        finish = "length" if reply.finish_reason == "length" else "stop"
        usage = reply.usage or {}
        used = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
        return Generation(text, finish_reason=finish, context_tokens=used or None)


def api_messages(messages: list[dict]) -> list[dict]:
    """Tool results as user messages: a bare 'tool' role needs a tool_call_id the text protocol lacks."""
    out = []
    for msg in messages:
        if msg["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{msg['content']}\n</tool_response>"})
        else:
            out.append({"role": msg["role"], "content": msg["content"]})
    return out


def native_calls_as_text(raw: dict[str, Any]) -> str:
    try:
        calls = raw["choices"][0]["message"].get("tool_calls") or []
    except (KeyError, IndexError, TypeError, AttributeError):
        return ""
    rendered = []
    for call in calls:
        parsed = as_tool_call(call)
        rendered.append(format_tool_call(parsed) if not isinstance(parsed, str) else
                        f"<tool_call>{json.dumps(call)}</tool_call>")
    return ("\n" + "\n".join(rendered)) if rendered else ""


def build_policy(cfg: dict[str, Any]) -> Any:
    """From a config mapping: ``kind`` is hf or api (scripted policies are built in code)."""
    cfg = dict(cfg)
    kind = cfg.pop("kind", None)
    cfg.pop("name", None)
    if kind == "hf":
        return HFPolicy(**cfg)
    if kind == "api":
        return APIPolicy(**cfg)
    raise ValueError(f"policy kind must be 'hf' or 'api', got {kind!r}")
