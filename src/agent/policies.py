"""Policies behind one interface: given the message history (and, for token-level policies, the
exact prompt token ids), produce the next assistant reply.

- ``HFPolicy``: a Hugging Face causal LM (hub id or local path, or the module being trained;
  optional peft LoRA adapter), generating from the recorded token ids with our own sampling loop
  (sampling.py); reports the log-prob of each sampled token and the weights' version.
- ``APIPolicy``: any OpenAI-compatible endpoint through ``src.llm`` (frontier models in the same
  loop); text only, so its trajectories carry no token ids.
- ``ScriptedPolicy``: replays given replies (tests, demonstrations); with a tokenizer it is
  token-level like the HF policy, so trajectories and templates can be tested without a model.
"""
from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
import weakref
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Iterator, Optional, Protocol, Sequence

from src.llm import LLMError, build_chat_model

from .sampling import SamplingParams, generate_replies, seeded_generator
from .toolcall import as_tool_call, format_tool_call

log = logging.getLogger(__name__)


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
    # The weights' version that generated it (HFPolicy.version); None for scripted and API policies.
    policy_version: Optional[int] = None


class Policy(Protocol):
    name: str
    # The tokenizer whose chat template renders the history; None for text-level policies.
    tokenizer: Any
    # Whether ``logprobs`` are the sampling policy's own (usable as rollout log-probs in PPO).
    reports_logprobs: bool

    def generate(self, messages: list[dict], prompt_ids: Optional[list[int]],
                 max_new_tokens: int) -> Generation: ...


def end_of_turn_ids(tokenizer: Any, model: Any = None) -> list[int]:
    """Ids that end an assistant turn: the tokenizer's eos and the model config's eos ids (the
    architecture config; the generation config is never read, see sampling.py)."""
    ids: list[int] = []
    config_eos = getattr(getattr(model, "config", None), "eos_token_id", None)
    for value in (getattr(tokenizer, "eos_token_id", None), config_eos):
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


# Put on the request queue by close() (or when the policy is garbage-collected): the batcher ends.
_STOP = object()


