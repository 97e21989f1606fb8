"""Batched generation: replies generated together (left-padded, KV cache) equal replies generated
one at a time, and concurrent episodes' calls are gathered into one batch. Skipped without
transformers."""
import threading

import pytest

from src.agent import HFPolicy

transformers = pytest.importorskip("transformers")

PROMPTS = [[5, 9, 12, 7], [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], [40]]


def tiny_llama(vocab: int = 64, eos: int = 2):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=1, eos_token_id=eos, pad_token_id=0)
    return LlamaForCausalLM(config).double().eval()


class IdsTokenizer:
    """Ids in, digits out: enough tokenizer for generate-level tests."""

    eos_token_id, pad_token_id = 2, 0

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(str(i) for i in ids)

    def convert_tokens_to_ids(self, token):
        return None


def policy(max_batch: int = 1, wait_ms: float = 5.0) -> HFPolicy:
    return HFPolicy(model=tiny_llama(), tokenizer=IdsTokenizer(), temperature=0.0, max_batch=max_batch,
                    batch_wait_ms=wait_ms)


def test_a_left_padded_batch_gives_the_replies_of_single_calls():
    single = policy()
    alone = [single.generate([], ids, n) for ids, n in zip(PROMPTS, (12, 7, 12))]
    together = single.generate_batch([(ids, n) for ids, n in zip(PROMPTS, (12, 7, 12))])
    for a, b in zip(alone, together):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-9)
    assert len(together[1].token_ids) <= 7  # each reply keeps its own token budget


def test_concurrent_calls_are_gathered_into_one_batch():
    batched = policy(max_batch=4, wait_ms=500.0)
    results: dict = {}

    def call(i: int) -> None:
        results[i] = batched.generate([], PROMPTS[i], 10)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert batched.batch_sizes == [3]
    alone = policy()
    for i, ids in enumerate(PROMPTS):
        assert results[i].token_ids == alone.generate([], ids, 10).token_ids


def test_a_failing_batch_reaches_every_waiting_episode():
    batched = policy(max_batch=2, wait_ms=50.0)
    with pytest.raises(Exception):
        batched.generate([], [10 ** 6], 4)  # an id outside the vocabulary
    assert batched.generate([], PROMPTS[0], 3).token_ids  # the batcher still serves
