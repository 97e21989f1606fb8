"""The actor and critic: real HF models (a tiny one built by the fixture), their alignment with
token ids, LoRA, and the errors a user sees for models that cannot be loaded."""
from __future__ import annotations

import pytest
import torch

from src.models import ModelLoadError, build_critic, load_actor


def test_actor_logprobs_are_the_next_token_distribution_of_the_model(tiny_model_dir):
    actor = load_actor(str(tiny_model_dir))
    ids = torch.tensor([[5, 9, 17, 3, 8], [4, 4, 6, 0, 0]])
    attention = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    logprobs, entropy = actor(ids, attention, temperature=0.7, with_entropy=True)
    logits = actor.model(input_ids=ids, attention_mask=attention).logits.float() / 0.7
    expected = torch.log_softmax(logits[:, :-1], -1).gather(2, ids[:, 1:, None])[..., 0]
    assert logprobs.shape == ids.shape and entropy.shape == ids.shape
    assert torch.all(logprobs[:, 0] == 0)  # the first token has no prediction
    torch.testing.assert_close(logprobs[:, 1:], expected, atol=1e-5, rtol=1e-5)
    p = torch.softmax(logits[0, 2], -1)
    torch.testing.assert_close(entropy[0, 3], -(p * p.log()).sum(), atol=1e-5, rtol=1e-5)


def test_critic_starts_from_a_copy_of_the_actor_backbone_and_predicts_zero(tiny_model_dir):
    actor = load_actor(str(tiny_model_dir))
    critic = build_critic(actor)
    actor_backbone = actor.model.base_model.state_dict()
    for name, tensor in critic.backbone.state_dict().items():
        torch.testing.assert_close(tensor, actor_backbone[name])
    ids = torch.tensor([[5, 9, 17, 3]])
    values = critic(ids, torch.ones_like(ids))
    assert values.shape == ids.shape and torch.all(values == 0)
    # A copy, not a share: training the critic leaves the actor alone.
    next(critic.backbone.parameters()).data.add_(1.0)
    assert not torch.equal(next(critic.backbone.parameters()), next(actor.model.base_model.parameters()))


def test_critic_values_are_read_one_position_before_their_token(tiny_model_dir):
    critic = build_critic(load_actor(str(tiny_model_dir)))
    torch.nn.init.normal_(critic.value_head.weight)
    ids = torch.tensor([[5, 9, 17, 3, 8]])
    full = critic(ids, torch.ones_like(ids))
    prefix = critic(ids[:, :3], torch.ones_like(ids[:, :3]))
    # Value at t depends on tokens < t only: a prefix of length 3 gives the same values 0..2,
    # and the value of token 3 (position 3) is known from the first 3 tokens.
    torch.testing.assert_close(full[:, :3], prefix, atol=1e-5, rtol=1e-5)


def test_lora_actor_trains_only_its_adapters(tiny_model_dir):
    actor = load_actor(str(tiny_model_dir), lora={"r": 4, "lora_alpha": 8, "lora_dropout": 0.0})
    trainable = [n for n, p in actor.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    critic = build_critic(actor, lora={"r": 4, "lora_alpha": 8, "lora_dropout": 0.0})
    backbone_trainable = [n for n, p in critic.backbone.named_parameters() if p.requires_grad]
    assert backbone_trainable and all("lora_" in n for n in backbone_trainable)
    assert all(p.requires_grad for p in critic.value_head.parameters())


def test_random_llama_from_config_uses_the_tokenizer_vocabulary(tiny_model_dir):
    actor = load_actor(tokenizer=str(tiny_model_dir), from_config={"hidden_size": 32, "num_hidden_layers": 1,
                                                                   "num_attention_heads": 2, "intermediate_size": 64})
    assert actor.model.config.vocab_size == len(actor.tokenizer)
    again = load_actor(tokenizer=str(tiny_model_dir), from_config={"hidden_size": 32, "num_hidden_layers": 1,
                                                                   "num_attention_heads": 2, "intermediate_size": 64})
    assert torch.equal(next(actor.model.parameters()), next(again.model.parameters()))  # seeded


def test_a_model_that_cannot_be_loaded_offline_is_one_clear_error(tmp_path, monkeypatch, tiny_model_dir):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="cannot load model 'no-such-org/no-such-model'.*offline"):
        load_actor("no-such-org/no-such-model")
    with pytest.raises(ModelLoadError, match="dtype must be one of"):
        load_actor(str(tiny_model_dir), dtype="float8")
