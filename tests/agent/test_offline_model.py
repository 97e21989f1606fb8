"""The offline chat tokenizer is a real ``transformers`` tokenizer whose chat template reproduces,
token for token, the ids an episode builds incrementally (prompt, sampled replies, tool-result
tails); and the pieces behaviour cloning is made of. Skipped without transformers."""
import asyncio
import json

import pytest

from src.agent import AgentConfig, ScriptedPolicy, parse_tool_calls, run_episode
from src.agent.offline_model import (CHAT_TEMPLATE, behaviour_clone, build_chat_tokenizer, chat_corpus,
                                     cloning_loss, common_prefix, expert_replies, pad_batch, save_policy,
                                     small_model_config)
from src.agent.tools import tool_schemas
from src.agent.trajectory import render_ids

transformers = pytest.importorskip("transformers")


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


REPLIES = [
    "Let me look around first.\n" + call("list_files"),
    # Two calls in one reply: two tool turns follow it; the kernel text is not in the corpus.
    call("read_file", path="model.py") + "\n" + call("write_file", path="kernels/k.cpp", content="int k = 42;\n"),
    '<tool_call>{"name": "compile"</tool_call>',  # malformed: an error observation, counted
    "Done \u2014 the workspace is final. \u2713\n" + call("finish"),  # non-ASCII text, multi-byte tokens
]


@pytest.fixture(scope="module")
def bpe_tokenizer(small_task):
    corpus = chat_corpus([], AgentConfig(), "cpu") + [small_task.read_text()] + REPLIES[:1]
    return build_chat_tokenizer(corpus, vocab_size=1024)


@pytest.fixture(scope="module")
def scripted_trajectory(small_task, agent_pool, bpe_tokenizer):
    policy = ScriptedPolicy(REPLIES, tokenizer=bpe_tokenizer)
    return asyncio.run(run_episode(small_task, policy, agent_pool, AgentConfig(), backend="cpu", reward="graduated"))


def test_tokenizer_is_a_real_fast_tokenizer_with_the_chat_markers(bpe_tokenizer):
    assert isinstance(bpe_tokenizer, transformers.PreTrainedTokenizerFast)
    assert bpe_tokenizer.eos_token == "<|im_end|>" and bpe_tokenizer.pad_token == "<|endoftext|>"
    for marker in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>"):
        assert len(bpe_tokenizer.encode(marker, add_special_tokens=False)) == 1, marker
    text = "x = \"caf\u00e9\"\n\tint  y;  // \u2713"
    assert bpe_tokenizer.decode(bpe_tokenizer.encode(text, add_special_tokens=False)) == text


def test_episode_ids_equal_apply_chat_template_of_the_final_history(scripted_trajectory, bpe_tokenizer):
    traj = scripted_trajectory
    assert traj.stop_reason == "finish", traj.stop_detail
    assert traj.invalid_tool_calls == 1 and len(traj.turns) == len(REPLIES)
    tools = tool_schemas(list(AgentConfig().tools))
    out = bpe_tokenizer.apply_chat_template(traj.messages, tools=tools, tokenize=True, return_dict=False)
    ids = list(out["input_ids"] if hasattr(out, "keys") else out)
    assert traj.ledger.token_ids == ids == render_ids(bpe_tokenizer, traj.messages, tools, False)
    text = bpe_tokenizer.apply_chat_template(traj.messages, tools=tools, tokenize=False)
    assert bpe_tokenizer.decode(ids) == text
    # The schemas are in the system turn; each tool result is its own tool turn.
    assert '<tools>\n{"type": "function", "function": {"name": "list_files"' in text
    assert text.count("<|im_start|>tool\n<tool_response>\n") == sum(m["role"] == "tool" for m in traj.messages) == 4
    assert "<tool_response>\n[write_file] wrote kernels/k.cpp (1 lines)\n</tool_response>" in text


def test_loss_mask_covers_exactly_the_replies_and_their_end_of_turn(scripted_trajectory, bpe_tokenizer):
    traj = scripted_trajectory
    generated = [i for t in traj.turns for i in range(*t.gen_span)]
    assert [i for i, m in enumerate(traj.ledger.loss_mask) if m] == generated
    for turn, reply in zip(traj.turns, REPLIES):
        assert bpe_tokenizer.decode(traj.ledger.token_ids[slice(*turn.gen_span)]) == reply + "<|im_end|>"


def test_saved_tokenizer_loads_by_path_and_renders_the_same(scripted_trajectory, bpe_tokenizer, tmp_path):
    from transformers import AutoTokenizer, LlamaForCausalLM

    model = LlamaForCausalLM(small_model_config(bpe_tokenizer, "tiny", max_positions=4096))
    save_policy(model, bpe_tokenizer, tmp_path / "policy")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "policy")
    assert loaded.chat_template == CHAT_TEMPLATE and loaded.eos_token_id == bpe_tokenizer.eos_token_id
    tools = tool_schemas(list(AgentConfig().tools))
    assert render_ids(loaded, scripted_trajectory.messages, tools, False) == scripted_trajectory.ledger.token_ids
    config = transformers.AutoConfig.from_pretrained(tmp_path / "policy")
    assert config.vocab_size == len(bpe_tokenizer) and config.eos_token_id == bpe_tokenizer.eos_token_id


