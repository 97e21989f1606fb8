"""A tiny randomly initialised HF causal LM runs whole episodes (skipped without transformers)."""
import asyncio

import pytest

from src.agent import AgentConfig, HFPolicy, run_episode
from src.agent.trajectory import render_ids

transformers = pytest.importorskip("transformers")


def tiny_policy(tokenizer, temperature):
    from transformers import GPT2Config, GPT2LMHeadModel

    eos = tokenizer.eos_token_id
    config = GPT2Config(vocab_size=tokenizer.vocab_size, n_positions=8192, n_embd=16, n_layer=1, n_head=2,
                        bos_token_id=eos, eos_token_id=eos)
    return HFPolicy(model=GPT2LMHeadModel(config), tokenizer=tokenizer, temperature=temperature, seed=0,
                    version=5)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_tiny_random_model_runs_whole_episodes(small_task, agent_pool, chat_tokenizer, temperature):
    policy = tiny_policy(chat_tokenizer, temperature)
    cfg = AgentConfig(max_turns=3, max_new_tokens_per_turn=12, max_consecutive_invalid=10)
    traj = asyncio.run(run_episode(small_task, policy, agent_pool, cfg, backend="cpu", reward="graduated"))
    assert traj.stop_reason == "max_turns", traj.stop_detail
    assert len(traj.turns) == 3 and traj.has_logprobs
    assert traj.sampling == {"temperature": temperature, "top_p": 1.0, "top_k": 0}
    assert traj.policy_version == [5, 5] and [t.policy_version for t in traj.turns] == [5, 5, 5]
    for turn in traj.turns:
        start, end = turn.gen_span
        assert 1 <= end - start <= 12
        assert all(lp <= 0.0 for lp in traj.ledger.logprobs[start:end])
    from src.agent.tools import tool_schemas

    expected = render_ids(chat_tokenizer, traj.messages, tool_schemas(list(cfg.tools)), add_generation_prompt=False)
    assert traj.ledger.token_ids == expected


def test_a_row_records_the_versions_its_turns_were_generated_with(small_task, agent_pool, chat_tokenizer):
    """Weights updated while an episode runs (asynchronous training): each turn keeps its own
    version, the row the first and the last."""
    policy = tiny_policy(chat_tokenizer, 1.0)
    generate = policy.generate

    def generate_then_update(*args):
        gen = generate(*args)
        policy.set_version(policy.version + 1)
        return gen

    policy.generate = generate_then_update
    cfg = AgentConfig(max_turns=3, max_new_tokens_per_turn=4, max_consecutive_invalid=10)
    traj = asyncio.run(run_episode(small_task, policy, agent_pool, cfg, backend="cpu", reward="graduated"))
    assert [t.policy_version for t in traj.turns] == [5, 6, 7] and traj.policy_version == [5, 7]
