"""Token log-probs and entropies from logits, chunked or not, against direct computation."""
import math

import pytest
import torch
from torch.testing import assert_close

from src.rl import entropy_from_logits, token_logprobs

# exp([0, ln 2, ln 5]) = [1, 2, 5]: softmax = [1/8, 2/8, 5/8]
SIMPLE = torch.tensor([[[0.0, math.log(2.0), math.log(5.0)]]])


def random_logits(seed: int = 0, shape=(2, 5, 11)) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen) * 3


class TestTokenLogprobs:
    def test_hand_case_with_temperature(self):
        ids = torch.tensor([[2]])
        assert_close(token_logprobs(SIMPLE, ids), torch.tensor([[math.log(5 / 8)]]))
        # temperature 2: exp([0, ln 2, ln 5] / 2) = [1, sqrt 2, sqrt 5] -> p(2) = sqrt5 / (1 + sqrt2 + sqrt5)
        tempered = math.log(math.sqrt(5) / (1 + math.sqrt(2) + math.sqrt(5)))
        assert_close(token_logprobs(SIMPLE, ids, temperature=2.0), torch.tensor([[tempered]]))

    def test_matches_log_softmax_chunked_or_not(self):
        logits = random_logits()
        ids = torch.randint(0, 11, (2, 5), generator=torch.Generator().manual_seed(1))
        direct = torch.log_softmax(logits / 0.7, dim=-1).gather(-1, ids[..., None])[..., 0]
        for chunk in (None, 1, 3, 4, 100):
            assert_close(token_logprobs(logits, ids, temperature=0.7, chunk_size=chunk), direct)

    def test_gradients_through_chunks_match(self):
        ids = torch.randint(0, 11, (2, 5), generator=torch.Generator().manual_seed(1))
        grads = []
        for chunk in (None, 3):
            logits = random_logits().requires_grad_()
            token_logprobs(logits, ids, chunk_size=chunk).sum().backward()
            grads.append(logits.grad)
        assert_close(grads[0], grads[1])
        assert grads[0].abs().sum() > 0

    def test_bf16_logits_give_float32_logprobs(self):
        logits = random_logits().bfloat16()
        ids = torch.zeros(2, 5, dtype=torch.long)
        out = token_logprobs(logits, ids, chunk_size=4)
        assert out.dtype == torch.float32
        assert_close(out, torch.log_softmax(logits.float(), dim=-1)[..., 0])

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="must match logits"):
            token_logprobs(random_logits(), torch.zeros(2, 4, dtype=torch.long))
        with pytest.raises(ValueError, match="temperature"):
            token_logprobs(random_logits(), torch.zeros(2, 5, dtype=torch.long), temperature=0.0)
        with pytest.raises(ValueError, match="chunk_size"):
            entropy_from_logits(random_logits(), chunk_size=0)


class TestEntropyFromLogits:
    def test_hand_cases(self):
        # H = -(1/8 ln 1/8 + 2/8 ln 2/8 + 5/8 ln 5/8) = 0.2599 + 0.3466 + 0.2938 = 0.9003
        hand = -(1 / 8 * math.log(1 / 8) + 2 / 8 * math.log(2 / 8) + 5 / 8 * math.log(5 / 8))
        assert_close(entropy_from_logits(SIMPLE), torch.tensor([[hand]]))
        assert_close(entropy_from_logits(torch.zeros(1, 2, 4)), torch.full((1, 2), math.log(4)))

    def test_matches_direct_computation(self):
        logits = random_logits(seed=3)
        probs = torch.softmax(logits / 1.3, dim=-1)
        direct = -(probs * probs.log()).sum(-1)
        for chunk in (None, 2, 7):
            assert_close(entropy_from_logits(logits, temperature=1.3, chunk_size=chunk), direct)

    def test_large_logits_do_not_cancel(self):
        # Entropy is shift-invariant; with every logit near 100 the unshifted form
        # logsumexp(z) - E[z] subtracts two numbers near 100 and loses ~1e-4 in float32.
        logits = random_logits(seed=4, shape=(2, 20, 4096)) + 100.0
        logp = torch.log_softmax(logits.double(), dim=-1)
        exact = -(logp.exp() * logp).sum(-1).float()
        assert_close(entropy_from_logits(logits), exact, atol=1e-5, rtol=0)
