"""The static-cache decoder (src/agent/static_decode.py) against the model's own forward: the same
greedy replies and log-probs as sampling.generate_replies for left-padded batches (grouped-query
attention, chunked prefill, filler rows), the same log-probs as a teacher-forced forward when
sampling, and a clear refusal of models it does not cover. The CUDA-graph path: test_static_decode_gpu.py."""
import pytest

from src.agent import static_decode
from src.agent.sampling import SamplingParams, generate_replies, seeded_generator

transformers = pytest.importorskip("transformers")
import torch  # noqa: E402

# Three rows of different lengths: left padding, and a batch of 3 filled up to 4 rows.
PROMPTS = [[5, 9, 12, 7], [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19], [40]]


def test_greedy_replies_and_logprobs_match_the_models_own_forward(tiny_llama, monkeypatch):
    monkeypatch.setattr(static_decode, "PREFILL_CHUNK", 5)  # the 17-token prompt in 4 chunks
    model = tiny_llama()
    budgets = [24, 9, 30]
    ours = static_decode.LlamaStaticDecoder(model).generate(PROMPTS, budgets, [2], 0, SamplingParams(0.0))
    theirs = generate_replies(model, PROMPTS, budgets, [2], 0, SamplingParams(0.0))
    for mine, ref, budget in zip(ours, theirs, budgets):
        assert mine.token_ids == ref.token_ids and mine.finish_reason == ref.finish_reason
        assert mine.logprobs == pytest.approx(ref.logprobs, abs=1e-9)
    assert [len(r.token_ids) for r in ours] == [len(r.token_ids) for r in theirs]
    assert any(len(r.token_ids) == b for r, b in zip(ours, budgets))  # a reply ran to its budget


def test_sampled_logprobs_are_those_of_a_teacher_forced_forward(tiny_llama):
    model = tiny_llama(seed=3)
    params = SamplingParams(1.0, 0.9, 20)
    replies = static_decode.LlamaStaticDecoder(model).generate(PROMPTS, [40] * 3, [], 0, params,
                                                               seeded_generator("cpu", 7))
    for prompt, reply in zip(PROMPTS, replies):
        assert len(reply.token_ids) == 40 and reply.finish_reason == "length"
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + reply.token_ids])).logits[0]
        steps = logits[len(prompt) - 1:len(prompt) + len(reply.token_ids) - 1]
        from src.agent.sampling import truncate

        logp = torch.log_softmax(truncate(steps / params.temperature, params.top_k, params.top_p), -1)
        expected = logp.gather(1, torch.tensor(reply.token_ids)[:, None])[:, 0]
        assert reply.logprobs == pytest.approx(expected.tolist(), abs=1e-9)


def test_weights_changed_in_place_are_used_by_the_next_batch(tiny_llama):
    model = tiny_llama()
    decoder = static_decode.LlamaStaticDecoder(model)
    before = decoder.generate(PROMPTS[:1], [16], [], 0, SamplingParams(0.0))[0]
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)  # tied to the embeddings: every logit changes
    after = decoder.generate(PROMPTS[:1], [16], [], 0, SamplingParams(0.0))[0]
    ref = generate_replies(model, PROMPTS[:1], [16], [], 0, SamplingParams(0.0))[0]
    assert after.token_ids == ref.token_ids and after.token_ids != before.token_ids


def test_models_it_does_not_cover_are_refused(tiny_llama):
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2))
    assert not static_decode.supports(gpt2)
    with pytest.raises(ValueError, match="not a Llama-architecture model"):
        static_decode.LlamaStaticDecoder(gpt2)
    dynamic = tiny_llama(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    assert not static_decode.supports(dynamic)
    assert static_decode.supports(tiny_llama())


def test_the_policy_decodes_through_it_when_asked(tiny_llama, ids_tokenizer):
    from src.agent import HFPolicy

    model = tiny_llama()
    prompts = [(p, 20) for p in PROMPTS]
    static = HFPolicy(model=model, tokenizer=ids_tokenizer, temperature=0.0, decoder="static")
    own = HFPolicy(model=model, tokenizer=ids_tokenizer, temperature=0.0)
    assert static._static is not None and own._static is None
    assert [g.token_ids for g in static.generate_batch(prompts)] == [g.token_ids for g in own.generate_batch(prompts)]
    # auto: the static decoder only on a GPU; an unknown name is refused.
    assert HFPolicy(model=model, tokenizer=ids_tokenizer, decoder="auto")._static is None
    with pytest.raises(ValueError, match="decoder must be one of hf, static, auto, got 'fast'"):
        HFPolicy(model=model, tokenizer=ids_tokenizer, decoder="fast")


def test_under_autocast_the_replies_are_the_autocast_forwards(tiny_llama):
    model = tiny_llama().float()
    decoder = static_decode.LlamaStaticDecoder(model)
    plain = decoder.generate(PROMPTS, [12] * 3, [], 0, SamplingParams(0.0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = decoder.generate(PROMPTS, [12] * 3, [], 0, SamplingParams(0.0))
    assert len(decoder._graphs) == 2  # one cache per autocast state, none reused across them
    for prompt, reply, exact in zip(PROMPTS, mixed, plain):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(input_ids=torch.tensor([prompt + reply.token_ids])).logits[0].float()
        steps = logits[len(prompt) - 1:len(prompt) + len(reply.token_ids) - 1]
        expected = torch.log_softmax(steps, -1).gather(1, torch.tensor(reply.token_ids)[:, None])[:, 0]
        assert reply.logprobs == pytest.approx(expected.tolist(), abs=0.05)  # bfloat16's precision
        assert reply.logprobs != pytest.approx(exact.logprobs, abs=1e-6)  # it did run in bfloat16
