"""The one LLM access layer: messages in, text (and the raw response) out.

    from src.llm import build_chat_model
    llm = build_chat_model({"backend": "openai", "base_url": "http://host:8000/v1", "model": "m"})
    reply = llm.chat([{"role": "user", "content": "hi"}], temperature=0.7)
    reply.text, reply.raw

Two backends behind the same ``chat`` call: any OpenAI-compatible chat-completions endpoint
(``OpenAIChatClient``) and a local Hugging Face causal LM (``HFChatModel``). Data synthesis
uses it now; the agent's policies reuse it later.
"""
from .base import ChatModel, ChatResponse, LLMError, Message, check_messages
from .factory import build_chat_model
from .hf_local import HFChatModel
from .openai_client import OpenAIChatClient

__all__ = ["ChatModel", "ChatResponse", "LLMError", "Message", "check_messages", "build_chat_model",
           "HFChatModel", "OpenAIChatClient"]
