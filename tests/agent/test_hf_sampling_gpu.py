"""The sampling loop on a GPU: the module stays where it is, the log-probs match a teacher-forced
forward in float32, and peak memory does not grow with the reply length (no [steps, V] logits)."""
import pytest

from src.agent import HFPolicy
from src.agent.sampling import SamplingParams, generate_replies, seeded_generator

pytestmark = pytest.mark.gpu
transformers = pytest.importorskip("transformers")


def test_cuda_module_is_used_in_place_and_logprobs_match_teacher_forcing(tiny_llama, ids_tokenizer):
    import torch

    module = tiny_llama().float().cuda().train()
    policy = HFPolicy(model=module, tokenizer=ids_tokenizer, temperature=1.0, seed=0)
    prompts = [[5, 9, 12, 7], [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]]
    replies = policy.generate_batch([(p, 32) for p in prompts])
    assert policy.model is module and module.training and next(module.parameters()).is_cuda
    module.eval()
    for prompt, gen in zip(prompts, replies):
        with torch.no_grad():
            logits = module(input_ids=torch.tensor([prompt + gen.token_ids], device="cuda")).logits[0].float()
        steps = logits[len(prompt) - 1:len(prompt) + len(gen.token_ids) - 1]
        expected = torch.log_softmax(steps, -1).gather(1, torch.tensor(gen.token_ids, device="cuda")[:, None])[:, 0]
        assert gen.logprobs == pytest.approx(expected.tolist(), abs=1e-4)


def test_peak_memory_does_not_grow_with_the_reply(tiny_llama):
    import torch

    vocab = 32768
    model = tiny_llama(vocab=vocab, max_position_embeddings=4096).to(torch.bfloat16).cuda()

    def peak(steps: int) -> int:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        generate_replies(model, [[5, 6, 7]] * 4, [steps] * 4, [], 0, SamplingParams(1.0),
                         seeded_generator(torch.device("cuda"), 0))
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    short, long = peak(64), peak(1024)
    kept_logits = 4 * 1024 * vocab * 4  # what keeping every step's float32 logits would cost
    assert long - short < kept_logits / 20, (short, long)
