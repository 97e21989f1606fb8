"""Agent test support: a small real tokenizer with a Qwen-style chat template, a tiny real Llama
with an ids-only tokenizer for generation tests, and one sandbox pool (cpu backend, cheap timing,
the session's cache) shared by every agent test."""
from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pytest

from sandbox.config import SandboxConfig, TimingConfig
from sandbox.pool import SandboxPool

# Qwen2.5-style ChatML: tools listed in the system turn, tool results as <tool_response> user turns.
CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}"
    "{{ '<|im_start|>system' + nl + m.content }}"
    "{%- if tools -%}{{ nl + '# Tools' + nl }}{%- for t in tools -%}{{ t.function.name + nl }}{%- endfor -%}{%- endif -%}"
    "{{ '<|im_end|>' + nl }}"
    "{%- elif m.role == 'tool' -%}"
    "{{ '<|im_start|>user' + nl + '<tool_response>' + nl + m.content + nl + '</tool_response><|im_end|>' + nl }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + m.role + nl + m.content + '<|im_end|>' + nl }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant' + nl }}{%- endif -%}"
)
SPECIALS = ("<|im_start|>", "<|im_end|>")
SPECIAL_RE = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")


class AsciiChatTokenizer:
    """One token per ASCII character (non-ASCII becomes '?') plus two special tokens. Encoding
    is canonical, so decode -> encode gives back any id sequence a model can emit; the chat
    template is a real Jinja template rendered the way transformers renders one."""

    vocab_size = 128 + len(SPECIALS)
    pad_token_id = None

    def __init__(self, chat_template: str = CHAT_TEMPLATE):
        self.chat_template = chat_template
        self._template = jinja2.Environment().from_string(chat_template)
        self.eos_token_id = 128 + SPECIALS.index("<|im_end|>")

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids: list[int] = []
        for piece in SPECIAL_RE.split(text):
            if piece in SPECIALS:
                ids.append(128 + SPECIALS.index(piece))
            else:
                ids.extend(ord(c) if ord(c) < 128 else ord("?") for c in piece)
        return ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        out = []
        for i in (ids.tolist() if hasattr(ids, "tolist") else ids):
            if i >= 128:
                out.append("" if skip_special_tokens else SPECIALS[i - 128])
            else:
                out.append(chr(i))
        return "".join(out)

    def apply_chat_template(self, messages, tools=None, add_generation_prompt=False, tokenize=True,
                            return_dict=False, **kwargs):
        text = self._template.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                     nl="\n")
        return self.encode(text) if tokenize else text


@pytest.fixture
def chat_tokenizer() -> AsciiChatTokenizer:
    return AsciiChatTokenizer()


@pytest.fixture
def ascii_tokenizer_with():
    """AsciiChatTokenizer with another chat template: ``ascii_tokenizer_with(template)``."""
    return AsciiChatTokenizer


class IdsTokenizer:
    """Ids in, digits out: enough tokenizer for generate-level tests (no chat template)."""

    eos_token_id, pad_token_id = 2, 0

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(str(i) for i in ids)


@pytest.fixture
def ids_tokenizer() -> IdsTokenizer:
    return IdsTokenizer()


@pytest.fixture
def tiny_llama():
    """A factory of tiny random Llamas in float64 (exact comparisons), eos 2, pad 0."""
    def make(vocab: int = 64, seed: int = 0, **config):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(seed)
        sizes = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=256)
        cfg = LlamaConfig(vocab_size=vocab, bos_token_id=1, eos_token_id=2, pad_token_id=0, **{**sizes, **config})
        return LlamaForCausalLM(cfg).double().eval()

    return make


@pytest.fixture(scope="session")
def agent_sandbox_config(sandbox_cache: Path) -> SandboxConfig:
    """CPU backend, no torch.compile baseline, a few timed runs: tests check verdicts, not speed."""
    return SandboxConfig(backend="cpu", cache_dir=str(sandbox_cache), compile_baseline=False,
                         timing=TimingConfig(warmup=1, warmup_ms=0.0, repeats=3), build_workers=1)


@pytest.fixture(scope="session")
def agent_pool(agent_sandbox_config: SandboxConfig):
    with SandboxPool(agent_sandbox_config) as pool:
        yield pool
