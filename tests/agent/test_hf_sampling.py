"""Our sampling loop (src/agent/sampling.py): the recorded log-probs are the ones of the
distribution actually sampled from, as a teacher-forced forward of the same module recomputes
them; a checkpoint's generation_config changes nothing; no per-step logits are kept; the module
being trained is used as it is. Skipped without transformers."""
import math
import weakref

import pytest

from src.agent import HFPolicy
from src.agent.sampling import SamplingParams, generate_replies, sample_tokens, seeded_generator, truncate

transformers = pytest.importorskip("transformers")
import torch  # noqa: E402

PROMPTS = [[5, 9, 12, 7], [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], [40]]


# ---------------------------------------------------------------- one step, by hand

def probs_logits(*probs):
    return torch.tensor([[math.log(p) for p in probs]], dtype=torch.float64)


def test_top_p_keeps_the_smallest_nucleus_and_renormalises():
    logits = probs_logits(0.5, 0.3, 0.2)
    kept = torch.log_softmax(truncate(logits, 0, 0.7), -1).exp()[0].tolist()
    assert kept == pytest.approx([0.625, 0.375, 0.0])  # 0.5 + 0.3 reaches 0.7; 0.2 is cut
    assert torch.log_softmax(truncate(logits, 0, 0.5), -1).exp()[0].tolist() == pytest.approx([1.0, 0.0, 0.0])
    assert torch.log_softmax(truncate(logits, 2, 1.0), -1).exp()[0].tolist() == pytest.approx([0.625, 0.375, 0.0])


def test_sampled_logprob_is_the_truncated_renormalised_one():
    logits = probs_logits(0.5, 0.3, 0.2).repeat(4000, 1)
    ids, logps = sample_tokens(logits, SamplingParams(1.0, 0.7, 0), seeded_generator("cpu", 0))
    assert set(ids.tolist()) == {0, 1}  # token 2 is outside the nucleus: never drawn
    expected = {0: math.log(0.625), 1: math.log(0.375)}
    assert logps.tolist() == pytest.approx([expected[i] for i in ids.tolist()])
    assert (ids == 0).double().mean().item() == pytest.approx(0.625, abs=0.03)


def test_temperature_scales_before_the_softmax_and_greedy_records_t1():
    logits = torch.tensor([[2.0, 0.0]], dtype=torch.float64)
    ids, logps = sample_tokens(logits.repeat(8, 1), SamplingParams(2.0), seeded_generator("cpu", 1))
    p0 = math.exp(1.0) / (math.exp(1.0) + 1.0)  # softmax([2, 0] / 2)
    assert logps.tolist() == pytest.approx([math.log(p0) if i == 0 else math.log(1 - p0) for i in ids.tolist()])
    ids, logps = sample_tokens(logits, SamplingParams(0.0), None)
    assert ids.tolist() == [0] and logps.item() == pytest.approx(math.log(math.exp(2.0) / (math.exp(2.0) + 1.0)))


# ---------------------------------------------------------------- whole replies vs teacher forcing

