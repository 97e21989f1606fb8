"""Replies from a Llama-architecture causal LM through a preallocated KV cache, one CUDA graph per
decode step: the same distribution and log-probs as ``sampling.generate_replies`` (which goes
through the model's own forward), without its per-token Python overhead.

Why: a small actor (the task family's 4 M-parameter one) decodes launch-bound. Through the Hugging
Face forward a step cost 5-7 ms on the H200 host (2026-12-04, docs/benchmarks.md) whatever the
batch, so multi-turn rollouts spent most of their time generating. Here a step is one graph
replay plus the sampling kernels.

How: the model's own modules (projections, norms, MLP; LoRA-wrapped ones too) are called, and
only attention, rotary embedding and the cache are ours. Rows are left-padded as in
``generate_replies``, so every row writes its next token at the same cache column; a [B, S]
``valid`` mask marks which columns each row may attend to (its real prompt tokens and what it
generated). The prompt is prefilled eagerly in chunks (attention memory bounded by
``PREFILL_CHUNK`` x S per head); each decode step reads the column index from a device tensor, so
one captured graph serves every step of every batch of that (rows, cache length) shape. Shapes
are bucketed (rows to a power of two, cache length to ``CACHE_BUCKET``) so that few graphs exist;
sampling (``sampling.sample_tokens``, the caller's generator) stays outside the graph.

``supports(model)`` says whether a model can use it (Llama: model_type ``llama``, a rotary
embedding that does not depend on the sequence length); ``HFPolicy`` falls back to
``generate_replies`` otherwise.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
import torch.nn.functional as F

from .sampling import SampledReply, SamplingParams, _append, sample_tokens

# Cache columns are allocated in multiples of this (fewer distinct graph shapes).
CACHE_BUCKET = 1024
# Prompt tokens per prefill forward (its attention scores are [B, H, chunk, S]).
PREFILL_CHUNK = 512
# Captured decode graphs (and their caches) kept at once; the least recently used goes first.
MAX_GRAPHS = 2
# Rotary embeddings whose frequencies are fixed (a "dynamic" one changes with the length).
STATIC_ROPE = ("default", "linear", "llama3", "yarn", "longrope")


def base_model(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def supports(model: Any) -> bool:
    """A Llama-architecture causal LM with a fixed rotary embedding."""
    base = base_model(model)
    config = getattr(base, "config", None)
    if config is None or getattr(config, "model_type", "") != "llama":
        return False
    rope = getattr(getattr(base.model, "rotary_emb", None), "rope_type", None)
    return rope in STATIC_ROPE and getattr(base.model.rotary_emb, "inv_freq", None) is not None


@dataclass
class _Shape:
    rows: int
    columns: int


class StaticCache:
    """Keys and values of every layer for ``rows`` x ``columns`` positions, the rows' ``valid``
    columns, and the decode step's static inputs and output."""

    def __init__(self, model: Any, shape: _Shape, device: torch.device, dtype: torch.dtype):
        config = base_model(model).config
        heads = config.num_key_value_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        size = (shape.rows, heads, shape.columns, head_dim)
        self.keys = [torch.zeros(size, device=device, dtype=dtype) for _ in range(config.num_hidden_layers)]
        self.values = [torch.zeros(size, device=device, dtype=dtype) for _ in range(config.num_hidden_layers)]
        self.valid = torch.zeros((shape.rows, shape.columns), device=device, dtype=torch.bool)
        # The decode step's inputs (token [B, 1], position [B, 1], column [1]) and logits [B, V].
        self.token = torch.zeros((shape.rows, 1), device=device, dtype=torch.long)
        self.position = torch.zeros((shape.rows, 1), device=device, dtype=torch.long)
        self.column = torch.zeros(1, device=device, dtype=torch.long)
        self.logits: Optional[torch.Tensor] = None


