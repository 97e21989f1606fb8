"""The trained models: the actor (any Hugging Face causal LM, optionally with LoRA) and the
critic (the same backbone family with a scalar value head).

    actor = load_actor("data/models/tiny_actor")            # hub id or local path
    critic = build_critic(actor)                             # backbone copied from the actor
    critic = build_critic(actor, name_or_path="ckpt_dir")    # or its own weights

Both return ``nn.Module``s whose ``forward`` gives per-token tensors aligned to the input ids
(see ``sequence_logprobs`` and ``Critic.forward``), which is what ``src/rl`` expects.
"""
from .actor import Actor, ModelLoadError, load_actor, sequence_logprobs
from .critic import Critic, build_critic

__all__ = ["Actor", "Critic", "ModelLoadError", "build_critic", "load_actor", "sequence_logprobs"]