def teacher_forced(model, prompt, reply, params: SamplingParams):
    """One forward over prompt + reply; the reply tokens' log-probs under ``params``."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + reply])).logits[0]
    steps = logits[len(prompt) - 1:len(prompt) + len(reply) - 1]
    logp = torch.log_softmax(truncate(steps / params.temperature, params.top_k, params.top_p), -1)
    return logp.gather(1, torch.tensor(reply)[:, None])[:, 0].tolist()


@pytest.mark.parametrize("params", [SamplingParams(1.0), SamplingParams(0.7, 0.9, 8)], ids=["plain", "truncated"])
def test_recorded_logprobs_equal_a_teacher_forced_forward(tiny_llama, ids_tokenizer, params):
    # Dropout is on in train mode: the policy must generate in eval mode, then give train mode back.
    module = tiny_llama(attention_dropout=0.5).train()
    module.model.layers[0].eval()
    modes = [m.training for m in module.modules()]
    policy = HFPolicy(model=module, tokenizer=ids_tokenizer, temperature=params.temperature, top_p=params.top_p,
                      top_k=params.top_k, seed=0)
    alone = policy.generate([], PROMPTS[1], 16)
    batch = policy.generate_batch([(ids, 16) for ids in PROMPTS])  # left-padded, prompts of 4, 11 and 1 ids
    assert policy.model is module and [m.training for m in module.modules()] == modes
    module.eval()
    for prompt, gen in [(PROMPTS[1], alone), *zip(PROMPTS, batch)]:
        assert len(gen.token_ids) == len(gen.logprobs) >= 1
        assert gen.logprobs == pytest.approx(teacher_forced(module, prompt, gen.token_ids, params), abs=1e-9)
    assert len({tuple(g.token_ids) for g in batch}) == 3  # really sampled, not one reply thrice


def test_a_checkpoints_generation_config_does_not_change_the_distribution(tiny_llama, ids_tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM

    model = tiny_llama()
    model.save_pretrained(tmp_path / "plain")
    model.generation_config.repetition_penalty = 5.0
    model.generation_config.no_repeat_ngram_size = 2
    model.save_pretrained(tmp_path / "penalised")
    plain, penalised = (AutoModelForCausalLM.from_pretrained(tmp_path / name, dtype=torch.float64)
                        for name in ("plain", "penalised"))
    assert penalised.generation_config.repetition_penalty == 5.0
    prompt = torch.tensor([PROMPTS[0]])
    # The setting is real: transformers' generate honours it.
    greedy = [m.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=24,
                         pad_token_id=0)[0].tolist() for m in (plain, penalised)]
    assert greedy[0] != greedy[1]
    replies = [HFPolicy(model=m, tokenizer=ids_tokenizer, temperature=1.0, seed=7).generate([], PROMPTS[0], 24)
               for m in (plain, penalised)]
    assert replies[0].token_ids == replies[1].token_ids
    assert replies[0].logprobs == pytest.approx(replies[1].logprobs, abs=1e-12)


def test_no_step_keeps_its_logits(tiny_llama):
    """Only [B] ids and log-probs survive a step: at each forward, no earlier step's logits are
    still alive (generate(output_logits=True) would keep all of them, [steps, V] per row)."""
    model = tiny_llama(vocab=2048)
    alive, outputs, shapes = [], [], []

    def hook(module, inputs, output):
        alive.append(sum(ref() is not None for ref in outputs))
        outputs.append(weakref.ref(output))
        shapes.append(tuple(output.shape))

    handle = model.lm_head.register_forward_hook(hook)
    try:
        replies = generate_replies(model, PROMPTS[:2], [48, 48], stop_ids=[], pad_id=0,
                                   params=SamplingParams(1.0), generator=seeded_generator("cpu", 0))
    finally:
        handle.remove()
    assert len(outputs) == 48 and max(alive) == 0
    for reply in replies:
        assert len(reply.token_ids) == len(reply.logprobs) == 48 and reply.finish_reason == "length"
        assert all(type(i) is int for i in reply.token_ids) and all(type(x) is float for x in reply.logprobs)
    assert shapes[0] == (2, 1, 2048)  # the prefill computed the last position's logits only


def test_each_row_stops_at_its_own_stop_id(tiny_llama):
    model = tiny_llama()
    params, generator = SamplingParams(0.0), seeded_generator("cpu", 0)
    free = generate_replies(model, [PROMPTS[0]], [10], [], 0, params, generator)[0].token_ids
    stop = free[3]  # the 4th greedy token: the row must end there
    cut, other = generate_replies(model, [PROMPTS[0], PROMPTS[2]], [10, 10], [stop], 0, params, generator)
    assert cut.token_ids == free[:free.index(stop) + 1] and cut.finish_reason == "stop"
    assert len(other.token_ids) == 10 or other.finish_reason == "stop"
