"""The actor: a Hugging Face causal LM and its tokenizer, loaded by hub id or local path, or built
from a config with random weights (for models no machine here can download).

Token alignment used everywhere in training: for ids ``[B, T]``, position ``t`` of a per-token
tensor belongs to token ``ids[:, t]``; its log-prob comes from the logits at ``t - 1``, so
position 0 (always a prompt token) is 0.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional

import torch
from torch import nn

from src.rl import entropy_from_logits, token_logprobs


class ModelLoadError(ValueError):
    """A model or tokenizer that cannot be loaded (offline, missing, malformed): one clear line."""


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Actor(nn.Module):
    """The policy: ``model`` (an HF causal LM, possibly peft-wrapped) and its ``tokenizer``."""

    def __init__(self, model: nn.Module, tokenizer: Any, name: str):
        super().__init__()
        self.model = model
        # Not a module: kept out of state_dict, saved beside checkpoints as files.
        self.tokenizer = tokenizer
        self.name = name

    def forward(self, ids: torch.Tensor, attention: torch.Tensor, temperature: float = 1.0,
                with_entropy: bool = False) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        return sequence_logprobs(self.model, ids, attention, temperature, with_entropy)

    @property
    def generation_model(self) -> nn.Module:
        """The module the rollout policy samples from (the same object that is trained)."""
        return self.model


def sequence_logprobs(model: nn.Module, ids: torch.Tensor, attention: torch.Tensor, temperature: float = 1.0,
                      with_entropy: bool = False) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Per-token log-probs ``[B, T]`` of ``ids`` under ``model`` at ``temperature`` (and the
    entropy of each position's distribution when asked), aligned as the module docstring says.
    Right padding keeps positions 0..n-1 for every row's real tokens, as in generation."""
    logits = model(input_ids=ids, attention_mask=attention, use_cache=False).logits[:, :-1]
    logprobs = token_logprobs(logits, ids[:, 1:], temperature)
    zeros = logprobs.new_zeros(ids.shape[0], 1)
    entropy = None
    if with_entropy:
        entropy = torch.cat([zeros, entropy_from_logits(logits, temperature)], dim=1)
    return torch.cat([zeros, logprobs], dim=1), entropy


def load_actor(name_or_path: str = "", tokenizer: str = "", dtype: str = "float32",
               from_config: Optional[Mapping[str, Any]] = None, gradient_checkpointing: bool = False,
               lora: Optional[Mapping[str, Any]] = None, seed: int = 0) -> Actor:
    """Load ``name_or_path`` (hub id or local directory), or build ``from_config`` (a Llama
    config's fields; random weights under ``seed``) with the tokenizer at ``tokenizer``."""
    tok = load_tokenizer(tokenizer or name_or_path)
    torch_dtype = resolve_dtype(dtype)
    if from_config:
        model = random_llama(tok, dict(from_config), torch_dtype, seed)
        name = f"llama-from-config({human_size(model)})"
    else:
        model = load_causal_lm(name_or_path, torch_dtype)
        name = str(name_or_path)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    if lora:
        model = with_lora(model, lora)
    return Actor(model.train(), tok, name)  # from_pretrained returns eval mode


def resolve_dtype(dtype: str) -> torch.dtype:
    if dtype not in DTYPES:
        raise ModelLoadError(f"model dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


def offline() -> bool:
    """The hub's own offline switches, read at call time (huggingface_hub reads them at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0") or os.environ.get("TRANSFORMERS_OFFLINE", "") not in ("", "0")


def _describe_missing(name_or_path: str, exc: Exception) -> str:
    where = "a local directory" if Path(name_or_path).expanduser().exists() else "a hub id"
    hint = ("; this machine is offline (HF_HUB_OFFLINE): give a local path" if offline()
            else "; no download worked either: check the id, the network, or give a local path")
    return f"cannot load model {name_or_path!r} ({where}): {type(exc).__name__}: {str(exc).splitlines()[0][:300]}{hint}"


def load_tokenizer(name_or_path: str) -> Any:
    from transformers import AutoTokenizer

    if not name_or_path:
        raise ModelLoadError("the model needs a tokenizer: set model.actor.name_or_path or model.actor.tokenizer")
    try:
        tok = AutoTokenizer.from_pretrained(str(name_or_path), local_files_only=offline())
    except (OSError, ValueError, TypeError) as exc:
        raise ModelLoadError(_describe_missing(str(name_or_path), exc)) from None
    if getattr(tok, "chat_template", None) is None:
        raise ModelLoadError(f"tokenizer {name_or_path!r} has no chat template: the agent renders its "
                             "conversations with it (use an instruct/chat model, or set tokenizer.chat_template)")
    return tok


def load_causal_lm(name_or_path: str, torch_dtype: torch.dtype) -> nn.Module:
    from transformers import AutoModelForCausalLM

    if not name_or_path:
        raise ModelLoadError("set model.actor.name_or_path (a hub id or a local path) or model.actor.from_config")
    try:
        return AutoModelForCausalLM.from_pretrained(str(name_or_path), dtype=torch_dtype, local_files_only=offline())
    except (OSError, ValueError, TypeError) as exc:
        raise ModelLoadError(_describe_missing(str(name_or_path), exc)) from None


def random_llama(tokenizer: Any, fields: dict[str, Any], torch_dtype: torch.dtype, seed: int) -> nn.Module:
    """A Llama (RoPE, RMSNorm, SwiGLU) over the tokenizer's vocabulary with random weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    fields.setdefault("num_key_value_heads", fields.get("num_attention_heads"))
    config = LlamaConfig(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id, pad_token_id=pad,
                         bos_token_id=pad, **fields)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.to(torch_dtype)


def with_lora(model: nn.Module, lora: Mapping[str, Any], task_type: str = "CAUSAL_LM") -> nn.Module:
    """Wrap in a peft LoRA adapter: only the adapter's weights train (and are checkpointed)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:
        raise ModelLoadError(f"model.actor.lora needs the peft package ({exc}); pip install peft") from None
    fields = dict(lora)
    fields["target_modules"] = list(fields.get("target_modules") or ["q_proj", "k_proj", "v_proj", "o_proj"])
    return get_peft_model(model, LoraConfig(task_type=task_type, **fields))


def human_size(model: nn.Module) -> str:
    n = sum(p.numel() for p in model.parameters())
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"
