"""The critic: a transformer backbone of the actor's family with a scalar value head.

Values are aligned like log-probs (src/models/actor.py): ``values[:, t]`` estimates the return
before token ``t`` is generated, so it is read off the hidden state at ``t - 1``; position 0 is 0.
"""
from __future__ import annotations

import copy
from typing import Any, Mapping, Optional

import torch
from torch import nn

from .actor import Actor, ModelLoadError, offline, resolve_dtype, with_lora


class Critic(nn.Module):
    def __init__(self, backbone: nn.Module, hidden_size: int):
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)
        # Zero start: every value is 0 until the critic has learned something, so early GAE
        # targets are the plain outcome rather than noise from a random head.
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        hidden = self.backbone(input_ids=ids, attention_mask=attention, use_cache=False).last_hidden_state
        head = self.value_head
        values = head(hidden[:, :-1].to(head.weight.dtype)).squeeze(-1).float()
        return torch.cat([values.new_zeros(ids.shape[0], 1), values], dim=1)


def build_critic(actor: Actor, name_or_path: str = "", dtype: str = "float32",
                 gradient_checkpointing: bool = False, lora: Optional[Mapping[str, Any]] = None) -> Critic:
    """A critic whose backbone is a copy of the actor's (the usual start: the critic begins from
    what the policy knows), or loaded from ``name_or_path`` (an HF directory or hub id: its
    base model, the LM head dropped)."""
    if name_or_path:
        backbone = _load_backbone(name_or_path, resolve_dtype(dtype))
    else:
        backbone = _base_model(_without_adapters(copy.deepcopy(actor.model))).to(resolve_dtype(dtype))
    if gradient_checkpointing:
        backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora:
        backbone = with_lora(backbone, lora, task_type="FEATURE_EXTRACTION")
    critic = Critic(backbone, backbone.config.hidden_size)
    return critic.to(resolve_dtype(dtype))


def _without_adapters(model: nn.Module) -> nn.Module:
    """A LoRA actor's copy with its adapters merged in: the critic starts from the policy's
    current weights and trains (or gets adapters of) its own."""
    return model.merge_and_unload() if hasattr(model, "merge_and_unload") else model


def _base_model(model: nn.Module) -> nn.Module:
    """The decoder stack under an LM head."""
    base = getattr(model, "base_model", model)
    if base is model:
        raise ModelLoadError(f"cannot find the backbone of {type(model).__name__} to build a critic from")
    return base


def _load_backbone(name_or_path: str, torch_dtype: torch.dtype) -> nn.Module:
    from transformers import AutoModel

    try:
        return AutoModel.from_pretrained(str(name_or_path), dtype=torch_dtype, local_files_only=offline())
    except (OSError, ValueError, TypeError) as exc:
        raise ModelLoadError(f"cannot load critic backbone {name_or_path!r}: {type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:300]}") from None
