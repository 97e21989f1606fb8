"""Our own sampling loop for a Hugging Face causal LM: prefill, then one token per step with the
KV cache, temperature / top-k / top-p applied here and nowhere else.

Why not ``model.generate``: a checkpoint's ``generation_config`` (repetition_penalty,
no_repeat_ngram_size, min_length, forced or suppressed tokens, ...) silently reshapes the
distribution generate samples from, and its logits are kept for every step ([steps, V] per row:
gigabytes for an 8k-token reply). PPO needs the log-prob of each sampled token under the
distribution it was actually drawn from, and nothing else. So:

- the checkpoint's ``generation_config`` is never read;
- the distribution is ``softmax(logits / T)`` restricted to the top-k, then to the top-p nucleus,
  renormalised; the log-prob kept per step is the chosen token's under exactly that distribution
  (with top_p = 1, top_k = 0 it is ``log_softmax(logits / T)``, what the trainer recomputes);
- greedy (T = 0) takes the argmax and records ``log_softmax(logits)`` of it (T = 1, untruncated);
- only [B] ids and [B] log-probs survive a step: memory does not grow with the reply.
"""
from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass
from typing import Any, Optional, Sequence


@dataclass(frozen=True)
class SamplingParams:
    """The sampling distribution: temperature (0: greedy), top_p (1: off), top_k (0: off)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError(f"sampling needs temperature >= 0, 0 < top_p <= 1, top_k >= 0; got {self}")

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def truncate(scaled: Any, top_k: int, top_p: float) -> Any:
    """Logits [B, V] with the tokens outside the top-k, then outside the top-p nucleus, set to
    -inf. The nucleus is the smallest set of most likely tokens whose mass reaches top_p: a token
    stays when the mass of the tokens ranked above it is still below top_p."""
    import torch

    if 0 < top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        ranked, order = torch.sort(scaled, dim=-1, descending=True)
        probs = torch.softmax(ranked, dim=-1)
        above = torch.cumsum(probs, dim=-1) - probs
        drop = above >= top_p
        drop[:, 0] = False
        scaled = scaled.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    return scaled


def sample_tokens(logits: Any, params: SamplingParams, generator: Any = None) -> tuple[Any, Any]:
    """One step: ids [B] and their log-probs [B] under the distribution they were drawn from."""
    import torch

    if logits.element_size() < 4:  # bf16 / fp16 logits: softmax in float32, as the trainer's
        logits = logits.float()
    if params.temperature == 0:
        ids = logits.argmax(dim=-1)
        return ids, torch.log_softmax(logits, dim=-1).gather(1, ids[:, None])[:, 0]
    logp = torch.log_softmax(truncate(logits / params.temperature, params.top_k, params.top_p), dim=-1)
    ids = torch.multinomial(logp.exp(), 1, generator=generator)[:, 0]
    return ids, logp.gather(1, ids[:, None])[:, 0]


@dataclass
class SampledReply:
    """One row's reply: ids (its stop id included when it stopped), one log-prob per id."""

    token_ids: list[int]
    logprobs: list[float]
    # "stop" (ended on a stop id) or "length" (ran into its budget).
    finish_reason: str


def _forward_keywords(model: Any) -> tuple[dict[str, Any], str]:
    """Keywords every forward gets, and the name of the KV-cache argument. Ask for the last
    position's logits only (the prefill of a 100k-token prompt would otherwise materialise
    [B, 100k, V] logits) when the model can. The cache argument is ``cache`` from transformers
    5.2x on, ``past_key_values`` before. A peft wrapper forwards keywords to its base model, so
    the base model's signature decides."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = inspect.signature(base.forward).parameters
    extra = {"use_cache": True, **({"logits_to_keep": 1} if "logits_to_keep" in names else {})}
    return extra, "cache" if "cache" in names else "past_key_values"


def _step(model: Any, extra: dict[str, Any], cache_name: str, cache: Any, **inputs: Any) -> tuple[Any, Any]:
    """One forward: the cache to continue from and the last position's logits [B, V]."""
    out = model(**inputs, **extra, **({cache_name: cache} if cache is not None else {}))
    new_cache = getattr(out, "cache", None)
    return (new_cache if new_cache is not None else out.past_key_values), out.logits[:, -1, :]


def generate_replies(model: Any, prompts: Sequence[list[int]], budgets: Sequence[int], stop_ids: Sequence[int],
                     pad_id: int, params: SamplingParams, generator: Any = None) -> list[SampledReply]:
    """Replies to left-padded ``prompts`` (attention mask, position ids counted from each row's
    first real token), each cut at its own stop id or its own budget. Runs under ``no_grad``;
    the caller owns the module's train/eval mode."""
    import torch

    if not prompts or min(len(p) for p in prompts) < 1 or min(budgets) < 1:
        raise ValueError("every reply needs a non-empty prompt and a budget of at least one token")
    device = model.get_input_embeddings().weight.device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    extra, cache_name = _forward_keywords(model)
    replies = [SampledReply([], [], "length") for _ in prompts]
    open_rows, stops = set(range(len(prompts))), set(int(s) for s in stop_ids)
    with torch.no_grad():
        cache, logits = _step(model, extra, cache_name, None, input_ids=ids, attention_mask=mask,
                              position_ids=positions)
        next_position = positions[:, -1:] + 1
        for _ in range(max(budgets)):
            tokens, logps = sample_tokens(logits, params, generator)
            del logits
            _append(replies, open_rows, tokens.tolist(), logps.tolist(), budgets, stops)
            if not open_rows:
                break
            feed = tokens.masked_fill(_closed(len(prompts), open_rows, device), pad_id)[:, None]
            mask = torch.cat([mask, mask.new_ones((len(prompts), 1))], dim=1)
            cache, logits = _step(model, extra, cache_name, cache, input_ids=feed, attention_mask=mask,
                                  position_ids=next_position)
            next_position = next_position + 1
    return replies


def _append(replies: list[SampledReply], open_rows: set[int], tokens: list[int], logps: list[float],
            budgets: Sequence[int], stops: set[int]) -> None:
    """Give each still-open row its token; close the rows that stopped or used their budget."""
    for row in sorted(open_rows):
        reply = replies[row]
        reply.token_ids.append(tokens[row])
        reply.logprobs.append(logps[row])
        if tokens[row] in stops:
            reply.finish_reason = "stop"
            open_rows.discard(row)
        elif len(reply.token_ids) >= budgets[row]:
            open_rows.discard(row)


def _closed(n: int, open_rows: set[int], device: Any) -> Any:
    """[n] bool: rows that are done (they are fed padding; their outputs are ignored)."""
    import torch

    closed = torch.ones(n, dtype=torch.bool)
    closed[sorted(open_rows)] = False
    return closed.to(device)


def seeded_generator(device: Any, seed: Optional[int]) -> Any:
    """A private generator on the model's device: sampling never touches torch's global RNG (the
    trainer's), and a seed makes a rollout reproducible."""
    import torch

    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed))
    return generator