class HFPolicy:
    """A local causal LM; generation continues exactly from ``prompt_ids`` (no re-tokenising),
    with our own sampling loop (sampling.py: the checkpoint's generation_config is never read).

    As the trainer's rollout engine it uses the ``model`` object it is given (no copy), leaves it
    on its device unless ``device`` is given, and puts it in eval mode under no_grad only for the
    length of each generate call (every submodule's train/eval mode is restored afterwards).
    ``version`` tags every Generation; ``set_version`` follows in-place updates of a shared
    module, ``load_weights`` copies new weights into a policy that holds its own model.

    With ``max_batch`` > 1, concurrent episodes' calls are gathered (for up to ``batch_wait_ms``
    after the first) by a batcher thread and generated as one left-padded batch with a KV cache.
    ``close()`` (or leaving a ``with`` block) stops that thread; it holds the policy only weakly,
    so a policy dropped without close is collected and its thread ends too. ``decoder`` picks
    the loop that runs a batch (``static_decoder``: the model's forward, or the static-cache
    decoder with CUDA graphs for Llama models)."""

    reports_logprobs = True

    def __init__(self, model_name_or_path: str = "", model: Any = None, tokenizer: Any = None,
                 device: Optional[str] = None, dtype: str = "auto", lora_path: str = "", temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = 0, seed: Optional[int] = None, max_batch: int = 1,
                 batch_wait_ms: float = 5.0, version: int = 0, name: str = "", generation_gate: Any = None,
                 decoder: str = "hf"):
        if model is None or tokenizer is None:
            from src.llm.hf_local import load_pretrained

            model, tokenizer = load_pretrained(model_name_or_path, dtype)
            device = device or "cpu"
        if lora_path:
            model = load_lora(model, lora_path)
        if device is not None:
            model.to(device)  # in place: the same module object
        self.model, self.tokenizer = model, tokenizer
        self.name = name or model_name_or_path or type(model).__name__
        # Held around each generation (a context-manager factory): training on a GPU the sandbox
        # also times on keeps timing and generation apart (src/data/rollout.py device_gate).
        self.generation_gate = generation_gate or contextlib.nullcontext
        self.params = SamplingParams(float(temperature), float(top_p), int(top_k))
        self._static = static_decoder(model, decoder, self.device)
        self.stop_ids = end_of_turn_ids(tokenizer, model)
        self.version = int(version)
        self._generator = seeded_generator(self.device, seed)
        self._generating = threading.Lock()  # one generation at a time; weights change between them
        self._lock = threading.Lock()  # guards the batcher's start and close
        self.max_batch, self.batch_wait_s = max(1, int(max_batch)), batch_wait_ms / 1e3
        self._requests: "queue.Queue[Any]" = queue.Queue()
        self._batcher: Optional[threading.Thread] = None
        self.closed = False
        # Sizes of the batches generated so far (how much batching the episodes' timing allowed).
        self.batch_sizes: list[int] = []

    @property
    def device(self) -> Any:
        return self.model.get_input_embeddings().weight.device

    @property
    def sampling(self) -> dict[str, float]:
        """What each trajectory row records as its sampling distribution."""
        return self.params.to_dict()

    @contextlib.contextmanager
    def sampling_at(self, temperature: Optional[float]) -> Iterator["HFPolicy"]:
        """Generations inside the block sample at ``temperature`` (0: greedy; None: unchanged),
        e.g. held-out episodes judged greedily by a policy that rolls out at T = 1; the policy's
        own distribution is back afterwards. Generations are serialised, so none straddles the
        switch."""
        if temperature is None:
            yield self
            return
        with self._generating:
            own, self.params = self.params, replace(self.params, temperature=float(temperature))
        try:
            yield self
        finally:
            with self._generating:
                self.params = own

    def set_version(self, version: int) -> None:
        """The shared module was updated in place: later generations carry ``version``."""
        with self._generating:
            self.version = int(version)

    def load_weights(self, state_dict: dict[str, Any], version: int) -> None:
        """Copy new weights into this policy's own model (e.g. a rollout copy on another GPU),
        between generations, and tag later generations with ``version``."""
        with self._generating:
            self.model.load_state_dict(state_dict)
            self.version = int(version)

    def close(self) -> None:
        """Stop the batcher thread (requests already queued are served first); later calls fail."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            batcher = self._batcher
            if batcher is not None:
                self._requests.put(_STOP)
        if batcher is not None and batcher is not threading.current_thread():
            batcher.join()

    def __enter__(self) -> "HFPolicy":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def generate(self, messages: list[dict], prompt_ids: Optional[list[int]], max_new_tokens: int) -> Generation:
        if not prompt_ids:
            raise PolicyError("HFPolicy needs the prompt token ids")
        if self.max_batch == 1:
            if self.closed:
                raise PolicyError("the policy is closed")
            return self.generate_batch([(list(prompt_ids), max_new_tokens)])[0]
        request = _Pending(list(prompt_ids), max_new_tokens)
        with self._lock:  # a request is queued before close's stop, or refused
            if self.closed:
                raise PolicyError("the policy is closed")
            if self._batcher is None:
                self._batcher = threading.Thread(target=_serve_batches, name="hf-batcher", daemon=True, args=(
                    self._requests, weakref.ref(self), self.max_batch, self.batch_wait_s))
                self._batcher.start()
                weakref.finalize(self, self._requests.put, _STOP)
            self._requests.put(request)
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.result

    def generate_batch(self, prompts: list[tuple[list[int], int]]) -> list[Generation]:
        """One left-padded batch; each reply is cut at its own stop or budget."""
        with self._generating, self.generation_gate():
            version = self.version
            modes = [(module, module.training) for module in self.model.modules()]
            self.model.eval()
            try:
                generate = self._static.generate if self._static is not None else partial(generate_replies, self.model)
                replies = generate([ids for ids, _ in prompts], [n for _, n in prompts],
                                   self.stop_ids, self._pad_id(), self.params, self._generator)
            finally:
                for module, training in modes:
                    module.training = training
            self.batch_sizes.append(len(prompts))
        out = []
        for reply in replies:
            stopped = reply.finish_reason == "stop"
            text = self.tokenizer.decode(reply.token_ids[:-1] if stopped else reply.token_ids,
                                         skip_special_tokens=False)
            out.append(Generation(text, reply.token_ids, reply.logprobs, reply.finish_reason, policy_version=version))
        return out

    def _pad_id(self) -> int:
        tok = self.tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else self.stop_ids[0]


DECODERS = ("hf", "static", "auto")


def static_decoder(model: Any, decoder: str, device: Any) -> Any:
    """The static-cache decoder (src/agent/static_decode.py) the ``decoder`` setting asks for:
    "hf" none (the model's own forward, sampling.generate_replies); "static" always (a model it
    does not cover is an error); "auto" on a CUDA device when the model is covered."""
    from . import static_decode

    if decoder not in DECODERS:
        raise ValueError(f"sampling decoder must be one of {', '.join(DECODERS)}, got {decoder!r}")
    if decoder == "hf" or (decoder == "auto" and not (getattr(device, "type", "") == "cuda"
                                                     and static_decode.supports(model))):
        log.info("replies decoded through the model's forward (decoder %s)", decoder)
        return None
    log.info("replies decoded by the static-cache decoder%s (decoder %s)",
             " with CUDA graphs" if getattr(device, "type", "") == "cuda" else "", decoder)
    return static_decode.LlamaStaticDecoder(model)


def _serve_batches(requests: "queue.Queue[Any]", policy_ref: "weakref.ref[HFPolicy]", max_batch: int,
                   wait_s: float) -> None:
    """The batcher thread: gather up to ``max_batch`` requests (waiting ``wait_s`` after the
    first), generate them, until the stop sentinel. The policy is held only while generating."""
    while True:
        first = requests.get()
        if first is _STOP:
            return
        batch, stop = [first], False
        deadline = time.monotonic() + wait_s
        while len(batch) < max_batch:
            try:
                item = requests.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is _STOP:
                stop = True
                break
            batch.append(item)
        policy = policy_ref()
        try:
            if policy is None:
                raise PolicyError("the policy was closed")
            for request, result in zip(batch, policy.generate_batch([(r.prompt_ids, r.max_new_tokens) for r in batch])):
                request.result = result
        except BaseException as exc:  # every waiting episode hears about it
            for request in batch:
                request.error = exc
        finally:
            policy = None
            for request in batch:
                request.done.set()
        if stop:
            return


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
    """From a config mapping (conf/policy/*.yaml): ``name`` is hf or api (scripted policies are
    built in code)."""
    cfg = dict(cfg)
    name = cfg.pop("name", None)
    if name == "hf":
        return HFPolicy(**cfg)
    if name == "api":
        return APIPolicy(**cfg)
    raise ValueError(f"policy name must be 'hf' or 'api', got {name!r}")
