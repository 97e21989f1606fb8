"""The static-cache decoder's CUDA-graph path: the same greedy replies and log-probs as the
model's own forward on the GPU, weights changed in place used by the captured graph, and graphs
reused across batches of one shape."""
import pytest

from src.agent import static_decode
from src.agent.sampling import SamplingParams, generate_replies

pytestmark = pytest.mark.gpu
transformers = pytest.importorskip("transformers")

PROMPTS = [[5, 9, 12, 7], [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19], [40]]


def test_graph_replies_match_the_models_own_forward_on_the_gpu(tiny_llama):
    import torch

    model = tiny_llama().float().cuda()
    decoder = static_decode.LlamaStaticDecoder(model)
    budgets = [24, 9, 30]
    ours = decoder.generate(PROMPTS, budgets, [2], 0, SamplingParams(0.0))
    theirs = generate_replies(model, PROMPTS, budgets, [2], 0, SamplingParams(0.0))
    assert [r.token_ids for r in ours] == [r.token_ids for r in theirs]
    for mine, ref in zip(ours, theirs):
        assert mine.logprobs == pytest.approx(ref.logprobs, abs=1e-4)
    assert all(graph is not None for _, graph in decoder._graphs.values())
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)  # in place: the captured graph must see it
    again = decoder.generate(PROMPTS, budgets, [2], 0, SamplingParams(0.0))
    reference = generate_replies(model, PROMPTS, budgets, [2], 0, SamplingParams(0.0))
    assert [r.token_ids for r in again] == [r.token_ids for r in reference]
    assert len(decoder._graphs) == 1  # the same shape: the same graph


def test_graphs_captured_under_autocast_read_the_current_weights(tiny_llama):
    import torch

    model = tiny_llama().float().cuda()
    decoder = static_decode.LlamaStaticDecoder(model)

    def replies():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return decoder.generate(PROMPTS, [16] * 3, [], 0, SamplingParams(0.0))

    def reference():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return generate_replies(model, PROMPTS, [16] * 3, [], 0, SamplingParams(0.0))

    first = replies()
    for mine, ref in zip(first, reference()):
        assert mine.logprobs == pytest.approx(ref.logprobs, abs=0.05)  # bfloat16's precision
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)  # a cached bfloat16 cast of the old weights would miss this
    assert [r.token_ids for r in replies()] != [r.token_ids for r in first]
