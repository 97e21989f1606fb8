"""HFPolicy as the trainer's rollout engine: weights versions on every generation, new weights
between batches, and a batcher thread that never keeps a policy alive. Skipped without
transformers."""
import gc
import weakref

import pytest

from src.agent import HFPolicy, PolicyError

transformers = pytest.importorskip("transformers")

PROMPT = [5, 9, 12, 7]


def test_versions_tag_generations_and_load_weights_swaps_them(tiny_llama, ids_tokenizer):
    module = tiny_llama()
    policy = HFPolicy(model=module, tokenizer=ids_tokenizer, temperature=0.0, version=2)
    first = policy.generate([], PROMPT, 8)
    assert first.policy_version == 2
    policy.set_version(3)
    assert policy.generate([], PROMPT, 8).policy_version == 3
    trained = tiny_llama(seed=1)
    policy.load_weights(trained.state_dict(), version=4)
    after = policy.generate([], PROMPT, 8)
    reference = HFPolicy(model=trained, tokenizer=ids_tokenizer, temperature=0.0).generate([], PROMPT, 8)
    assert policy.model is module and after.policy_version == 4
    assert (after.token_ids, after.logprobs) == (reference.token_ids, reference.logprobs) != (first.token_ids,
                                                                                               first.logprobs)


def test_close_stops_the_batcher_and_later_calls_fail(tiny_llama, ids_tokenizer):
    policy = HFPolicy(model=tiny_llama(), tokenizer=ids_tokenizer, temperature=0.0, max_batch=2, batch_wait_ms=1)
    assert policy.generate([], PROMPT, 3).token_ids
    thread = policy._batcher
    assert thread.is_alive()
    policy.close()
    assert not thread.is_alive()
    with pytest.raises(PolicyError, match="closed"):
        policy.generate([], PROMPT, 3)
    with HFPolicy(model=tiny_llama(), tokenizer=ids_tokenizer, max_batch=2, batch_wait_ms=1) as scoped:
        scoped.generate([], PROMPT, 3)
        thread = scoped._batcher
    assert not thread.is_alive()


def test_a_policy_dropped_without_close_is_collected_and_its_thread_ends(tiny_llama, ids_tokenizer):
    policy = HFPolicy(model=tiny_llama(), tokenizer=ids_tokenizer, max_batch=2, batch_wait_ms=1)
    policy.generate([], PROMPT, 3)
    thread, ref = policy._batcher, weakref.ref(policy)
    del policy
    gc.collect()
    assert ref() is None  # the batcher thread held it only weakly
    thread.join(10)
    assert not thread.is_alive()


def test_sampling_at_decodes_greedily_inside_the_block_and_restores_the_policys_own(tiny_llama, ids_tokenizer):
    model = tiny_llama()
    greedy = HFPolicy(model=model, tokenizer=ids_tokenizer, temperature=0.0).generate([], PROMPT, 12)
    policy = HFPolicy(model=model, tokenizer=ids_tokenizer, temperature=1.0, seed=0)
    with policy.sampling_at(0.0):
        inside = [policy.generate([], PROMPT, 12) for _ in range(2)]
        assert policy.sampling["temperature"] == 0.0  # what the block's trajectory rows record
    assert [(g.token_ids, g.logprobs) for g in inside] == [(greedy.token_ids, greedy.logprobs)] * 2
    assert policy.sampling["temperature"] == 1.0
    sampled = [policy.generate([], PROMPT, 12).token_ids for _ in range(4)]
    assert any(ids != greedy.token_ids for ids in sampled)  # T = 1 again: not the greedy path
    with policy.sampling_at(None):
        assert policy.sampling["temperature"] == 1.0
    with pytest.raises(ValueError, match="temperature >= 0"):
        with policy.sampling_at(-1.0):
            pass
    assert policy.sampling["temperature"] == 1.0
