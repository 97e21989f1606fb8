"""A small chat policy made entirely offline, for exercising the real agent loop where no
pretrained weights can be reached (the GPU hosts have no network and no model files).

    tokenizer = build_chat_tokenizer(chat_corpus(pairs, cfg, "cuda"), vocab_size=4096)
    demos = [await expert_episode(task, solution, tokenizer, pool, cfg, "cuda", reward="graduated") for ...]
    model = LlamaForCausalLM(small_model_config(tokenizer, "small"))
    examples = [(d.ledger.token_ids, d.ledger.loss_mask) for d in demos]
    behaviour_clone(model, examples, tokenizer.pad_token_id, steps=500, lr=5e-3, target_loss=0.005)
    save_policy(model, tokenizer, out_dir)          # then HFPolicy(out_dir) like any HF model

What it is: a byte-level BPE tokenizer trained on the episodes' own text, wrapped as a real
``transformers`` tokenizer with a Jinja chat template (tools, tagged tool calls, tool results),
and a few-million-parameter causal LM behaviour-cloned on scripted expert episodes that ran
through the real sandbox. What it is not: a capable model. It replays what it was shown for the
tasks it was shown; its use is to drive whole multi-turn episodes (generation, tool calls,
builds, verification, timing) at realistic token counts.
"""
from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from sandbox.pool import EvalRequest, PoolClient
from sandbox.solution import read_solution

from .episode import AgentConfig, run_episode, system_prompt, task_prompt
from .policies import ScriptedPolicy
from .sampling import cache_keyword
from .toolcall import ToolCall, format_tool_call
from .tools import tool_schemas
from .trajectory import Trajectory
from .workspace import Workspace

IM_START, IM_END, END_OF_TEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
# Atomic but not "special": a decode that skips special tokens still shows the calls.
TOOL_TAGS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>")