def test_openai_style_tool_calls_render_as_calls_the_parser_reads(bpe_tokenizer):
    message = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "read_file", "arguments": {"path": "model.py"}}},
        {"type": "function", "function": {"name": "verify", "arguments": "{}"}}]}
    text = bpe_tokenizer.apply_chat_template([{"role": "user", "content": "go"}, message], tokenize=False)
    reply = text.split("<|im_start|>assistant\n", 1)[1].split("<|im_end|>")[0]
    parsed = parse_tool_calls(reply)
    assert parsed.errors == [] and [(c.name, c.arguments) for c in parsed.calls] == [
        ("read_file", {"path": "model.py"}), ("verify", {})]


def test_expert_replies_write_every_file_then_compile_verify_profile_finish(example_paths):
    workspace = example_paths.cpu_solutions / "relu_add_workspace"
    calls = [parse_tool_calls(reply).calls for reply in expert_replies(workspace)]
    assert all(len(c) == 1 for c in calls)
    names = [c[0].name for c in calls]
    assert names == ["write_file"] * 3 + ["compile", "verify", "profile", "finish"]
    written = {c[0].arguments["path"]: c[0].arguments["content"] for c in calls[:3]}
    assert written == {"kernels/relu_add.cpp": (workspace / "kernels" / "relu_add.cpp").read_text(),
                       "kernels/relu_add_binding.cpp": (workspace / "kernels" / "relu_add_binding.cpp").read_text(),
                       "model_new.py": (workspace / "model_new.py").read_text()}


def test_pad_batch_labels_only_the_masked_tokens():
    ids, labels, attention = pad_batch([([5, 6, 7, 8], [0, 1, 1, 0]), ([9, 10], [1, 1])], pad_id=0, device="cpu")
    assert ids.tolist() == [[5, 6, 7, 8], [9, 10, 0, 0]]
    assert labels.tolist() == [[-100, 6, 7, -100], [9, 10, -100, -100]]
    assert attention.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]


def cloning_example(tokenizer):
    """A prompt, unmasked filler and a masked reply, as an episode's ledger lays them out."""
    import torch

    prompt = tokenizer.encode("<|im_start|>user\nwrite it<|im_end|>\n<|im_start|>assistant\n")
    reply = tokenizer.encode(REPLIES[0] + "<|im_end|>")
    filler = torch.randint(10, len(tokenizer), (40,), generator=torch.Generator().manual_seed(0)).tolist()
    ids = prompt + filler + prompt + reply
    return ids, [0] * (len(ids) - len(reply)) + [1] * len(reply), reply


def test_cloning_loss_is_the_mean_over_the_masked_tokens_only(bpe_tokenizer):
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(small_model_config(bpe_tokenizer, "tiny", max_positions=512))
    ids, mask, reply = cloning_example(bpe_tokenizer)
    loss = behaviour_clone(model, [(ids, mask)], bpe_tokenizer.pad_token_id, steps=1, lr=0.0, progress=False)[0]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    targets = [t for t in range(1, len(ids)) if mask[t]]  # token t is predicted from position t - 1
    expected = torch.nn.functional.cross_entropy(logits[[t - 1 for t in targets]], torch.tensor(ids)[targets])
    assert len(targets) == len(reply) and loss == pytest.approx(expected.item(), rel=1e-4)


def test_mask_entries_above_one_weigh_their_tokens_more(bpe_tokenizer):
    # make_family_actor's --body-weight: the chain body's few tokens decide what a kernel computes.
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(small_model_config(bpe_tokenizer, "tiny", max_positions=512)).double()
    ids, mask, reply = cloning_example(bpe_tokenizer)
    other = ids[:30] + [int(t) for t in torch.randint(10, len(bpe_tokenizer), (25,))]
    weighted = list(mask)
    weighted[-3:] = [10, 10, 10]  # the reply's last three tokens
    batch = [(ids, weighted), (other, [0] * 40 + [1] * 10 + [4] * 5)]
    loss = cloning_loss(model, batch, bpe_tokenizer.pad_token_id, "cpu")
    nll, weights = [], []
    with torch.no_grad():
        for row_ids, row_mask in batch:
            logits = model(input_ids=torch.tensor([row_ids])).logits[0]
            for t in range(1, len(row_ids)):  # token t is predicted from position t - 1
                if row_mask[t]:
                    nll.append(torch.nn.functional.cross_entropy(logits[t - 1], torch.tensor(row_ids[t])))
                    weights.append(row_mask[t])
    nll, weights = torch.stack(nll), torch.tensor(weights, dtype=torch.float64)
    expected = (nll * weights).sum() / weights.sum()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-8)
    assert abs(expected.item() - nll.mean().item()) > 1e-3  # the weights change the loss
    with pytest.raises(ValueError, match="mask entries must be >= 0"):
        pad_batch([(ids, [-1] + mask[1:])], bpe_tokenizer.pad_token_id, "cpu")


