"""The OpenAI-compatible client against a real HTTP server on localhost (no mocks)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from src.llm import LLMError, OpenAIChatClient, build_chat_model

SECRET = "sk-test-never-log-this"


class Server:
    """Answers POST /v1/chat/completions from a script of (status, body) pairs; records requests."""

    def __init__(self, script):
        self.script, self.requests = list(script), []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                status, payload = outer.script.pop(0) if len(outer.script) > 1 else outer.script[0]
                data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def completion(text, model="test-model"):
    return {"id": "c1", "model": model, "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                      "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2}}


@pytest.fixture
def serve():
    servers = []

    def start(*script):
        servers.append(Server(script))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def test_chat_round_trip_sends_model_messages_sampling_and_key(serve, monkeypatch):
    server = serve((200, completion("hello")))
    monkeypatch.setenv("TEST_LLM_KEY", SECRET)
    client = OpenAIChatClient(server.url, "test-model", api_key_env="TEST_LLM_KEY", default_params={"temperature": 0.5})
    reply = client.chat([{"role": "user", "content": "hi"}], max_tokens=7)
    assert reply.text == "hello" and reply.model == "test-model" and reply.finish_reason == "stop"
    assert reply.usage == {"prompt_tokens": 5, "completion_tokens": 2}
    assert reply.raw["choices"][0]["message"]["content"] == "hello"
    req = server.requests[0]
    assert req["path"] == "/v1/chat/completions"
    assert req["body"] == {"model": "test-model", "messages": [{"role": "user", "content": "hi"}],
                           "temperature": 0.5, "max_tokens": 7}
    assert req["auth"] == f"Bearer {SECRET}"
    assert SECRET not in repr(client)


def test_retries_busy_server_then_succeeds(serve):
    server = serve((503, {"error": "busy"}), (429, {"error": "slow down"}), (200, completion("ok")))
    client = OpenAIChatClient(server.url, "m", api_key_env="", max_retries=3, backoff_s=0.01)
    assert client.chat([{"role": "user", "content": "x"}]).text == "ok"
    assert len(server.requests) == 3
    assert server.requests[0]["auth"] is None  # no key configured: no header


def test_client_error_is_not_retried_and_names_the_status(serve, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", SECRET)
    server = serve((401, {"error": "bad key"}))
    client = OpenAIChatClient(server.url, "m", api_key_env="TEST_LLM_KEY", max_retries=3, backoff_s=0.01)
    with pytest.raises(LLMError, match="HTTP 401") as err:
        client.chat([{"role": "user", "content": "x"}])
    assert len(server.requests) == 1
    assert SECRET not in str(err.value)


def test_unreachable_endpoint_fails_clearly_after_retries():
    with pytest.raises(LLMError, match=r"cannot reach .* after 3 attempts|after 3 attempts: cannot reach"):
        OpenAIChatClient("http://127.0.0.1:9/v1", "m", api_key_env="", max_retries=2, backoff_s=0.01,
                         timeout_s=2).chat([{"role": "user", "content": "x"}])


def test_malformed_body_and_bad_input_are_clear_errors(serve):
    server = serve((200, {"choices": []}))
    client = OpenAIChatClient(server.url, "m", api_key_env="", max_retries=0)
    with pytest.raises(LLMError, match="no choices"):
        client.chat([{"role": "user", "content": "x"}])
    with pytest.raises(LLMError, match="messages"):
        client.chat([{"role": "wizard", "content": "x"}])
    with pytest.raises(LLMError, match="base_url"):
        OpenAIChatClient("localhost:8000", "m")


def test_factory_builds_backends_and_rejects_typos(serve):
    server = serve((200, completion("hi")))
    llm = build_chat_model({"backend": "openai", "base_url": server.url, "model": "m", "api_key_env": ""})
    assert llm.chat([{"role": "user", "content": "q"}]).text == "hi"
    with pytest.raises(LLMError, match="unknown keys"):
        build_chat_model({"backend": "openai", "base_url": server.url, "model": "m", "temprature": 1})
    with pytest.raises(LLMError, match="unknown LLM backend"):
        build_chat_model({"backend": "carrier-pigeon"})