# ChatML-style turns. Every message renders on its own (no grouping of consecutive tool results),
# so the rendering of a history is always a prefix of the rendering of any longer history: the
# property the episode's token ledger relies on (trajectory.py). Assistant content is rendered
# verbatim: this project's replies carry their calls inline as <tool_call>{json}</tool_call>;
# OpenAI-style ``tool_calls`` fields are rendered in that same form. Tool results are their own
# "tool" turns, wrapped in <tool_response>. The schemas passed as ``tools=`` go into the system turn.
CHAT_TEMPLATE = (
    "{%- if tools and (not messages or messages[0].role != 'system') -%}"
    "{{- '<|im_start|>system\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}"
    "{{- '\\n</tools><|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' -%}"
    "{{- '<|im_start|>system\\n' + message.content -}}"
    "{%- if tools -%}"
    "{{- '\\n\\nTool schemas:\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}"
    "{{- '\\n</tools>' -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'tool' -%}"
    "{{- '<|im_start|>tool\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' -}}"
    "{%- elif message.role == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' + (message.content or '') -}}"
    "{%- for call in message.tool_calls or [] -%}"
    "{%- set fn = call.function if call.function is defined else call -%}"
    "{%- set args = fn.arguments | tojson if fn.arguments is mapping else fn.arguments -%}"
    "{{- '<tool_call>\\n{\"name\": ' + (fn.name | tojson) + ', \"arguments\": ' + args + '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# name: (hidden, layers, heads, intermediate). tiny: CPU tests; actor: the embedded default actor
# (data/models/tiny_actor, a few MB); small: one GPU in minutes.
MODEL_SIZES = {"tiny": (64, 2, 4, 192), "actor": (128, 2, 4, 384), "small": (256, 4, 8, 768),
               "base": (512, 8, 8, 1536)}


# ---------------------------------------------------------------------- tokenizer

def build_chat_tokenizer(corpus_texts: Iterable[str], vocab_size: int = 4096) -> Any:
    """A byte-level BPE (GPT-2 style pre-tokenisation, so any text encodes and decoding is
    lossless) trained on ``corpus_texts``, as a ``transformers.PreTrainedTokenizerFast`` with
    the chat markers, the tool tags and CHAT_TEMPLATE. ``<|im_end|>`` ends a turn (eos)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=[END_OF_TEXT, IM_START, IM_END],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(list(corpus_texts), trainer)
    bpe.add_tokens([AddedToken(tag, normalized=False) for tag in TOOL_TAGS])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=IM_END, pad_token=END_OF_TEXT,
                                   chat_template=CHAT_TEMPLATE, clean_up_tokenization_spaces=False)


def chat_corpus(pairs: Sequence[tuple[Path, Path]], cfg: AgentConfig, backend: str) -> list[str]:
    """What the episodes will say, known before any runs: the system prompt (SKILL.md and the
    tool list), the rendered tool schemas, each task's prompt and the expert's replies."""
    texts = [json.dumps(schema, ensure_ascii=False) for schema in tool_schemas(list(cfg.tools))]
    workspace = Workspace.create("", backend)
    try:
        texts.append(system_prompt(workspace, cfg))
    finally:
        workspace.cleanup()
    for task, solution in pairs:
        texts.append(task_prompt(Path(task).read_text(encoding="utf-8"), cfg))
        texts.extend(expert_replies(solution))
    return texts


# ---------------------------------------------------------------------- demonstrations

def expert_replies(solution: Path) -> list[str]:
    """The expert's turns for a known solution: one write_file per file (kernels first), then
    compile, verify, profile and finish, one call per turn, in the form toolcall.py parses."""
    sol = read_solution(solution)
    files = {f"kernels/{name}": data.decode("utf-8") for name, data in sorted(sol.kernel_files.items())}
    files["model_new.py"] = sol.model_new_source
    calls = [ToolCall("write_file", {"path": path, "content": text}) for path, text in files.items()]
    calls += [ToolCall(name, {}) for name in ("compile", "verify", "profile", "finish")]
    return [format_tool_call(call) for call in calls]


async def expert_episode(task: Path, solution: Path, tokenizer: Any, pool: PoolClient, cfg: AgentConfig,
                         backend: str, *, reward: str, episode_id: str = "") -> Trajectory:
    """A real episode (real workspace, tools and sandbox) driven by the scripted expert: its
    ``messages`` are the demonstration conversation with real observations, and its token
    ledger (ids + loss mask, built with ``tokenizer``'s template) is the training example."""
    policy = ScriptedPolicy(expert_replies(solution), tokenizer=tokenizer, name="expert")
    return await run_episode(task, policy, pool, cfg, backend, reward=reward, episode_id=episode_id)


async def demonstrations(pairs: Sequence[tuple[Path, Path]], tokenizer: Any, pool: PoolClient, cfg: AgentConfig,
                         backend: str, *, reward: str, rounds: int = 1,
                         on_episode: Optional[Callable[[], None]] = None) -> list[tuple[int, Trajectory]]:
    """(index into ``pairs``, expert trajectory), ``rounds`` per (task, solution) pair: pairs at
    once, rounds one after another (repeated rounds show the same steps under other observed
    numbers, i.e. timings). Every solution is built once first (build only, no device lane), so
    the demonstrations see the compile observation later episodes will see for the same files
    ("cached build"): a model shown only fresh-build timings stumbles on it."""
    await asyncio.gather(*(pool.evaluate(EvalRequest(f"prebuild-{i}", Path(task), Path(solution), "build"))
                           for i, (task, solution) in enumerate(pairs)))

    async def one(i: int, round_: int) -> tuple[int, Trajectory]:
        task, solution = pairs[i]
        traj = await expert_episode(Path(task), Path(solution), tokenizer, pool, cfg, backend, reward=reward,
                                    episode_id=f"expert{round_}-{i}-{Path(task).stem}")
        if on_episode is not None:
            on_episode()
        return i, traj

    demos: list[tuple[int, Trajectory]] = []
    for round_ in range(rounds):
        demos += await asyncio.gather(*(one(i, round_) for i in range(len(pairs))))
    return demos


def demonstrated_correctly(traj: Trajectory) -> bool:
    """A demonstration worth cloning: it finished and its final verdict is correct."""
    return traj.stop_reason == "finish" and bool((traj.final_measurement or {}).get("correct"))


# ---------------------------------------------------------------------- model and training

def small_model_config(tokenizer: Any, size: str = "small", max_positions: int = 16384) -> Any:
    """A Llama config (RoPE, RMSNorm, SwiGLU) of one of MODEL_SIZES over the tokenizer's vocab,
    its end-of-turn token as eos so generation stops where a turn ends."""
    from transformers import LlamaConfig

    if size not in MODEL_SIZES:
        raise ValueError(f"model size must be one of {sorted(MODEL_SIZES)}, got {size!r}")
    hidden, layers, heads, intermediate = MODEL_SIZES[size]
    return LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=heads, intermediate_size=intermediate,
                       max_position_embeddings=max_positions, tie_word_embeddings=True,
                       eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                       bos_token_id=tokenizer.pad_token_id)


def behaviour_clone(model: Any, examples: Sequence[tuple[list[int], list[int]]], pad_id: int, steps: int,
                    lr: float = 1e-2, device: str = "cpu", target_loss: float = 0.0, batch_size: int = 0,
                    progress: bool = True, time_budget_s: float = 0.0, bf16: bool = False) -> list[float]:
    """Teacher forcing on the demonstrations' own (token_ids, loss_mask): the loss counts only
    the tokens the policy generated (mask > 0, end-of-turn included), so the model learns to act,
    never to imitate observations or prompts; a mask entry above 1 weighs its token more. Each step takes ``batch_size`` demonstrations at
    random (0: all of them); AdamW, warm-up then cosine decay; stops early once a step's loss is
    below ``target_loss``. ``time_budget_s`` > 0: at most that many seconds, the cosine fitted to
    the steps that fit (re-estimated from the mean step time after every step), so a budgeted
    run still ends annealed. ``bf16``: the forward under bfloat16 autocast on CUDA (fp32 weights
    and optimizer). Returns the loss of every step."""
    import torch
    from tqdm import tqdm

    pad_batch(examples, pad_id, "cpu")  # every example is well formed, before any step
    batch = batch_size if 0 < batch_size < len(examples) else len(examples)
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    total = [steps]  # the steps this run will take: shrinks to fit time_budget_s

    def factor(step: int) -> float:  # warm-up (a tenth of the run, at most 20 steps), then cosine
        return min((step + 1) / max(1, min(20, total[0] // 10)), cosine(step, total[0]))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16 and str(device).startswith("cuda"))
    losses: list[float] = []
    bar = tqdm(total=steps, desc="behaviour cloning", unit="step", disable=not progress)
    start = time.monotonic()
    while len(losses) < total[0]:
        rows = torch.randperm(len(examples))[:batch].tolist()
        with autocast:
            loss = cloning_loss(model, [examples[i] for i in rows], pad_id, device)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        bar.update()
        bar.set_postfix(loss=f"{losses[-1]:.4f}")
        if losses[-1] < target_loss:
            break
        if time_budget_s > 0:
            per_step = (time.monotonic() - start) / len(losses)
            total[0] = max(len(losses), min(steps, int(time_budget_s / per_step)))
    bar.close()
    model.eval()
    return losses


def cloning_loss(model: Any, batch: Sequence[tuple[list[int], list[int]]], pad_id: int, device: str) -> Any:
    """The mean cross-entropy of the batch's generated tokens (mask > 0, each weighted by its mask
    entry), each predicted from the ids before it: with 0/1 masks, what ``model(input_ids,
    labels=...)`` computes, at less cost. The ids every row starts with (the system prompt, most
    of a demonstration's tokens) run once for the whole batch and their KV cache is shared by the
    rows (gradients flow through it: the same gradients as a forward of every row); the LM head
    runs only where a label is."""
    import torch

    first_label = min(next(i for i, w in enumerate(mask) if w > 0) for _, mask in batch)
    shared = min(common_prefix([ids for ids, _ in batch]), first_label - 1)
    decoder, head, cache_name = model.get_decoder(), model.get_output_embeddings(), cache_keyword(model)
    ids, labels, attention = pad_batch([(i[shared:], m[shared:]) for i, m in batch], pad_id, device)
    length = int(attention.sum(dim=1).max())  # no step pays for padding beyond its longest row
    ids, labels, attention = ids[:, :length], labels[:, :length], attention[:, :length]
    inputs: dict[str, Any] = {}
    if shared > 0:
        prefix = decoder(input_ids=torch.tensor([batch[0][0][:shared]], device=device), use_cache=True)
        cache = getattr(prefix, "cache", None)
        cache = prefix.past_key_values if cache is None else cache
        cache.batch_repeat_interleave(len(batch))
        inputs = {cache_name: cache, "use_cache": True}
    positions = (shared + torch.arange(length, device=device)).expand(len(batch), -1)
    hidden = decoder(input_ids=ids, attention_mask=torch.cat([attention.new_ones(len(batch), shared), attention], 1),
                     position_ids=positions, **inputs).last_hidden_state
    targets = labels[:, 1:]
    keep = targets != -100
    logits = head(hidden[:, :-1][keep])
    nll = torch.nn.functional.cross_entropy(logits if logits.element_size() >= 4 else logits.float(), targets[keep],
                                            reduction="none")
    weights = torch.tensor([w for _, m in batch for w in m[shared + 1:] if w > 0], dtype=nll.dtype, device=device)
    return (nll * weights).sum() / weights.sum()


def common_prefix(rows: Sequence[list[int]]) -> int:
    """How many leading ids all rows share."""
    first = rows[0]
    n = min(len(r) for r in rows)
    for row in rows[1:]:
        n = next((i for i, (a, b) in enumerate(zip(first[:n], row[:n])) if a != b), n)
    return n


def cosine(step: int, steps: int, floor: float = 0.1) -> float:
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(step, steps) / max(steps, 1)))


def pad_batch(examples: Sequence[tuple[list[int], list[int]]], pad_id: int, device: str):
    """Right-padded ids, labels (-100 where the mask is 0: HF's ignore index) and attention mask."""
    import torch

    if not examples:
        raise ValueError("behaviour cloning needs at least one demonstration")
    length = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), length), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), length), -100, dtype=torch.long)
    attention = torch.zeros((len(examples), length), dtype=torch.long)
    for row, (tokens, mask) in enumerate(examples):
        if len(tokens) != len(mask):
            raise ValueError(f"demonstration {row}: {len(tokens)} ids but {len(mask)} mask entries")
        if min(mask, default=0) < 0 or max(mask, default=0) <= 0:
            raise ValueError(f"demonstration {row}: mask entries must be >= 0 (a token's weight), some > 0")
        n = len(tokens)
        ids[row, :n] = torch.tensor(tokens)
        labels[row, :n] = torch.where(torch.tensor(mask) > 0, torch.tensor(tokens), torch.tensor(-100))
        attention[row, :n] = 1
    return ids.to(device), labels.to(device), attention.to(device)


def save_policy(model: Any, tokenizer: Any, directory: str | Path) -> Path:
    """``save_pretrained`` of both, so ``HFPolicy(directory)`` (policy.model=PATH) loads it like
    any Hugging Face model; the generation config stops on the end-of-turn token."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