def test_the_shared_prefix_loss_has_the_gradients_of_a_plain_forward(bpe_tokenizer):
    """cloning_loss runs the rows' common prefix once and the LM head only on labels: the loss
    and every gradient equal those of a plain forward over the padded rows."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(small_model_config(bpe_tokenizer, "tiny", max_positions=512)).double()
    ids, mask, _ = cloning_example(bpe_tokenizer)
    other = ids[:30] + [int(t) for t in torch.randint(10, len(bpe_tokenizer), (25,))]
    batch = [(ids, mask), (other, [0] * 40 + [1] * 15)]
    assert common_prefix([ids, other]) >= 30
    loss = cloning_loss(model, batch, bpe_tokenizer.pad_token_id, "cpu")
    loss.backward()
    fast = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    padded, labels, attention = pad_batch(batch, bpe_tokenizer.pad_token_id, "cpu")
    logits = model(input_ids=padded, attention_mask=attention).logits  # float64 (HF's loss would cast to float32)
    plain = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
    plain.backward()
    assert loss.item() == pytest.approx(plain.item(), abs=1e-10)
    for name, p in model.named_parameters():  # CPU attention kernels differ by ~1e-8 among themselves
        assert torch.allclose(fast[name], p.grad, rtol=1e-5, atol=1e-7), name


def test_behaviour_cloning_reproduces_the_reply(bpe_tokenizer):
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(small_model_config(bpe_tokenizer, "tiny", max_positions=512))
    ids, mask, reply = cloning_example(bpe_tokenizer)
    losses = behaviour_clone(model, [(ids, mask)], bpe_tokenizer.pad_token_id, steps=60, lr=1e-2, progress=False)
    assert losses[-1] < 0.05 < losses[0]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    assert logits[len(ids) - len(reply) - 1:-1].argmax(-1).tolist() == reply  # token for token, teacher-forced


def test_behaviour_cloning_fits_its_schedule_to_a_time_budget(bpe_tokenizer, monkeypatch):
    """With time_budget_s the run takes the steps that fit (here: a clock that advances 1 s a
    step, so 10 of the 1,000 asked for) and its learning rate still ends annealed."""
    import itertools

    import torch
    from transformers import LlamaForCausalLM

    from src.agent import offline_model

    clock = itertools.count()
    monkeypatch.setattr(offline_model.time, "monotonic", lambda: float(next(clock)))
    lrs = []
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda self, *a, **k: lrs.append(self.param_groups[0]["lr"]))
    torch.manual_seed(0)
    model = LlamaForCausalLM(small_model_config(bpe_tokenizer, "tiny", max_positions=512))
    ids, mask, _ = cloning_example(bpe_tokenizer)
    losses = behaviour_clone(model, [(ids, mask)], bpe_tokenizer.pad_token_id, steps=1000, lr=1e-2,
                             progress=False, time_budget_s=10.0)
    assert len(losses) == 10
    assert lrs[-1] < 0.2 * max(lrs)  # the cosine reached (near) its floor of 0.1 x lr by the last step


class NonCanonicalPolicy:
    """Replies with ids that decode to the right text but are not how the tokenizer would encode
    it (one id per character instead of the merged tokens), as a sampled model may."""

    reports_logprobs = False
    name = "non-canonical"

    def __init__(self, tokenizer, text: str):
        self.tokenizer, self.text = tokenizer, text

    def generate(self, messages, prompt_ids, max_new_tokens):
        from src.agent.policies import Generation

        ids = [self.tokenizer.encode(ch, add_special_tokens=False)[0] for ch in self.text]
        assert ids != self.tokenizer.encode(self.text, add_special_tokens=False)  # really non-canonical
        return Generation(self.text, ids + [self.tokenizer.eos_token_id], None, "stop")


def test_non_canonical_sampled_ids_are_kept_as_they_were_sampled(small_task, agent_pool, bpe_tokenizer):
    """A model may sample a split of its text that the tokenizer would never produce; those ids
    are the ones training must see, so they stay, followed by the template's closing alone."""
    policy = NonCanonicalPolicy(bpe_tokenizer, "Let me look around first.")
    traj = asyncio.run(run_episode(small_task, policy, agent_pool, AgentConfig(max_turns=1), backend="cpu",
                                   reward="graduated"))
    assert traj.stop_reason == "max_turns", (traj.stop_reason, traj.stop_detail)
    tools = tool_schemas(list(AgentConfig().tools))
    sampled = [bpe_tokenizer.encode(ch, add_special_tokens=False)[0] for ch in policy.text]
    prompt = render_ids(bpe_tokenizer, traj.messages[:2], tools, True)
    closing = bpe_tokenizer.encode("\n", add_special_tokens=False)  # after <|im_end|>, which was sampled
    assert traj.ledger.token_ids == prompt + sampled + [bpe_tokenizer.eos_token_id] + closing
    assert render_ids(bpe_tokenizer, traj.messages, tools, False) != traj.ledger.token_ids  # a re-render differs
    text = bpe_tokenizer.apply_chat_template(traj.messages, tools=tools, tokenize=False)
    assert bpe_tokenizer.decode(traj.ledger.token_ids) == text  # the same text, other ids
