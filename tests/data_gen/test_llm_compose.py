"""The LLM composer over real HTTP against a local OpenAI-style server (no mocks of the client)."""
from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from data_gen.compose import OfflineComposer, Sizing
from data_gen.crawl import Registry, crawl_torch
from data_gen.llm_compose import LLMComposer
from data_gen.program import check_task_source
from src.llm import LLMError, OpenAIChatClient

SECRET = "sk-compose-secret"
NO_ARG_OPS = {"ReLU", "Tanh", "Sigmoid", "SiLU", "Mish"}


def program_for(ops: list[str]) -> str:
    layers = "\n".join(f"        x = self.op{i}(x)" for i in range(len(ops)))
    inits = "\n".join(f"        self.op{i} = nn.{op}()" for i, op in enumerate(ops))
    return (f"import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
            f"        super().__init__()\n{inits}\n\n    def forward(self, x):\n{layers}\n        return x\n\n"
            "def get_inputs():\n    return [torch.randn(16, 64)]\n\ndef get_init_inputs():\n    return []\n")


class ComposeServer:
    """First answer to each conversation is prose without code; after feedback, a valid program."""

    def __init__(self):
        self.requests = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"body": body, "auth": self.headers.get("Authorization")})
                prompt = body["messages"][0]["content"]
                ops = re.search(r"in this order: (.*)", prompt).group(1).strip().split(" -> ")
                text = ("Sure! Here is my plan." if len(body["messages"]) == 1
                        else f"```python\n{program_for(ops)}```")
                data = json.dumps({"model": "composer-test", "choices": [
                    {"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def planner():
    usable, _ = crawl_torch()
    registry = Registry(ops=[op for op in usable if op.name in NO_ARG_OPS])
    return OfflineComposer(registry, Sizing(target_ms=(0.05, 0.5), max_batch=64), seed=3)


@pytest.fixture
def server():
    s = ComposeServer()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def test_llm_composer_writes_valid_tasks_with_feedback_and_logs(planner, server, tmp_path, monkeypatch):
    monkeypatch.setenv("COMPOSE_KEY", SECRET)
    client = OpenAIChatClient(server.url, "composer-test", api_key_env="COMPOSE_KEY", max_retries=0)
    log = tmp_path / "llm_responses.jsonl"
    composer = LLMComposer(client, planner, log, sampling={"temperature": 0.7})
    cands = [composer.compose(i) for i in range(3)]
    for cand in cands:
        assert not cand.error, cand.error
        check_task_source(cand.code)
        assert cand.composer == "llm" and cand.data_source == f"torch#{len(cand.ops)}"
        assert all(f"nn.{op}()" in cand.code for op in cand.ops)
    # one rejected answer + one accepted per task; the feedback names the problem
    assert len(server.requests) == 6
    assert "not usable" in server.requests[1]["body"]["messages"][-1]["content"]
    assert server.requests[0]["body"]["temperature"] == 0.7
    assert server.requests[0]["auth"] == f"Bearer {SECRET}"
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(entries) == 6 and entries[1]["raw"]["model"] == "composer-test"
    assert SECRET not in log.read_text()


def test_unreachable_endpoint_stops_the_composer(planner, tmp_path):
    client = OpenAIChatClient("http://127.0.0.1:9/v1", "m", api_key_env="", max_retries=0, timeout_s=2)
    composer = LLMComposer(client, planner, tmp_path / "log.jsonl", max_attempts=1, max_consecutive_errors=2)
    assert "LLM gave no usable program" in composer.compose(0).error
    with pytest.raises(LLMError, match="2 LLM calls in a row failed"):
        composer.compose(1)
    assert "cannot reach" in (tmp_path / "log.jsonl").read_text()
