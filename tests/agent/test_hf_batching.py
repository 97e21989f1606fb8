"""Batched generation: replies generated together (left-padded, KV cache) equal replies generated
one at a time, and concurrent episodes' calls are gathered into one batch. Skipped without
transformers."""
import threading

import pytest

from src.agent import HFPolicy

transformers = pytest.importorskip("transformers")

PROMPTS = [[5, 9, 12, 7], [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], [40]]


@pytest.fixture
def policy(tiny_llama, ids_tokenizer):
    def make(max_batch: int = 1, wait_ms: float = 5.0) -> HFPolicy:
        return HFPolicy(model=tiny_llama(), tokenizer=ids_tokenizer, temperature=0.0, max_batch=max_batch,
                        batch_wait_ms=wait_ms)

    return make


def test_a_left_padded_batch_gives_the_replies_of_single_calls(policy):
    single = policy()
    alone = [single.generate([], ids, n) for ids, n in zip(PROMPTS, (12, 7, 12))]
    together = single.generate_batch([(ids, n) for ids, n in zip(PROMPTS, (12, 7, 12))])
    for a, b in zip(alone, together):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-9)
    assert len(together[1].token_ids) <= 7  # each reply keeps its own token budget


def test_concurrent_calls_are_gathered_into_one_batch(policy):
    batched = policy(max_batch=4, wait_ms=500.0)
    results: dict = {}

    def call(i: int) -> None:
        results[i] = batched.generate([], PROMPTS[i], 10)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    batched.close()
    assert batched.batch_sizes == [3]
    alone = policy()
    for i, ids in enumerate(PROMPTS):
        assert results[i].token_ids == alone.generate([], ids, 10).token_ids


def test_a_failing_batch_reaches_every_waiting_episode(policy):
    with policy(max_batch=2, wait_ms=50.0) as batched:
        with pytest.raises(Exception):
            batched.generate([], [10 ** 6], 4)  # an id outside the vocabulary
        assert batched.generate([], PROMPTS[0], 3).token_ids  # the batcher still serves