class LlamaStaticDecoder:
    """Generates for one model; holds its captured graphs (keyed by shape and the parameters'
    storage, so weights loaded in place keep them and replaced tensors recapture)."""

    def __init__(self, model: Any, use_graphs: Optional[bool] = None):
        if not supports(model):
            raise ValueError(f"{type(base_model(model)).__name__} is not a Llama-architecture model with a fixed rotary embedding")
        self.model = model
        self.base = base_model(model)
        self.use_graphs = use_graphs
        self._graphs: dict[tuple, tuple[StaticCache, Any]] = {}

    # -- the forward: the model's modules, our attention over the static cache --

    def _rotary(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        rotary = self.base.model.rotary_emb
        freqs = positions[..., None].float() * rotary.inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1)
        scale = getattr(rotary, "attention_scaling", 1.0)
        return (emb.cos() * scale).to(dtype)[:, None], (emb.sin() * scale).to(dtype)[:, None]

    def forward(self, cache: StaticCache, ids: torch.Tensor, positions: torch.Tensor, start: torch.Tensor,
                span: Optional[int] = None) -> torch.Tensor:
        """Tokens ``ids`` [B, T] at ``positions`` written into cache columns start..start+T-1
        (``start``: a [1] device tensor); returns the last position's logits [B, V]. Each query
        attends to the valid columns up to its own. ``span``: attend over the first ``span``
        columns only (eager calls, which know it; a captured graph attends over all of them)."""
        inner = self.base.model
        hidden = inner.embed_tokens(ids)
        cos, sin = self._rotary(positions, hidden.dtype)
        width = ids.shape[1]
        columns = start + torch.arange(width, device=ids.device)
        span = span or cache.valid.shape[1]
        every = torch.arange(span, device=ids.device)[None, :]
        seen, own = every <= columns[:, None], every == columns[:, None]  # [T, S]
        # A query always sees its own column: a padding query sees no valid column otherwise, which
        # some attention kernels answer with NaN, and NaN values in the cache would poison even
        # the queries that mask them out (0 x NaN).
        mask = ((cache.valid[:, None, :span] & seen[None]) | own[None])[:, None]  # [B, 1, T, span]
        for index, layer in enumerate(inner.layers):
            residual = hidden
            hidden = layer.input_layernorm(hidden)
            hidden = residual + self._attention(layer.self_attn, hidden, cos, sin, mask, cache, index, columns)
            residual = hidden
            hidden = residual + layer.mlp(layer.post_attention_layernorm(hidden))
        hidden = inner.norm(hidden[:, -1:, :])
        return self.base.lm_head(hidden)[:, -1, :]

    def _attention(self, attn: Any, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                   cache: StaticCache, index: int, columns: torch.Tensor) -> torch.Tensor:
        rows, width, _ = hidden.shape
        head_dim = attn.head_dim
        q = attn.q_proj(hidden).view(rows, width, -1, head_dim).transpose(1, 2)
        k = attn.k_proj(hidden).view(rows, width, -1, head_dim).transpose(1, 2)
        v = attn.v_proj(hidden).view(rows, width, -1, head_dim).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        keys, values = cache.keys[index], cache.values[index]
        keys.index_copy_(2, columns, k.to(keys.dtype))
        values.index_copy_(2, columns, v.to(values.dtype))
        keys, values = keys[:, :, :mask.shape[-1]], values[:, :, :mask.shape[-1]]
        groups = q.shape[1] // keys.shape[1]
        full_k = keys.repeat_interleave(groups, dim=1) if groups > 1 else keys
        full_v = values.repeat_interleave(groups, dim=1) if groups > 1 else values
        out = F.scaled_dot_product_attention(q, full_k.to(q.dtype), full_v.to(q.dtype), attn_mask=mask,
                                             scale=attn.scaling)
        return attn.o_proj(out.transpose(1, 2).reshape(rows, width, -1))

    # -- generation --

    def generate(self, prompts: Sequence[list[int]], budgets: Sequence[int], stop_ids: Sequence[int], pad_id: int,
                 params: SamplingParams, generator: Any = None) -> list[SampledReply]:
        """``sampling.generate_replies``'s contract: replies to left-padded ``prompts``, each cut
        at its own stop id or budget. The caller owns train/eval mode."""
        if not prompts or min(len(p) for p in prompts) < 1 or min(budgets) < 1:
            raise ValueError("every reply needs a non-empty prompt and a budget of at least one token")
        device = self.model.get_input_embeddings().weight.device
        width, longest = max(len(p) for p in prompts), max(budgets)
        shape = _Shape(_next_power_of_two(len(prompts)), _round_up(width + longest, CACHE_BUCKET))
        with torch.no_grad(), _autocast_without_cache(device) as amp:
            cache, graph = self._cache_for(shape, device, amp)
            ids = torch.full((shape.rows, width), pad_id, dtype=torch.long)
            real = torch.zeros((shape.rows, width), dtype=torch.bool)
            for row, prompt in enumerate(prompts):
                ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
                real[row, width - len(prompt):] = True
            ids, real = ids.to(device), real.to(device)
            positions = (real.long().cumsum(-1) - 1).clamp(min=0)
            cache.valid.zero_()
            cache.valid[:, :width] = real
            logits = self._prefill(cache, ids, positions)
            replies = [SampledReply([], [], "length") for _ in prompts]
            open_rows, stops = set(range(len(prompts))), set(int(s) for s in stop_ids)
            next_position, column = positions[:, -1:] + 1, width
            for _ in range(longest):
                tokens, logps = sample_tokens(logits[:len(prompts)], params, generator)
                _append(replies, open_rows, tokens.tolist(), logps.tolist(), budgets, stops)
                if not open_rows or column >= shape.columns:
                    break
                cache.token[:len(prompts), 0] = tokens
                cache.position.copy_(next_position)
                cache.column.fill_(column)
                cache.valid[:, column] = True
                logits = self._decode(cache, graph, column + 1)
                next_position, column = next_position + 1, column + 1
        return replies

    def _prefill(self, cache: StaticCache, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        logits = None
        for start in range(0, ids.shape[1], PREFILL_CHUNK):
            stop = min(start + PREFILL_CHUNK, ids.shape[1])
            logits = self.forward(cache, ids[:, start:stop], positions[:, start:stop],
                                  torch.tensor([start], device=ids.device), span=stop)
        return logits

    def _decode(self, cache: StaticCache, graph: Any, span: int) -> torch.Tensor:
        if graph is None:
            return self.forward(cache, cache.token, cache.position, cache.column, span)
        graph.replay()
        return cache.logits

    def _graphs_enabled(self, device: torch.device) -> bool:
        return device.type == "cuda" if self.use_graphs is None else bool(self.use_graphs and device.type == "cuda")

    def _cache_for(self, shape: _Shape, device: torch.device, amp: Optional[torch.dtype]) -> tuple[StaticCache, Any]:
        dtype = self.model.get_input_embeddings().weight.dtype
        key = (shape.rows, shape.columns, str(device), dtype, amp,
               tuple(p.data_ptr() for p in self.model.parameters()))
        if key in self._graphs:
            self._graphs[key] = self._graphs.pop(key)  # most recently used last
            return self._graphs[key]
        while len(self._graphs) >= MAX_GRAPHS:
            self._graphs.pop(next(iter(self._graphs)))
        cache = StaticCache(self.model, shape, device, dtype)
        graph = self._capture(cache) if self._graphs_enabled(device) else None
        self._graphs[key] = (cache, graph)
        return cache, graph

    def _capture(self, cache: StaticCache) -> Any:
        """The decode step as a CUDA graph over ``cache``'s static inputs (warmed up on a side
        stream first, as graph capture requires); its writes land in column 0, which every
        prefill overwrites."""
        cache.valid[:, 0] = True
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self.forward(cache, cache.token, cache.position, cache.column)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        # thread_local: the trainer's other threads may use CUDA while this one captures.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            cache.logits = self.forward(cache, cache.token, cache.position, cache.column)
        return graph


@contextmanager
def _autocast_without_cache(device: torch.device):
    """The caller's autocast (yields its dtype, or None when off) with the cast-weight cache
    disabled: a captured graph must read the weights themselves, not casts of them cached outside
    it (freed when the autocast region ends). A graph is captured per autocast state."""
    if not torch.is_autocast_enabled(device.type):
        yield None
        return
    dtype = torch.get_autocast_dtype(device.type)
    with torch.autocast(device.type, dtype=dtype, cache_enabled=False):
        yield dtype


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _next_power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _round_up(n: int, step: int) -> int:
    return -(-n // step) * step
