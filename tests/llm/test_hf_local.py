"""The local Hugging Face backend on a tiny randomly initialised model (skipped without transformers)."""
import pytest

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")


def tiny_model_and_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    words = ["<eos>", "user", "assistant", ":", "hello", "world", "kernel", "fast"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(words), n_positions=64, n_embd=16, n_layer=1, n_head=2))
    return model, tokenizer


def test_hf_backend_generates_text_with_the_chat_interface():
    from src.llm import HFChatModel

    model, tokenizer = tiny_model_and_tokenizer()
    llm = HFChatModel(model=model, tokenizer=tokenizer, max_new_tokens=4)
    reply = llm.chat([{"role": "user", "content": "hello world"}], seed=0)
    assert isinstance(reply.text, str)
    assert reply.usage["completion_tokens"] <= 4
    assert reply.raw["backend"] == "hf"
    again = llm.chat([{"role": "user", "content": "hello world"}], seed=0)
    assert again.text == reply.text  # greedy decoding is reproducible
